"""Hyperparameters per algorithm: the numerics, validated like the rest of `spec.trainer`.

snake_case names as RL practitioners know them from RLlib, Stable-Baselines3 and CleanRL; unknown
names are rejected. Every field says what it does and, where it is not kuberl's own choice, where
its default comes from. Light like config: no ray, torch or gymnasium.

- `base`: the kinds of number the fields are (StepSize, Fraction, Count, BatchSize, ...), the
  upper bounds MAX_BUFFER_SIZE and MAX_BATCH_SIZE, and the bases NetworkHyperparameters and
  Hyperparameters.
- `on_policy`: PG, A2C, A3C, PPO, IMPALA and APPO.
- `off_policy`: ReplayHyperparameters, DQN, APEX and SAC.
- `evolution`: ES, and PBT with its Mutation.
- `fields`: each field as `kuberl explain` and the docs show it (type, range, default, docstring).
- `known_as`: KnownAs and NoEquivalent, with which a field or a class declares the
  Stable-Baselines3 and RLlib names users bring for it.
- `known_names`: those names, and what each is in kuberl for each algorithm, read from the
  declarations.
"""

from kuberl_contract.hyperparameters.base import (
    MAX_BATCH_SIZE,
    MAX_BUFFER_SIZE,
    Hyperparameters,
    NetworkHyperparameters,
)
from kuberl_contract.hyperparameters.evolution import (
    ESHyperparameters,
    Mutation,
    PBTHyperparameters,
)
from kuberl_contract.hyperparameters.off_policy import (
    APEXHyperparameters,
    DQNHyperparameters,
    ReplayHyperparameters,
    SACHyperparameters,
)
from kuberl_contract.hyperparameters.on_policy import (
    A2CHyperparameters,
    A3CHyperparameters,
    APPOHyperparameters,
    IMPALAHyperparameters,
    PGHyperparameters,
    PPOHyperparameters,
)

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_BUFFER_SIZE",
    "A2CHyperparameters",
    "A3CHyperparameters",
    "APEXHyperparameters",
    "APPOHyperparameters",
    "DQNHyperparameters",
    "ESHyperparameters",
    "Hyperparameters",
    "IMPALAHyperparameters",
    "Mutation",
    "NetworkHyperparameters",
    "PBTHyperparameters",
    "PGHyperparameters",
    "PPOHyperparameters",
    "ReplayHyperparameters",
    "SACHyperparameters",
]
