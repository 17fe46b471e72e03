"""The off-policy algorithms, which learn from a replay buffer: DQN, Ape-X and SAC."""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated

from pydantic import Field

from kuberl_contract.hyperparameters.base import (
    EXPLORES_BY_SAMPLING,
    Activation,
    BatchSize,
    BufferSize,
    Coefficient,
    Count,
    Fraction,
    GradClip,
    HiddenSizes,
    Hyperparameters,
    NStep,
    Positive,
    PositiveFraction,
    StepSize,
    StepsPerIteration,
    explores_otherwise,
)
from kuberl_contract.hyperparameters.known_as import TRAINER, KnownAs, NoEquivalent


class ReplayHyperparameters(Hyperparameters):
    """What the replay optimizers read: the buffer, its minibatches, n-step transitions and the
    target network's schedule (DQN, Ape-X, SAC)."""

    buffer_size: Annotated[
        BufferSize,
        KnownAs(
            "capacity in transitions; prioritized_replay and its alpha, beta and eps are "
            "hyperparameters of their own",
            rllib="replay_buffer_config",
        ),
    ] = 100_000
    """Capacity of the replay buffer in transitions."""

    batch_size: Annotated[
        BatchSize,
        KnownAs(
            "transitions replayed per gradient step",
            rllib=(
                "train_batch_size",
                "train_batch_size_per_learner",
                "sgd_minibatch_size",
                "minibatch_size",
            ),
        ),
    ] = 64
    """Transitions per gradient step."""

    learning_starts: Annotated[
        int,
        KnownAs(
            "env steps sampled before the first update",
            rllib="num_steps_sampled_before_learning_starts",
        ),
    ] = Field(1_000, ge=0)
    """Env steps collected before the first gradient step."""

    target_update_interval: Annotated[
        Count,
        KnownAs(
            "counted in gradient steps, where RLlib counts env steps sampled: divide by the env "
            "steps sampled per gradient step",
            rllib="target_network_update_freq",
        ),
    ] = 128
    """Gradient steps between updates of the target network."""

    n_step: Annotated[
        NStep, KnownAs("rewards summed before bootstrapping, for n-step returns", sb3="n_steps")
    ] = 1
    """Bootstrap after this many rewards (n-step returns)."""

    prioritized_replay: bool = False
    """Sample transitions in proportion to their TD error (prioritized experience replay)."""

    prioritized_replay_alpha: Fraction = 0.6
    """How strongly priorities skew sampling: 0 is uniform."""

    prioritized_replay_beta: Fraction = 0.4
    """Importance-sampling correction exponent: 1 fully corrects the sampling bias."""

    prioritized_replay_eps: Positive = 1e-6
    """Added to every priority so no transition becomes unreachable."""

    no_equivalent = (
        NoEquivalent(
            "it bootstraps after n_step rewards, without GAE",
            sb3="gae_lambda",
            rllib=("lambda", "lambda_"),
        ),
        NoEquivalent("it learns Q-values, with no advantages", sb3="normalize_advantage"),
    )

    @abstractmethod
    def gradient_steps_for(self, env_steps: int) -> int:
        """Gradient steps a synchronous iteration takes after sampling `env_steps` env steps."""


