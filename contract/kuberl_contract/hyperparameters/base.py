"""The base of every algorithm's hyperparameters, and the kinds of number their fields are: each
alias carries its constraints, so a field declares only its default and its docstring."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from kuberl_contract.docstrings import Described

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


class NetworkHyperparameters(Described):
    """Base of every algorithm's hyperparameters (snake_case, unknown keys rejected): its networks
    and their step size."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    learning_rate: StepSize = 5e-4
    """Adam step size."""

    hidden_sizes: HiddenSizes = Field(default_factory=lambda: [64, 64])
    """Widths of the hidden layers of every network (policy, value and Q)."""

    activation: Activation = "tanh"
    """Nonlinearity between hidden layers."""

    adam_epsilon: AdamEpsilon = 1e-5
    """Added to the root of Adam's average of squared gradients: a weight whose gradients are
    well below it steps by less than the step size (torch's default 1e-8; Stable-Baselines3's
    actor-critics 1e-5). Adam otherwise moves every weight by about the step size whatever the
    size of its gradients, also when they are only noise."""


class Hyperparameters(NetworkHyperparameters):
    """Base of the algorithms that learn from sampled env steps: discounted, in fragments of
    rollout_length steps, by clipped gradient steps."""

    gamma: PositiveFraction = 0.99
    """Discount factor applied to future rewards."""

    rollout_length: StepsPerIteration = 32
    """Env steps taken by every env of every rollout worker per iteration. The iteration's batch
    is rollout_length x envsPerWorker x max(1, replicas) env steps, less the steps that only
    reset an env after its episode ended (no transitions, so neither learned from nor counted)."""

    max_grad_norm: GradClip = 0.5
    """Clip the global gradient norm to this value; null disables clipping."""
