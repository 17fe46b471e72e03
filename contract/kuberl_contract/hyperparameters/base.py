"""The base of every algorithm's hyperparameters, and the kinds of number their fields are: each
alias carries its constraints, so a field declares only its default and its docstring."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field

from kuberl_contract.docstrings import Described
from kuberl_contract.hyperparameters.known_as import TRAINER, KnownAs, NoEquivalent

# Upper bounds where a larger count would not train but crash (a replay buffer is allocated whole
# at its capacity; a batch is drawn at once) or never finish an iteration: far above what any
# published setting uses (Ape-X replays 2M transitions, IMPALA learns on batches of 32 x 80).
MAX_BUFFER_SIZE = 100_000_000
MAX_BATCH_SIZE = 1_000_000

StepSize = Annotated[float, Field(gt=0.0, le=1.0)]
"""An optimizer's step size, in (0, 1]."""

PositiveFraction = Annotated[float, Field(gt=0.0, le=1.0)]
"""A share in (0, 1]: a discount, a clip ratio, a polyak coefficient."""

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
"""A probability, an exploration rate or a mixing weight, in [0, 1]."""

Coefficient = Annotated[float, Field(ge=0.0)]
"""A nonnegative weight: of a loss term, a regulariser or an exponent."""

Positive = Annotated[float, Field(gt=0.0)]
"""A positive scale: a clip threshold, a noise level, a ratio, a share of CPUs."""

AdamEpsilon = Annotated[float, Field(gt=0.0, le=1.0)]
"""Adam's epsilon: above 0, at most 1."""

GradClip = Positive | None
"""A bound on the global gradient norm; null disables clipping."""

Count = Annotated[int, Field(ge=1)]
"""A count of at least 1: samples, env steps, or steps between two events."""

StepsPerIteration = Annotated[int, Field(ge=1, le=100_000)]
"""Env or gradient steps per iteration, 1 to 100,000."""

BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]
"""Samples learned on at once, 1 to MAX_BATCH_SIZE."""

BufferSize = Annotated[int, Field(ge=1, le=MAX_BUFFER_SIZE)]
"""Capacity of a replay buffer in transitions, 1 to MAX_BUFFER_SIZE."""

NStep = Annotated[int, Field(ge=1, le=100)]
"""Rewards summed before bootstrapping (n-step returns), 1 to 100."""

Epochs = Annotated[int, Field(ge=1, le=1000)]
"""Passes of SGD over a batch, 1 to 1,000."""

HiddenSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1, max_length=8)
]
"""Widths of 1 to 8 hidden layers, each 1 to 4,096 units."""

Activation = Literal["tanh", "relu"]
"""A nonlinearity between hidden layers."""

ITERATION_BATCH = "rollout_length x envsPerWorker x max(1, replicas) env steps"
"""What an iteration of the algorithms that sample learns on."""


