"""The trainer's side of the algorithm table: the policy and optimizer classes a config names.

Classes are imported on lookup so that picking PPO never loads DQN's replay machinery, and
config (which the operator and the API import) stays free of torch.
"""

from __future__ import annotations

from kuberl_contract.config import ALGORITHMS, OPTIMIZERS, AnyTrainerConfig, OptimizerName
from kuberl_trainer.optimizers.base import PolicyOptimizer
from kuberl_trainer.policies.acting import ActingOnly, load_class
from kuberl_trainer.policies.interface import Policy, PolicyFactory


def policy_class(config: AnyTrainerConfig) -> type[Policy]:
    return load_class(ALGORITHMS[config.algorithm].policy)


def remote_policy(config: AnyTrainerConfig) -> PolicyFactory:
    """What the remote rollout workers build their policy with: the numpy one that only acts
    where the algorithm has one and the optimizer asks nothing else of them (AsyncGradients has
    them compute gradients), the policy itself otherwise."""
    row = ALGORITHMS[config.algorithm]
    if row.acting is None or config.optimizer_name == OptimizerName.ASYNC_GRADIENTS:
        return policy_class(config)
    return ActingOnly(row.policy, row.acting)


def optimizer_class(config: AnyTrainerConfig) -> type[PolicyOptimizer]:
    return load_class(OPTIMIZERS[config.optimizer_name].implementation)
