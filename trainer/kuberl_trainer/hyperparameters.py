"""Hyperparameters per algorithm: the numerics, validated like the rest of `spec.trainer`.

snake_case names as RL practitioners know them from RLlib, Stable-Baselines3 and CleanRL; unknown
names are rejected. Every field says what it does and, where it is not kuberl's own choice, where
its default comes from. Light like config.py: no ray, torch or gymnasium.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Upper bounds where a larger count would not train but crash (a replay buffer is allocated whole
# at its capacity; a batch is drawn at once) or never finish an iteration: far above what any
# published setting uses (Ape-X replays 2M transitions, IMPALA learns on batches of 32 x 80).
MAX_BUFFER_SIZE = 100_000_000
MAX_BATCH_SIZE = 1_000_000


class NetworkHyperparameters(BaseModel):
    """Base of every algorithm's hyperparameters (snake_case, unknown keys rejected): its networks
    and their step size."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )

    learning_rate: float = Field(5e-4, gt=0.0, le=1.0)
    """Adam step size."""

    hidden_sizes: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [64, 64], min_length=1, max_length=8
    )
    """Widths of the hidden layers of every network (policy, value and Q)."""

    activation: Literal["tanh", "relu"] = "tanh"
    """Nonlinearity between hidden layers."""


class Hyperparameters(NetworkHyperparameters):
    """Base of the algorithms that learn from sampled env steps: discounted, in fragments of
    rollout_length steps, by clipped gradient steps."""

    gamma: float = Field(0.99, gt=0.0, le=1.0)
    """Discount factor applied to future rewards."""

    rollout_length: int = Field(32, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration. The iteration's batch
    is rollout_length x envsPerWorker x max(1, replicas) env steps, less the steps that only
    reset an env after its episode ended (no transitions, so neither learned from nor counted)."""

    max_grad_norm: float | None = Field(0.5, gt=0.0)
    """Clip the global gradient norm to this value; null disables clipping."""


class PGHyperparameters(Hyperparameters):
    """Vanilla policy gradient (REINFORCE on discounted returns-to-go)."""

    learning_rate: float = Field(4e-3, gt=0.0, le=1.0)
    """Adam step size."""

    rollout_length: int = Field(200, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration."""

    entropy_coeff: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the loss."""

    normalize_returns: bool = True
    """Standardize returns within the batch before the gradient step (a variance-reducing
    baseline)."""


class A2CHyperparameters(Hyperparameters):
    """Synchronous advantage actor-critic."""

    learning_rate: float = Field(7e-4, gt=0.0, le=1.0)
    """Adam step size."""

    rollout_length: int = Field(8, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda: 1.0 is the n-step advantage of the A2C paper, lower trades bias for variance."""

    vf_coeff: float = Field(0.5, ge=0.0)
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    entropy_coeff: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the loss."""

    normalize_advantages: bool = False
    """Standardize advantages within the batch."""


class PPOHyperparameters(Hyperparameters):
    """Proximal policy optimization with the clipped surrogate objective."""

    learning_rate: float = Field(3e-4, gt=0.0, le=1.0)
    """Adam step size (the start value when schedule is linear)."""

    rollout_length: int = Field(128, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE lambda."""

    clip_range: float = Field(0.2, gt=0.0, le=1.0)
    """Clip parameter of the surrogate objective (the start value when schedule is linear)."""

    vf_coeff: float = Field(0.5, ge=0.0)
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    vf_clip_range: float | None = Field(None, gt=0.0)
    """Clip value predictions to this distance from the old ones; null disables it."""

    entropy_coeff: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the loss."""

    num_epochs: int = Field(10, ge=1, le=1000)
    """Passes of SGD over each iteration's batch."""

    minibatch_size: int = Field(64, ge=1)
    """Samples per SGD minibatch (capped at the batch size)."""

    normalize_advantages: bool = True
    """Standardize advantages within each minibatch."""

    target_kl: float | None = Field(None, gt=0.0)
    """Stop the epochs of an iteration early once the approximate KL exceeds this; null never
    stops early."""

    schedule: Literal["constant", "linear"] = "constant"
    """How learning_rate and clip_range evolve: linear decays both to zero at stop.timesteps."""

    initial_log_std: float = Field(0.0, ge=-5.0, le=2.0)
    """Starting log standard deviation of the Gaussian policy (continuous actions only)."""


class ReplayHyperparameters(Hyperparameters):
    """What the replay optimizers read: the buffer, its minibatches, n-step transitions and the
    target network's schedule (DQN, Ape-X, SAC)."""

    buffer_size: int = Field(100_000, ge=1, le=MAX_BUFFER_SIZE)
    """Capacity of the replay buffer in transitions."""

    batch_size: int = Field(64, ge=1, le=MAX_BATCH_SIZE)
    """Transitions per gradient step."""

    learning_starts: int = Field(1_000, ge=0)
    """Env steps collected before the first gradient step."""

    target_update_interval: int = Field(128, ge=1)
    """Gradient steps between updates of the target network."""

    n_step: int = Field(1, ge=1, le=100)
    """Bootstrap after this many rewards (n-step returns)."""

    prioritized_replay: bool = False
    """Sample transitions in proportion to their TD error (prioritized experience replay)."""

    prioritized_replay_alpha: float = Field(0.6, ge=0.0, le=1.0)
    """How strongly priorities skew sampling: 0 is uniform."""

    prioritized_replay_beta: float = Field(0.4, ge=0.0, le=1.0)
    """Importance-sampling correction exponent: 1 fully corrects the sampling bias."""

    prioritized_replay_eps: float = Field(1e-6, gt=0.0)
    """Added to every priority so no transition becomes unreachable."""

    @abstractmethod
    def gradient_steps_for(self, env_steps: int) -> int:
        """Gradient steps a synchronous iteration takes after sampling `env_steps` env steps."""


class DQNHyperparameters(ReplayHyperparameters):
    """Deep Q-learning with double Q, dueling heads, n-step returns and prioritized replay."""

    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    """Adam step size."""

    hidden_sizes: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [256, 256], min_length=1, max_length=8
    )
    """Widths of the hidden layers of the Q-network."""

    activation: Literal["tanh", "relu"] = "relu"
    """Nonlinearity between hidden layers."""

    max_grad_norm: float | None = Field(10.0, gt=0.0)
    """Clip the global gradient norm to this value; null disables clipping."""

    rollout_length: int = Field(32, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration."""

    gradient_steps: int = Field(128, ge=1, le=100_000)
    """Gradient steps per iteration once learning has started."""

    target_update_interval: int = Field(128, ge=1)
    """Gradient steps between copies of the online network into the target network."""

    epsilon_initial: float = Field(1.0, ge=0.0, le=1.0)
    """Exploration rate at the first env step."""

    epsilon_final: float = Field(0.04, ge=0.0, le=1.0)
    """Exploration rate after epsilon_timesteps env steps."""

    epsilon_timesteps: int = Field(10_000, ge=1)
    """Env steps over which epsilon decays linearly."""

    double_q: bool = True
    """Pick the next action with the online network, evaluate it with the target (double DQN)."""

    dueling: bool = False
    """Split the Q head into state value and advantage streams (dueling DQN)."""

    n_step: int = Field(3, ge=1, le=100)
    """Bootstrap after this many rewards (n-step returns). 3 propagates rewards faster than 1:
    on CartPole-v1 it solved every seed tried within 25k env steps, 1-step took up to 54k."""

    def gradient_steps_for(self, env_steps: int) -> int:
        return self.gradient_steps


class A3CHyperparameters(A2CHyperparameters):
    """Asynchronous advantage actor-critic (Mnih et al. 2016): A2C's loss, with every worker
    computing gradients on its own samples and the driver applying them as they arrive."""

    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    """Adam step size (RLlib's A3C used 1e-4 with 10-step fragments on Atari; short CartPole
    fragments learn faster with a larger step)."""

    rollout_length: int = Field(10, ge=1, le=100_000)
    """Env steps taken by every env of a worker per gradient (RLlib's rollout_fragment_length 10;
    the A3C paper's t_max is 5)."""

    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE lambda. The A3C paper's n-step advantages (and RLlib's A3C) are 1.0; on CartPole-v1
    with 2 workers 0.95 reached a return of 400 within 70k env steps on seeds 0-5, 1.0 needed up
    to 116k."""

    entropy_coeff: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the loss. The A3C paper's beta = 0.01 (Atari, clipped
    rewards) held 1 CartPole-v1 run in 6 on a plateau of returns near 200 with 2 workers beside
    another run (200k env steps, with 10- or 20-step fragments or a step size of 5e-4 alike); 0
    reached 400 within 27-91k env steps on seeds 0-9 there, and with 8 workers within 46-48k
    (0.01: 125k)."""

    max_grad_norm: float | None = Field(40.0, gt=0.0)
    """Clip each worker's gradient norm to this value (RLlib's A3C grad_clip 40); null disables
    clipping."""


class APEXHyperparameters(DQNHyperparameters):
    """Ape-X DQN (Horgan et al. 2018): DQN with many actors, each exploring at its own fixed
    epsilon, feeding sharded prioritized replay that one learner samples from."""

    prioritized_replay: bool = True
    """Sample transitions in proportion to their TD error; Ape-X is built on it."""

    worker_epsilon: float = Field(0.4, ge=0.0, le=1.0)
    """Base exploration rate of the per-worker schedule: remote worker i of N (1..N) explores with
    epsilon = worker_epsilon ** (1 + worker_epsilon_alpha * (i - 1) / max(1, N - 1)); the
    driver's local worker acts greedily (the Ape-X paper's 0.4). Progress rows report the episodes
    of the least exploring third of the workers (as RLlib's Ape-X did)."""

    worker_epsilon_alpha: float = Field(7.0, ge=0.0)
    """Exponent spread of the per-worker schedule (the Ape-X paper's alpha = 7)."""

    training_intensity: float | None = Field(8.0, gt=0.0)
    """Transitions replayed to the learner per transition sampled (RLlib's training_intensity):
    AsyncReplay holds the two to this ratio, pausing new sample calls while the learner is
    behind and replay while it is ahead, so that a timestep budget means the same on any machine.
    Null lets both run free as in the Ape-X paper, where the ratio is whatever the learner's speed
    against the workers' makes it. kuberl's 8: on CartPole-v1 with 2 workers, seeds 0-4 reached
    a return of 400 within 85k env steps; 16 within 60k env steps but with 1.4x the learner
    steps, the bottleneck."""


class IMPALAHyperparameters(Hyperparameters):
    """Importance-weighted actor-learner architecture (Espeholt et al. 2018): an actor-critic that
    learns while the workers sample, correcting for their policy lag with V-trace.

    Defaults tuned on CartPole-v1: a return of 400 within 140-225k env steps on every seed tried
    with 2 workers of 8 envs (0-2), 2 of 16 (0-4) and 1 of 8 (0-2), where RLlib's defaults (entropy
    0.01, raw advantages) had not got there by 300k."""

    learning_rate: float = Field(5e-4, gt=0.0, le=1.0)
    """Adam step size (RLlib's IMPALA 5e-4). 1e-3 learned faster with 8 envs per worker (70-160k
    env steps to 400) but collapsed the policy to one action on 1 seed in 3 with 16, where the
    learner falls further behind the workers; 2e-3 collapsed it on every seed."""

    rollout_length: int = Field(32, ge=1, le=100_000)
    """Env steps taken by every env of a worker per sample call; V-trace runs over sequences of
    this length (RLlib's rollout_fragment_length 50; 32 makes the learner's batches arrive
    sooner)."""

    train_batch_size: int = Field(500, ge=1, le=MAX_BATCH_SIZE)
    """Env steps per learner step: sample calls are concatenated until they hold at least this
    many (RLlib's train_batch_size 500)."""

    vf_coeff: float = Field(0.5, ge=0.0)
    """Weight of the value-function loss, 0.5 (vs - V)^2 (RLlib's vf_loss_coeff 0.5)."""

    entropy_coeff: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the loss (0 as in RLlib's tuned CartPole example; with its
    IMPALA default 0.01 CartPole had not reached 400 by 300k env steps)."""

    vtrace_clip_rho_threshold: float = Field(1.0, gt=0.0)
    """rho-bar: clip of the importance weights in the V-trace value targets (the paper's 1.0)."""

    vtrace_clip_pg_rho_threshold: float = Field(1.0, gt=0.0)
    """Clip of the importance weights in the policy gradient's advantages (the paper's 1.0)."""

    vtrace_clip_c_threshold: float = Field(1.0, gt=0.0)
    """c-bar: clip of the trace-cutting coefficients c_s in the V-trace recursion (the paper's
    1.0)."""

    normalize_advantages: bool = True
    """Standardize the V-trace advantages within each (mini)batch. RLlib's IMPALA and APPO do
    not; on CartPole it made learning reliable (without it, at any learning rate tried, the env
    steps to 400 ranged from 70k to past 300k)."""

    max_grad_norm: float | None = Field(40.0, gt=0.0)
    """Clip the global gradient norm to this value (RLlib's IMPALA grad_clip 40); null disables
    clipping."""

    minibatch_size: int | None = Field(None, ge=1)
    """Samples per SGD step: a learner batch larger than this is learned on in minibatches
    (RLlib's minibatch_size). Null (the default) lets the policy lag decide: a learner batch of
    R env steps that lags L learner steps (the mean over its sample calls) is learned on in
    k = min(R // train_batch_size, lag_sgd_steps // L) minibatches (at least 1), so that few
    workers with many envs each take more than one SGD step per batch, and many workers, whose
    batches lag more, take whole-batch steps. On CartPole with 64 envs per worker: 2 workers (lag
    2-4, 2-4 minibatches) reached 475 within 198-498k env steps in 28 runs (median 287k, 24
    within 400k; seeds 0-5, alone and beside a CPU-bound process), where whole batches took
    585k-2M+; 12 workers (lag 10-16) take whole batches, since 512-row minibatches there never
    learned."""

    lag_sgd_steps: int = Field(8, ge=1, le=1000)
    """With minibatch_size null: the SGD steps a batch may lag, counting every minibatch as a
    step, that the split into minibatches keeps to (see minibatch_size). With 16, 2 workers x 64
    envs on an idle machine (lag about 4, 4 minibatches) collapsed the policy to returns near 10
    on their way and took 483k-1M+ env steps to 475 (seeds 0-5); with 32, 12 workers x 64 envs
    (lag 12-13) took 2 minibatches per batch and the policy fell apart (returns of 110 and 194
    after 3M env steps, seeds 0-1)."""


class APPOHyperparameters(IMPALAHyperparameters):
    """Asynchronous PPO: PPO's clipped surrogate on IMPALA's execution, with V-trace targets.

    IMPALA's defaults plus several clipped epochs of minibatches per batch: on CartPole-v1 a return
    of 400 within 70-95k env steps on seeds 0-2 with 1 and 2 workers (one epoch: 80-220k), on
    Pendulum-v1 (gamma 0.9) -300 within 150-200k, where one epoch, or four of whole-batch steps,
    had not got there by 400k (seed 0). On Pendulum the return fell back from near -300 in 2 of
    12 runs; clipped at 0.2 instead, 14 runs of 14 reached -300 within 124-245k."""

    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    """Adam step size (RLlib's APPO 5e-4): the clipped surrogate keeps 1e-3 stable, at 70-100k
    env steps to 400 on CartPole-v1 with 2 workers of 8 or 16 envs."""

    clip_range: float = Field(0.4, gt=0.0, le=1.0)
    """Clip parameter of the surrogate objective (RLlib's APPO clip_param 0.4)."""

    num_epochs: int = Field(4, ge=1, le=1000)
    """Passes of SGD over each learner batch, each with V-trace targets from the current
    networks: IMPACT's replay coefficient K, the draws of each batch from its circular buffer
    (RLlib's APPO circular_buffer_iterations_per_batch 2, its tuned CartPole examples 6)."""

    minibatch_size: int | None = Field(128, ge=1)
    """Samples per SGD minibatch (capped at the learner batch); null splits each pass over a
    batch as IMPALA's null does, into as many minibatches as the batch's lag allows."""

    target_update_interval: int | None = Field(None, ge=1)
    """IMPACT's target network, the surrogate's reference policy: learner steps between its
    refreshes (RLlib's APPO: every 32 train batches learned on). Null (the default) has no target
    network: the ratio is to the behaviour policy that sampled the batch. Measured on CartPole with
    12 workers x 64 envs, a target refreshed after every learner step took 612k env steps to 475
    where the behaviour policy took 418-440k (seeds 0-2), and on Pendulum (2 x 8, clip 0.2) it
    missed -300 in 400k steps on 1 seed of 3, where the behaviour policy reached it within
    166-262k on all three."""


class SACHyperparameters(ReplayHyperparameters):
    """Soft actor-critic (Haarnoja et al. 2018): a squashed-Gaussian actor, twin Q critics with
    polyak-averaged targets, and an entropy coefficient tuned towards a target entropy. Defaults
    as in Stable-Baselines3 and RLlib unless a field says otherwise."""

    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    """Adam step size of the actor, the critics and the entropy coefficient alike (rl-zoo's
    tuned Pendulum; Stable-Baselines3's default is 3e-4)."""

    hidden_sizes: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [256, 256], min_length=1, max_length=8
    )
    """Widths of the hidden layers of the actor and of each critic."""

    activation: Literal["tanh", "relu"] = "relu"
    """Nonlinearity between hidden layers."""

    max_grad_norm: float | None = Field(None, gt=0.0)
    """Clip the global gradient norm (actor, critics and entropy coefficient together) to this
    value; null, the default, disables clipping."""

    rollout_length: int = Field(8, ge=1, le=100_000)
    """Env steps taken by every env of every rollout worker per iteration: the policy acts with
    weights this many steps old at most."""

    buffer_size: int = Field(1_000_000, ge=1, le=MAX_BUFFER_SIZE)
    """Capacity of the replay buffer in transitions."""

    batch_size: int = Field(256, ge=1, le=MAX_BATCH_SIZE)
    """Transitions per gradient step."""

    learning_starts: int = Field(1_000, ge=0)
    """Env steps collected before the first gradient step (Stable-Baselines3 100, RLlib 1,500),
    so that the first minibatches do not all come from the first episodes."""

    gradient_steps_per_env_step: float = Field(1.0, gt=0.0, le=1000.0)
    """Gradient steps per env step sampled, once learning has started: an iteration takes
    round(this x its env steps). 1 is Stable-Baselines3's train_freq 1 with gradient_steps 1
    (RLlib's training_intensity is this times batch_size)."""

    tau: float = Field(0.005, gt=0.0, le=1.0)
    """Polyak coefficient: every target update moves the target critics this share of the way
    to the online ones (1 copies them)."""

    target_update_interval: int = Field(1, ge=1)
    """Gradient steps between updates of the target critics."""

    initial_alpha: float = Field(1.0, gt=0.0)
    """Entropy coefficient at the start; it is then learned (as log alpha)."""

    target_entropy: float | None = None
    """Entropy the coefficient steers the policy towards, in nats of the squashed actions in
    [-1, 1]; null is -(number of action dimensions)."""

    def gradient_steps_for(self, env_steps: int) -> int:
        return round(self.gradient_steps_per_env_step * env_steps)


class ESHyperparameters(NetworkHyperparameters):
    """Evolution strategies (Salimans et al. 2017, as RLlib's ES): the rollout workers evaluate
    antithetic pairs of perturbed parameters, theta + noise_stdev * eps and theta - noise_stdev *
    eps, one episode each with the deterministic policy, eps read from a noise table that the
    driver makes once and shares through Ray's object store; they return only where eps starts in
    the table and the two returns. The driver ranks the returns and takes an Adam step along the
    gradient they estimate. No discount, no fragments: whole episodes are what is scored.

    Defaults tuned on CartPole-v1 with 8 envs per worker: the unperturbed policy's greedy return
    reached 475 within 18-168k env steps on seeds 0-7 sampling in the driver, and within 41-113k
    on seeds 0-3 with 2 rollout workers. Without normalize_observations it took up to 322k; with
    noise_stdev 0.05, up to 420k."""

    learning_rate: float = Field(0.02, gt=0.0, le=1.0)
    """Adam step size on the flat parameter vector (RLlib's ES stepsize 0.01; 0.01 and 0.05 were
    no faster on CartPole-v1)."""

    hidden_sizes: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [16], min_length=1, max_length=8
    )
    """Widths of the hidden layers of the policy network. ES searches a space as large as the
    network's parameter count, so small networks learn in fewer episodes."""

    noise_stdev: float = Field(0.02, gt=0.0)
    """Standard deviation of the parameter perturbations (RLlib's ES noise_stdev 0.02)."""

    episodes_per_batch: int = Field(50, ge=2, le=1_000_000)
    """Perturbed episodes per update, in antithetic pairs, so an even number (RLlib's ES 1,000,
    its CartPole example 50). Each call on a worker evaluates one episode per env of the worker
    (envsPerWorker rounded up to a pair), so an update covers whole calls: up to
    envsPerWorker - 1 episodes more than this."""

    noise_size: int = Field(25_000_000, ge=1_000, le=1_000_000_000)
    """Entries (float32) of the shared noise table: 100 MB at the default, drawn once by the driver
    from a fixed seed and put once in Ray's object store, where every worker on a node reads the
    same copy. A perturbation is a slice as long as the network's parameter vector, starting at a
    random entry, so the table must be far longer than that (RLlib's ES 250M, 1 GB, for networks
    of 10^5 parameters; its CartPole example 25M)."""

    l2_coeff: float = Field(0.005, ge=0.0)
    """L2 regularisation: l2_coeff x the parameters join the negated gradient estimate before the
    Adam step (RLlib's ES l2_coeff 0.005)."""

    normalize_observations: bool = True
    """Standardize observations by the mean and standard deviation of every observation the
    workers have acted on so far (the ES paper's normalization, RLlib's MeanStdFilter). The driver
    adds each batch's statistics after its update; they travel to the workers with the weights."""

    @field_validator("episodes_per_batch")
    @classmethod
    def _whole_pairs(cls, episodes: int) -> int:
        if episodes % 2:
            raise ValueError(
                f"{episodes} is odd: every perturbation is evaluated as a pair of episodes "
                "(theta + noise and theta - noise), so give an even number"
            )
        return episodes


