"""The trainer's side of the algorithm table: the policy and optimizer classes a config names.

Classes are imported on lookup so that picking PPO never loads DQN's replay machinery, and
config (which the operator and the API import) stays free of torch.
"""

from __future__ import annotations

from kuberl_contract.config import (
    ALGORITHMS,
    OPTIMIZERS,
    AnyTrainerConfig,
    OptimizerName,
    frozen,
)
from kuberl_contract.config.trainer import policy_config
from kuberl_trainer.envs.multi_agent import is_multi_agent
from kuberl_trainer.optimizers.base import PolicyOptimizer
from kuberl_trainer.policies.acting import ActingOnly, load_class
from kuberl_trainer.policies.interface import Policy, PolicyFactory
from kuberl_trainer.policies.multi_agent import MultiAgentFactory


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


def worker_policies(config: AnyTrainerConfig) -> tuple[PolicyFactory, PolicyFactory, bool]:
    """What the local worker and the remote ones build their policies with, for every agent of a
    multi-agent env (`for_every_agent`), and whether the remote ones only act (ActingOnly)."""
    remote = remote_policy(config)
    return (
        for_every_agent(policy_class(config), config),
        for_every_agent(remote, config),
        isinstance(remote, ActingOnly),
    )


def for_every_agent(factory: PolicyFactory, config: AnyTrainerConfig) -> PolicyFactory:
    """`factory` as a multi-agent job's workers build their policies with: one per policy, each
    with its own config (multiAgent.policies' hyperparameters and model), Frozen for workers that
    only act (see remote_policy); `factory` itself for other jobs."""
    if not is_multi_agent(config.env):
        return factory
    names = list(config.multi_agent.policies) if config.multi_agent else []
    configs = {name: policy_config(config, name) for name in names}
    self_play = config.multi_agent.self_play if config.multi_agent else None
    if self_play is not None:  # the opponent acts with the learning policy's snapshots
        configs[self_play.opponent] = policy_config(config, self_play.policy)
    if isinstance(factory, ActingOnly):
        configs = {name: frozen(own) for name, own in configs.items()}
    return MultiAgentFactory(factory, configs)


def optimizer_class(config: AnyTrainerConfig) -> type[PolicyOptimizer]:
    return load_class(OPTIMIZERS[config.optimizer_name].implementation)
