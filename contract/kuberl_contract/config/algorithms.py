"""The table of algorithms (`ALGORITHMS`): each one's hyperparameters, policy and optimizers."""

from __future__ import annotations

from dataclasses import dataclass

from kuberl_contract.config.optimizer import (
    ASYNC_GRADIENTS,
    ASYNC_REPLAY,
    ASYNC_SAMPLES,
    LOCAL_MULTI_GPU,
    PERTURBATIONS,
    SYNC_REPLAY,
    SYNC_SAMPLES,
    OptimizerName,
)
from kuberl_contract.hyperparameters import Hyperparameters, evolution, off_policy, on_policy


@dataclass(frozen=True)
class AlgorithmRow:
    """Everything kuberl knows about an algorithm, in one place: adding one is a hyperparameters
    class, a row here and a policy file."""

    hyperparameters: type[Hyperparameters]
    """Its hyperparameters: a class of kuberl_contract.hyperparameters, one docstring per field."""
    policy: str
    """The policy class as module:Class, imported only by the trainer (this module stays light)."""
    acting: str | None
    """The numpy policy its remote rollout workers act with where the networks are MLPs
    (module:Class, kuberl_trainer.policies.acting), so that they never import torch; None: they
    hold the policy itself."""
    optimizers: tuple[OptimizerName, ...]
    """The default optimizer first, then the swaps its numerics allow."""
    learns: str
    """How it learns, for the message that rejects an optimizer that cannot feed it."""
    discrete_actions_only: bool = False
    """Its policy handles Discrete action spaces only (checked when a job is validated)."""
    continuous_actions_only: bool = False
    """Its policy handles Box action spaces only (checked when a job is validated)."""
    image_observations: bool = True
    """Its networks take the CNN encoder (model.encoder), not only flat observations."""


_ON_POLICY = "learns on fresh samples of its current policy"
_SGD_EPOCHS = "takes several epochs of minibatch SGD on fresh samples of its current policy"
_VTRACE = "learns on samples whose policy lag V-trace corrects"
_REPLAY = "learns Q-values from replayed transitions"
_SOFT_REPLAY = "learns its critics and its actor from replayed transitions"
_PERTURBED = "learns from the returns of perturbed copies of its parameters"

ALGORITHMS: dict[str, AlgorithmRow] = {
    "PG": AlgorithmRow(
        on_policy.PGHyperparameters,
        "kuberl_trainer.policies.pg:PGPolicy",
        "kuberl_trainer.policies.acting:ActingPGPolicy",
        (SYNC_SAMPLES, ASYNC_GRADIENTS),
        _ON_POLICY,
    ),
    "A2C": AlgorithmRow(
        on_policy.A2CHyperparameters,
        "kuberl_trainer.policies.a2c:A2CPolicy",
        "kuberl_trainer.policies.acting:ActingPolicy",
        (SYNC_SAMPLES, ASYNC_GRADIENTS),
        _ON_POLICY,
    ),
    "A3C": AlgorithmRow(
        on_policy.A3CHyperparameters,
        "kuberl_trainer.policies.a2c:A2CPolicy",
        "kuberl_trainer.policies.acting:ActingPolicy",
        (ASYNC_GRADIENTS, SYNC_SAMPLES),
        _ON_POLICY,
    ),
    "PPO": AlgorithmRow(
        on_policy.PPOHyperparameters,
        "kuberl_trainer.policies.ppo:PPOPolicy",
        "kuberl_trainer.policies.acting:ActingPolicy",
        (SYNC_SAMPLES, ASYNC_SAMPLES, LOCAL_MULTI_GPU),
        _SGD_EPOCHS,
    ),
    "APPO": AlgorithmRow(
        on_policy.APPOHyperparameters,
        "kuberl_trainer.policies.appo:APPOPolicy",
        "kuberl_trainer.policies.acting:ActingIMPALAPolicy",
        (ASYNC_SAMPLES, SYNC_SAMPLES),
        _VTRACE,
    ),
    "IMPALA": AlgorithmRow(
        on_policy.IMPALAHyperparameters,
        "kuberl_trainer.policies.impala:IMPALAPolicy",
        "kuberl_trainer.policies.acting:ActingIMPALAPolicy",
        (ASYNC_SAMPLES, SYNC_SAMPLES),
        _VTRACE,
    ),
    "DQN": AlgorithmRow(
        off_policy.DQNHyperparameters,
        "kuberl_trainer.policies.dqn:DQNPolicy",
        "kuberl_trainer.policies.acting:ActingDQNPolicy",
        (SYNC_REPLAY, ASYNC_REPLAY),
        _REPLAY,
        discrete_actions_only=True,
    ),
    "APEX": AlgorithmRow(
        off_policy.APEXHyperparameters,
        "kuberl_trainer.policies.apex:APEXPolicy",
        "kuberl_trainer.policies.acting:ActingAPEXPolicy",
        (ASYNC_REPLAY, SYNC_REPLAY),
        _REPLAY,
        discrete_actions_only=True,
    ),
    "SAC": AlgorithmRow(
        off_policy.SACHyperparameters,
        "kuberl_trainer.policies.sac:SACPolicy",
        "kuberl_trainer.policies.acting:ActingSACPolicy",
        (SYNC_REPLAY,),
        _SOFT_REPLAY,
        continuous_actions_only=True,
        image_observations=False,
    ),
    "ES": AlgorithmRow(
        evolution.ESHyperparameters,
        "kuberl_trainer.policies.es:ESPolicy",
        "kuberl_trainer.policies.acting:ActingESPolicy",
        (PERTURBATIONS,),
        _PERTURBED,
        image_observations=False,
    ),
}
