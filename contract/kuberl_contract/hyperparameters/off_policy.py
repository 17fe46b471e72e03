"""The off-policy algorithms, which learn from a replay buffer: DQN, Ape-X and SAC."""

from __future__ import annotations

from abc import abstractmethod

from pydantic import Field

from kuberl_contract.hyperparameters.base import (
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
)


class ReplayHyperparameters(Hyperparameters):
    """What the replay optimizers read: the buffer, its minibatches, n-step transitions and the
    target network's schedule (DQN, Ape-X, SAC)."""

    buffer_size: BufferSize = 100_000
    """Capacity of the replay buffer in transitions."""

    batch_size: BatchSize = 64
    """Transitions per gradient step."""

    learning_starts: int = Field(1_000, ge=0)
    """Env steps collected before the first gradient step."""

    target_update_interval: Count = 128
    """Gradient steps between updates of the target network."""

    n_step: NStep = 1
    """Bootstrap after this many rewards (n-step returns)."""

    prioritized_replay: bool = False
    """Sample transitions in proportion to their TD error (prioritized experience replay)."""

    prioritized_replay_alpha: Fraction = 0.6
    """How strongly priorities skew sampling: 0 is uniform."""

    prioritized_replay_beta: Fraction = 0.4
    """Importance-sampling correction exponent: 1 fully corrects the sampling bias."""

    prioritized_replay_eps: Positive = 1e-6
    """Added to every priority so no transition becomes unreachable."""

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

    rollout_length: StepsPerIteration = 32
    """Env steps taken by every env of every rollout worker per iteration."""

    gradient_steps: StepsPerIteration = 128
    """Gradient steps per iteration once learning has started."""

    target_update_interval: Count = 128
    """Gradient steps between copies of the online network into the target network.
    Stable-Baselines3's DQN counts its target_update_interval in env steps sampled, as RLlib's
    target_network_update_freq does."""

    epsilon_initial: Fraction = 1.0
    """Exploration rate at the first env step."""

    epsilon_final: Fraction = 0.04
    """Exploration rate after epsilon_timesteps env steps."""

    epsilon_timesteps: Count = 10_000
    """Env steps over which epsilon decays linearly."""

    double_q: bool = True
    """Pick the next action with the online network, evaluate it with the target (double DQN)."""

    dueling: bool = False
    """Split the Q head into state value and advantage streams (dueling DQN)."""

    n_step: NStep = 3
    """Bootstrap after this many rewards (n-step returns). 3 propagates rewards faster than 1:
    on CartPole-v1 it solved every seed tried within 25k env steps, 1-step took up to 54k."""

    def gradient_steps_for(self, env_steps: int) -> int:
        return self.gradient_steps


class APEXHyperparameters(DQNHyperparameters):
    """Ape-X DQN (Horgan et al. 2018): DQN with many actors, each exploring at its own fixed
    epsilon, feeding sharded prioritized replay that one learner samples from."""

    gamma: PositiveFraction = 0.995
    """Discount factor applied to future rewards: 0.995, where DQN and the Ape-X paper have 0.99
    (R2D2 0.997). Ape-X reports its nearly greedy workers, which act on the order of their
    Q-values alone; on CartPole-v1 such a worker, once solved, failed by letting the cart drift
    off the track, a cost further ahead than 0.99 weighs (a failure 200 steps ahead counts 0.13
    of its cost at 0.99, 0.37 at 0.995). bench/README.md (solved_hold) has the measurements."""

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

    training_intensity: Positive | None = 8.0
    """Transitions replayed to the learner per transition sampled (RLlib's training_intensity):
    AsyncReplay holds the two to this ratio, pausing new sample calls while the learner is
    behind and replay while it is ahead, so that a timestep budget means the same on any machine.
    Null lets both run free as in the Ape-X paper, where the ratio is whatever the learner's speed
    against the workers' makes it. kuberl's 8: on CartPole-v1 with 2 workers, seeds 0-4 reached
    a return of 400 within 85k env steps; 16 within 60k env steps but with 1.4x the learner
    steps, the bottleneck."""


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

    gradient_steps_per_env_step: float = Field(1.0, gt=0.0, le=1000.0)
    """Gradient steps per env step sampled, once learning has started: an iteration takes
    round(this x its env steps). 1 is Stable-Baselines3's train_freq 1 with gradient_steps 1
    (RLlib's training_intensity is this times batch_size)."""

    tau: PositiveFraction = 0.005
    """Polyak coefficient: every target update moves the target critics this share of the way
    to the online ones (1 copies them)."""

    target_update_interval: Count = 1
    """Gradient steps between updates of the target critics."""

    initial_alpha: Positive = 1.0
    """Entropy coefficient at the start; it is then learned (as log alpha)."""

    target_entropy: float | None = None
    """Entropy the coefficient steers the policy towards, in nats of the squashed actions in
    [-1, 1]; null is -(number of action dimensions)."""

    def gradient_steps_for(self, env_steps: int) -> int:
        return round(self.gradient_steps_per_env_step * env_steps)