class NetworkHyperparameters(Described):
    """Base of every algorithm's hyperparameters (snake_case, unknown keys rejected): its networks
    and their step size."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    learning_rate: Annotated[StepSize, KnownAs("Adam step size", rllib=("lr", "stepsize"))] = 5e-4
    """Adam step size."""

    hidden_sizes: Annotated[
        HiddenSizes,
        KnownAs(
            "widths of the hidden layers of every network, one list for all of them: separate "
            "lists for the policy and the value function have no equivalent; the CNN for images "
            f"is {TRAINER}.model",
            sb3="net_arch",
            rllib="fcnet_hiddens",
        ),
        KnownAs(
            "SB3's net_arch and activation_fn are hidden_sizes and activation here; the features "
            f"extractor is {TRAINER}.model",
            sb3="policy_kwargs",
        ),
    ] = Field(default_factory=lambda: [64, 64])
    """Widths of the hidden layers of every network (policy, value and Q)."""

    activation: Annotated[
        Activation,
        KnownAs(
            "nonlinearity between hidden layers: tanh or relu",
            sb3="activation_fn",
            rllib="fcnet_activation",
        ),
    ] = "tanh"
    """Nonlinearity between hidden layers."""

    adam_epsilon: AdamEpsilon = 1e-5
    """Added to the root of Adam's average of squared gradients: a weight whose gradients are
    well below it steps by less than the step size (torch's default 1e-8; Stable-Baselines3's
    actor-critics 1e-5). Adam otherwise moves every weight by about the step size whatever the
    size of its gradients, also when they are only noise."""

    # What an algorithm has no setting for unless its class, or a class between, says otherwise.
    no_equivalent: ClassVar[tuple[NoEquivalent, ...]] = (
        NoEquivalent(
            "only PPO and APPO clip a surrogate objective", sb3="clip_range", rllib="clip_param"
        ),
        NoEquivalent(
            "only PPO clips its value predictions", sb3="clip_range_vf", rllib="vf_clip_param"
        ),
        NoEquivalent("it has no KL penalty", rllib=("kl_coeff", "kl_target")),
        NoEquivalent("only PPO stops its epochs early on the KL", sb3="target_kl"),
        NoEquivalent("only PPO sets the Gaussian's starting log std", sb3="log_std_init"),
        NoEquivalent("its step size is constant", rllib="lr_schedule"),
        NoEquivalent("one Adam step size for all its networks", rllib="_lr_vf"),
        NoEquivalent(
            "only algorithm: PBT explores hyperparameters", ray_tune="hyperparam_mutations"
        ),
        NoEquivalent("only algorithm: PBT trains a population", ray_tune="num_samples"),
    )


class Hyperparameters(NetworkHyperparameters):
    """Base of the algorithms that learn from sampled env steps: discounted, in fragments of
    rollout_length steps, by clipped gradient steps."""

    gamma: PositiveFraction = 0.99
    """Discount factor applied to future rewards."""

    rollout_length: Annotated[
        StepsPerIteration,
        KnownAs(
            "env steps taken by every env of a rollout worker per sample call; an iteration "
            f"samples {ITERATION_BATCH}",
            sb3="n_steps",
            rllib="rollout_fragment_length",
        ),
        KnownAs(
            "rollout_length = the batch size / envsPerWorker / max(1, replicas), as each "
            f"iteration learns on {ITERATION_BATCH}",
            sb3="batch_size",
            rllib=("train_batch_size", "train_batch_size_per_learner"),
        ),
    ] = 32
    """Env steps taken by every env of every rollout worker per iteration. The iteration's batch
    is rollout_length x envsPerWorker x max(1, replicas) env steps, less the steps that only
    reset an env after its episode ended (no transitions, so neither learned from nor counted)."""

    max_grad_norm: Annotated[
        GradClip, KnownAs("bound on the global gradient norm; null: none", rllib="grad_clip")
    ] = 0.5
    """Clip the global gradient norm to this value; null disables clipping."""


NO_REPLAY_BUFFER = NoEquivalent(
    "it learns on fresh samples, with no replay buffer",
    sb3=("learning_starts", "buffer_size"),
    rllib=(
        "training_intensity",
        "learning_starts",
        "num_steps_sampled_before_learning_starts",
        "buffer_size",
        "replay_buffer_config",
    ),
)
"""The replay buffer's settings, for an algorithm that has none."""

NO_TARGET_NETWORK = NoEquivalent(
    "it has no target network",
    sb3=("target_update_interval", "tau"),
    rllib=("target_network_update_freq", "tau"),
)
"""The target network's settings, for an algorithm that has none."""


def explores_otherwise(how: str) -> NoEquivalent:
    """DQN's epsilon schedule under other libraries' names, for an algorithm that explores as
    `how` says."""
    return NoEquivalent(
        how,
        sb3=("exploration_fraction", "exploration_initial_eps", "exploration_final_eps"),
        rllib=("exploration_config", "epsilon"),
    )


EXPLORES_BY_SAMPLING = explores_otherwise("it explores by sampling its stochastic policy")
"""The epsilon schedule's settings, for an algorithm whose policy is stochastic."""