class DQNHyperparameters(ReplayHyperparameters):
    """Deep Q-learning with double Q, dueling heads, n-step returns and prioritized replay."""

    learning_rate: StepSize = 1e-3
    """Adam step size."""

    hidden_sizes: HiddenSizes = Field(default_factory=lambda: [256, 256])
    """Widths of the hidden layers of the Q-network."""

    activation: Activation = "relu"
    """Nonlinearity between hidden layers."""

    max_grad_norm: GradClip = 10.0
    """Clip the global gradient norm to this value; null disables clipping."""

    rollout_length: Annotated[
        StepsPerIteration,
        KnownAs(
            "env steps of every env per iteration, between two rounds of gradient_steps "
            "gradient steps; SB3's train_freq also counts steps of each env",
            sb3="train_freq",
        ),
    ] = 32
    """Env steps taken by every env of every rollout worker per iteration."""

    gradient_steps: Annotated[
        StepsPerIteration,
        KnownAs(
            "gradient steps per iteration: training_intensity x the iteration's env steps / "
            "batch_size",
            rllib="training_intensity",
        ),
    ] = 128
    """Gradient steps per iteration once learning has started."""

    target_update_interval: Count = 128
    """Gradient steps between copies of the online network into the target network.
    Stable-Baselines3's DQN counts its target_update_interval in env steps sampled, as RLlib's
    target_network_update_freq does."""

    epsilon_initial: Annotated[
        Fraction,
        KnownAs("epsilon at the start", sb3="exploration_initial_eps"),
        KnownAs(
            "epsilon decays linearly from epsilon_initial to epsilon_final over "
            "epsilon_timesteps env steps",
            rllib=("exploration_config", "epsilon"),
        ),
    ] = 1.0
    """Exploration rate at the first env step."""

    epsilon_final: Annotated[
        Fraction,
        KnownAs("epsilon after epsilon_timesteps env steps", sb3="exploration_final_eps"),
    ] = 0.04
    """Exploration rate after epsilon_timesteps env steps."""

    epsilon_timesteps: Annotated[
        Count,
        KnownAs(
            f"env steps over which epsilon decays: exploration_fraction x {TRAINER}.stop.timesteps",
            sb3="exploration_fraction",
        ),
    ] = 10_000
    """Env steps over which epsilon decays linearly."""

    double_q: bool = True
    """Pick the next action with the online network, evaluate it with the target (double DQN)."""

    dueling: bool = False
    """Split the Q head into state value and advantage streams (dueling DQN)."""

    n_step: NStep = 3
    """Bootstrap after this many rewards (n-step returns). 3 carries a reward three steps back
    per update where 1 carries it one, and learns in fewer env steps."""

    no_equivalent = (
        NoEquivalent(
            "gradient_steps sets its gradient steps per iteration",
            sb3="n_epochs",
            rllib=("num_sgd_iter", "num_epochs"),
        ),
        NoEquivalent(
            "its loss is the TD error of its Q-values alone", sb3="vf_coef", rllib="vf_loss_coeff"
        ),
        NoEquivalent(
            "Q-learning has no entropy bonus; it explores epsilon-greedily (epsilon_initial, "
            "epsilon_final, epsilon_timesteps)",
            sb3="ent_coef",
        ),
        NoEquivalent(
            "it copies the online network into the target (a tau of 1) every "
            "target_update_interval gradient steps",
            sb3="tau",
            rllib="tau",
        ),
    )

    def gradient_steps_for(self, env_steps: int) -> int:
        return self.gradient_steps


class APEXHyperparameters(DQNHyperparameters):
    """Ape-X DQN (Horgan et al. 2018): DQN with many actors, each exploring at its own fixed
    epsilon, feeding sharded prioritized replay that one learner samples from."""

    gamma: PositiveFraction = 0.995
    """Discount factor applied to future rewards: 0.995, where DQN and the Ape-X paper have 0.99
    (R2D2 0.997). Ape-X reports its nearly greedy workers, which act on the order of their
    Q-values alone; once solved, such a worker fails by a drift whose cost lies further ahead
    than 0.99 weighs (a failure 200 steps ahead counts 0.13 of its cost at 0.99, 0.37 at 0.995).
    bench/README.md (solved_hold) has the measurements."""

    buffer_size: BufferSize = 2_000_000
    """Capacity of the replay memory in transitions, split evenly across the replay shards: 2M,
    as in the Ape-X paper and RLlib, where DQN has 100k. Ape-X's workers are mostly nearly
    greedy, so once the policy is solved, a small memory soon holds successes only: the Q-values,
    shown no failure, rise past what the returns allow, and the policy falls. A memory that keeps
    the early episodes' failures holds it. Memory grows with the transitions held, not with the
    capacity. bench/README.md (solved_hold) has the measurements."""

    prioritized_replay: bool = True
    """Sample transitions in proportion to their TD error; Ape-X is built on it."""

    worker_epsilon: Fraction = 0.4
    """Base exploration rate of the per-worker schedule: remote worker i of N (1..N) explores with
    epsilon = worker_epsilon ** (1 + worker_epsilon_alpha * (i - 1) / max(1, N - 1)); the
    driver's local worker acts greedily (the Ape-X paper's 0.4). Progress rows report the episodes
    of the least exploring third of the workers (as RLlib's Ape-X did)."""

    worker_epsilon_alpha: Coefficient = 7.0
    """Exponent spread of the per-worker schedule (the Ape-X paper's alpha = 7)."""

    training_intensity: Annotated[
        Positive | None,
        KnownAs(
            "transitions replayed per transition sampled: SB3's batch_size x gradient_steps / "
            "train_freq / n_envs",
            sb3="train_freq",
        ),
    ] = 8.0
    """Transitions replayed to the learner per transition sampled (RLlib's training_intensity):
    AsyncReplay holds the two to this ratio, pausing new sample calls while the learner is
    behind and replay while it is ahead, so that a timestep budget means the same on any
    machine. Null lets both run free as in the Ape-X paper, where the ratio is whatever the
    learner's speed against the workers' makes it. 8 weighs the two costs: a higher ratio learns
    in fewer env steps but takes more learner steps for each, and the learner is the bottleneck."""

    no_equivalent = (
        explores_otherwise("Ape-X workers explore at fixed epsilons: worker_epsilon"),
        NoEquivalent(
            "Q-learning has no entropy bonus; Ape-X workers explore at fixed epsilons "
            "(worker_epsilon, worker_epsilon_alpha)",
            sb3="ent_coef",
        ),
    )


