"""The trainer's typed configuration, one module a concern: algorithm, env, optimizer, stop,
checkpoints, evaluation, rollout workers, and the table of algorithms (`ALGORITHMS`).

This package is the single source of truth for what `spec.trainer` of an RLJob may hold. It imports
neither ray, torch nor gymnasium, so the operator and the API can validate a job without the
training stack (an import-linter contract holds this).

Manifest fields are camelCase as in every Kubernetes resource; hyperparameters keep the snake_case
names RL practitioners know from RLlib, Stable-Baselines3 and CleanRL.

- `base`: Spec, the base of every manifest model (camelCase keys, unknown keys rejected).
- `trainer`: the fields every trainer has (env, envConfig, seed, metricsWindow, tensorboard and
  the sections below), the checks of how they pair, and each algorithm's config class
  (TRAINER_CONFIGS, AlgorithmConfig, AnyTrainerConfig), with_hyperparameters.
- `algorithms`: the table of algorithms (ALGORITHMS, AlgorithmRow).
- `optimizer`: the policy optimizers (OptimizerName) and their one table (OPTIMIZERS: what each
  feeds the policy, the settings it reads, its class), and optimizerConfig (OptimizerConfig).
- `stop`: stop (StopConditions).
- `checkpoint`: checkpoint (CheckpointConfig), its object stores and the Secret name pattern.
- `evaluation`: evaluation (EvaluationConfig).
- `normalization`: normalization (NormalizationConfig): observations and rewards.
- `wrappers`: wrappers (WrapperConfig), the gymnasium wrappers put around every env.
- `model`: model (ModelConfig), the encoder of observations (MLP or CNN).
- `rollout`: the rollout workers (RolloutConfig), which the operator's spec builds on.
- `pbt`: population-based training (PBTConfig).
- here: TrainerConfig, the whole of `spec.trainer`, and JobTrainerConfig.
"""

from enum import Enum
from functools import cache
from typing import Annotated, Any, Union

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter

from kuberl_contract.config.algorithms import ALGORITHMS, AlgorithmRow
from kuberl_contract.config.base import Spec
from kuberl_contract.config.checkpoint import (
    CHECKPOINT_SCHEMES,
    DNS_SUBDOMAIN_PATTERN,
    CheckpointConfig,
)
from kuberl_contract.config.evaluation import EvaluationConfig
from kuberl_contract.config.model import NATURE_CNN, ModelConfig
from kuberl_contract.config.normalization import NormalizationConfig
from kuberl_contract.config.optimizer import (
    LEARNER_GPUS_NEEDED,
    OPTIMIZERS,
    LearnerDevice,
    OptimizerConfig,
    OptimizerName,
    optimizers_using,
)
from kuberl_contract.config.pbt import PBT, PBTConfig
from kuberl_contract.config.rollout import RolloutConfig
from kuberl_contract.config.stop import StopConditions
from kuberl_contract.config.trainer import (
    TRAINER_CONFIGS,
    AlgorithmConfig,
    AlgorithmTrainerConfig,
    AnyTrainerConfig,
    with_hyperparameters,
)
from kuberl_contract.config.wrappers import WrapperConfig
from kuberl_contract.frozen import Frozen

__all__ = [
    "ALGORITHMS",
    "CHECKPOINT_SCHEMES",
    "DNS_SUBDOMAIN_PATTERN",
    "LEARNER_GPUS_NEEDED",
    "NATURE_CNN",
    "OPTIMIZERS",
    "PBT",
    "TRAINER_CONFIGS",
    "AlgorithmConfig",
    "AlgorithmRow",
    "AlgorithmTrainerConfig",
    "AnyTrainerConfig",
    "CheckpointConfig",
    "EvaluationConfig",
    "JobTrainerConfig",
    "LearnerDevice",
    "ModelConfig",
    "NormalizationConfig",
    "OptimizerConfig",
    "OptimizerName",
    "PBTConfig",
    "RolloutConfig",
    "Spec",
    "StopConditions",
    "TrainerConfig",
    "WrapperConfig",
    "frozen",
    "optimizers_using",
    "thawed",
    "with_hyperparameters",
]

TrainerConfig = Annotated[
    Union[
        (
            *(Annotated[config, Tag(name)] for name, config in TRAINER_CONFIGS.items()),
            Annotated[PBTConfig, Tag(PBT)],
        )
    ],
    Discriminator("algorithm"),
]
"""`spec.trainer`: the algorithm field picks which hyperparameters are valid."""

JobTrainerConfig = AnyTrainerConfig | PBTConfig
"""What a job trains: one algorithm's trainer, or a population of them."""


def frozen(config: AnyTrainerConfig) -> Frozen:
    """`config` as plain read-only values, for a remote rollout worker that only reads it
    (kuberl_contract.frozen says why): its fields and the properties kuberl's models define,
    nested models frozen too, enums as their values; with its manifest document, for `thawed`."""
    return Frozen(_frozen_values(config), config.model_dump(mode="json", by_alias=True))


def thawed(config: AnyTrainerConfig | Frozen) -> AnyTrainerConfig:
    """The config itself: a Frozen copy's document validated again, or `config` as it is."""
    if isinstance(config, Frozen):
        return _trainer_configs().validate_python(config.document)
    return config


@cache
def _trainer_configs() -> TypeAdapter:
    return TypeAdapter(TrainerConfig)


def _frozen_values(model: BaseModel) -> dict[str, Any]:
    kind = type(model)
    properties = [
        name
        for base in kind.__mro__
        if base.__module__.startswith("kuberl_contract.")
        for name, member in vars(base).items()
        if isinstance(member, property)
    ]
    names = dict.fromkeys([*kind.model_fields, *properties])
    return {name: _frozen(getattr(model, name)) for name in names}


def _frozen(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return Frozen(_frozen_values(value))
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return type(value)(_frozen(item) for item in value)
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return value
