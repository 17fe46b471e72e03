"""The trainer's side of the algorithm table: the policy and optimizer classes a config names.

Classes are imported on lookup so that picking PPO never loads DQN's replay machinery, and
config (which the operator and the API import) stays free of torch.
"""

from __future__ import annotations

import importlib

from kuberl_trainer.config import ALGORITHMS, OPTIMIZERS, AnyTrainerConfig
from kuberl_trainer.optimizers.base import PolicyOptimizer
from kuberl_trainer.policy.base import Policy


def policy_class(config: AnyTrainerConfig) -> type[Policy]:
    return _load(ALGORITHMS[config.algorithm].policy)


def optimizer_class(config: AnyTrainerConfig) -> type[PolicyOptimizer]:
    return _load(OPTIMIZERS[config.optimizer_name].implementation)


def _load(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
