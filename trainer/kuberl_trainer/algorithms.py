"""An algorithm is a policy, a default optimizer and default hyperparameters (in config.py).

Classes are imported on lookup so that picking PPO never loads DQN's replay machinery.
"""

from __future__ import annotations

import importlib

from kuberl_trainer.config import Algorithm, AnyTrainerConfig, OptimizerName
from kuberl_trainer.optimizers.base import PolicyOptimizer
from kuberl_trainer.policy.base import Policy

POLICIES: dict[Algorithm, str] = {
    Algorithm.PG: "kuberl_trainer.policy.pg:PGPolicy",
    Algorithm.A2C: "kuberl_trainer.policy.a2c:A2CPolicy",
    Algorithm.PPO: "kuberl_trainer.policy.ppo:PPOPolicy",
    Algorithm.DQN: "kuberl_trainer.policy.dqn:DQNPolicy",
}

OPTIMIZERS: dict[OptimizerName, str] = {
    OptimizerName.SYNC_SAMPLES: "kuberl_trainer.optimizers.sync_samples:SyncSamplesOptimizer",
    OptimizerName.SYNC_REPLAY: "kuberl_trainer.optimizers.sync_replay:SyncReplayOptimizer",
}


def policy_class(config: AnyTrainerConfig) -> type[Policy]:
    return _load(POLICIES[Algorithm(config.algorithm)])


def optimizer_class(config: AnyTrainerConfig) -> type[PolicyOptimizer]:
    return _load(OPTIMIZERS[config.optimizer_name])


def _load(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