class SACHyperparameters(ReplayHyperparameters):
    """Soft actor-critic (Haarnoja et al. 2018): a squashed-Gaussian actor, twin Q critics with
    polyak-averaged targets, and an entropy coefficient tuned towards a target entropy. Defaults
    as in Stable-Baselines3 and RLlib unless a field says otherwise."""

    learning_rate: StepSize = 1e-3
    """Adam step size of the actor, the critics and the entropy coefficient alike (rl-zoo's
    tuned Pendulum; Stable-Baselines3's default is 3e-4)."""

    hidden_sizes: HiddenSizes = Field(default_factory=lambda: [256, 256])
    """Widths of the hidden layers of the actor and of each critic."""

    activation: Activation = "relu"
    """Nonlinearity between hidden layers."""

    max_grad_norm: GradClip = None
    """Clip the global gradient norm (actor, critics and entropy coefficient together) to this
    value; null, the default, disables clipping."""

    rollout_length: StepsPerIteration = 8
    """Env steps taken by every env of every rollout worker per iteration: the policy acts with
    weights this many steps old at most."""

    buffer_size: BufferSize = 1_000_000
    """Capacity of the replay buffer in transitions."""

    batch_size: BatchSize = 256
    """Transitions per gradient step."""

    learning_starts: int = Field(1_000, ge=0)
    """Env steps collected before the first gradient step (Stable-Baselines3 100, RLlib 1,500),
    so that the first minibatches do not all come from the first episodes."""

    gradient_steps_per_env_step: Annotated[
        float,
        KnownAs(
            "gradient steps per env step sampled: SB3's gradient_steps / train_freq / n_envs",
            sb3=("train_freq", "gradient_steps"),
        ),
        KnownAs(
            "gradient steps per env step sampled: training_intensity / batch_size",
            rllib="training_intensity",
        ),
    ] = Field(1.0, gt=0.0, le=1000.0)
    """Gradient steps per env step sampled, once learning has started: an iteration takes
    round(this x its env steps). 1 is Stable-Baselines3's train_freq 1 with gradient_steps 1
    (RLlib's training_intensity is this times batch_size)."""

    tau: PositiveFraction = 0.005
    """Polyak coefficient: every target update moves the target critics this share of the way
    to the online ones (1 copies them)."""

    target_update_interval: Count = 1
    """Gradient steps between updates of the target critics."""

    initial_alpha: Annotated[
        Positive,
        KnownAs(
            "the entropy coefficient at the start, always learned as with SB3's 'auto', towards "
            "target_entropy; a fixed coefficient has no equivalent",
            sb3="ent_coef",
        ),
    ] = 1.0
    """Entropy coefficient at the start; it is then learned (as log alpha)."""

    target_entropy: float | None = None
    """Entropy the coefficient steers the policy towards, in nats of the squashed actions in
    [-1, 1]; null is -(number of action dimensions)."""

    no_equivalent = (
        NoEquivalent(
            "gradient_steps_per_env_step sets its gradient steps",
            sb3="n_epochs",
            rllib=("num_sgd_iter", "num_epochs"),
        ),
        NoEquivalent(
            "its critics have a loss and an Adam step of their own, unweighted",
            sb3="vf_coef",
            rllib="vf_loss_coeff",
        ),
        EXPLORES_BY_SAMPLING,
        NoEquivalent("its actor's log std is an output of the network", sb3="log_std_init"),
    )

    def gradient_steps_for(self, env_steps: int) -> int:
        return round(self.gradient_steps_per_env_step * env_steps)