class Mutation(BaseModel):
    """How explore changes one hyperparameter of the inner trainer: between `min` and `max`, or
    among `values`. As Ray Tune's PBT: a resampled value is drawn from that range (log-uniform
    with `log`) or a random one of the values; otherwise a number is multiplied by a random one
    of perturbation_factors and kept within the range, and a listed value moves to a neighbour."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )

    min: float | None = None
    """Smallest value explore may set."""

    max: float | None = None
    """Largest value explore may set."""

    log: bool = False
    """Resample on a log scale (for step sizes and other scale parameters); min must be > 0."""

    values: list[float] | None = Field(None, min_length=2)
    """The values explore chooses among, in order (neighbours are adjacent); instead of a range."""

    @model_validator(mode="after")
    def _range_or_values(self) -> Mutation:
        if self.values is not None:
            if self.min is not None or self.max is not None or self.log:
                raise ValueError("give either values or min and max, not both")
            return self
        if self.min is None or self.max is None:
            raise ValueError("give min and max (or values)")
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        if self.log and self.min <= 0:
            raise ValueError(f"log needs min > 0, got {self.min:g}")
        return self


class PBTHyperparameters(BaseModel):
    """Population-based training (Jaderberg et al. 2017, as Ray Tune's synchronous PBT): a
    population of trials, each a whole inner trainer (`trainer`) with its own rollout workers in a
    Ray actor, trained in rounds of perturbation_interval env steps each. After every round the
    trials in the bottom quantile exploit one of the top quantile (copy its weights and its
    hyperparameters) and explore (change the copied hyperparameters as their mutations say)."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )

    population: int = Field(4, ge=2, le=256)
    """Trials trained side by side."""

    perturbation_interval: int = Field(20_000, ge=1)
    """Env steps each trial samples in a round, between two exploit-and-explore steps (a trial's
    round ends with the first iteration that reaches it)."""

    quantile_fraction: float = Field(0.25, gt=0.0, le=0.5)
    """Share of the population (rounded up) in the bottom quantile, replaced after every round,
    and in the top quantile they copy (Ray Tune's default 0.25)."""

    resample_probability: float = Field(0.25, ge=0.0, le=1.0)
    """Chance that explore draws a hyperparameter anew from its mutation instead of perturbing
    the copied value (Ray Tune's default 0.25)."""

    perturbation_factors: list[Annotated[float, Field(gt=0.0)]] = Field(
        default_factory=lambda: [0.8, 1.2], min_length=1
    )
    """Factors explore multiplies a numeric hyperparameter by, one drawn at random (Ray Tune's
    default 0.8 and 1.2)."""

    mutations: dict[str, Mutation] = Field(default_factory=dict)
    """The inner trainer's hyperparameters explore changes, by name (for example learning_rate:
    {min: 1.0e-5, max: 1.0e-2, log: true}). The others are copied unchanged with the weights."""

    trials: list[dict[str, Any]] = Field(default_factory=list)
    """Hyperparameters of the inner trainer that trial i (from 0) starts with instead of the inner
    spec's; trials past the list start from the inner spec's. At most population entries."""

    cpus_per_trial: float = Field(1.0, gt=0.0)
    """CPUs each trial's Ray actor (its learner, which also samples when rolloutWorkers.replicas
    is 0) asks of Ray; its rollout workers ask for their own."""

    @model_validator(mode="after")
    def _trials_fit(self) -> PBTHyperparameters:
        if len(self.trials) > self.population:
            raise ValueError(
                f"trials: {len(self.trials)} entries for a population of {self.population}"
            )
        return self
