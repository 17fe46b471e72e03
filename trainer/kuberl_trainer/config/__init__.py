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

from typing import Annotated, Union

from pydantic import Discriminator, Tag

from kuberl_trainer.config.algorithms import ALGORITHMS, AlgorithmRow
from kuberl_trainer.config.base import Spec
from kuberl_trainer.config.checkpoint import (
    CHECKPOINT_SCHEMES,
    DNS_SUBDOMAIN_PATTERN,
    CheckpointConfig,
)
from kuberl_trainer.config.evaluation import EvaluationConfig
from kuberl_trainer.config.model import NATURE_CNN, ModelConfig
from kuberl_trainer.config.normalization import NORMALIZED_OBSERVATIONS, NormalizationConfig
from kuberl_trainer.config.optimizer import (
    LEARNER_GPUS_NEEDED,
    OPTIMIZERS,
    LearnerDevice,
    OptimizerConfig,
    OptimizerName,
    optimizers_using,
)
from kuberl_trainer.config.pbt import PBT, PBTConfig
from kuberl_trainer.config.rollout import RolloutConfig
from kuberl_trainer.config.stop import StopConditions
from kuberl_trainer.config.trainer import (
    TRAINER_CONFIGS,
    AlgorithmConfig,
    AlgorithmTrainerConfig,
    AnyTrainerConfig,
    with_hyperparameters,
)
from kuberl_trainer.config.wrappers import WrapperConfig

__all__ = [
    "ALGORITHMS",
    "CHECKPOINT_SCHEMES",
    "DNS_SUBDOMAIN_PATTERN",
    "LEARNER_GPUS_NEEDED",
    "NATURE_CNN",
    "NORMALIZED_OBSERVATIONS",
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
    "optimizers_using",
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
