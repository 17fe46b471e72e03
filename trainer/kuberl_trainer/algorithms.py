"""The trainer's side of the algorithm table: the policy and optimizer classes a config names.

Classes are imported on lookup so that picking PPO never loads DQN's replay machinery, and
config (which the operator and the API import) stays free of torch.
"""

from __future__ import annotations

import importlib

from kuberl_trainer.config import ALGORITHMS, AnyTrainerConfig, OptimizerName
from kuberl_trainer.optimizers.base import PolicyOptimizer
from kuberl_trainer.policy.base import Policy

OPTIMIZERS: dict[OptimizerName, str] = {
    OptimizerName.SYNC_SAMPLES: "kuberl_trainer.optimizers.sync_samples:SyncSamplesOptimizer",
    OptimizerName.SYNC_REPLAY: "kuberl_trainer.optimizers.sync_replay:SyncReplayOptimizer",
    OptimizerName.ASYNC_GRADIENTS: (
        "kuberl_trainer.optimizers.async_gradients:AsyncGradientsOptimizer"
    ),
    OptimizerName.ASYNC_REPLAY: "kuberl_trainer.optimizers.async_replay:AsyncReplayOptimizer",
    OptimizerName.ASYNC_SAMPLES: "kuberl_trainer.optimizers.async_samples:AsyncSamplesOptimizer",
    OptimizerName.LOCAL_MULTI_GPU: (
        "kuberl_trainer.optimizers.local_multi_gpu:LocalMultiGPUOptimizer"
    ),
    OptimizerName.PERTURBATIONS: "kuberl_trainer.optimizers.perturbations:PerturbationsOptimizer",
}


def policy_class(config: AnyTrainerConfig) -> type[Policy]:
    return _load(ALGORITHMS[config.algorithm].policy)


def optimizer_class(config: AnyTrainerConfig) -> type[PolicyOptimizer]:
    return _load(OPTIMIZERS[config.optimizer_name])


def _load(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
