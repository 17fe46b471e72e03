"""spec.rolloutWorkers: the remote rollout workers (replicas and envs per worker come from the
trainer's RolloutConfig), their spot placement and the nodes their pods run on."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from kuberl_contract.config import RolloutConfig, Spec
from kuberl_operator.constants import SPOT_RAY_RESOURCE
from kuberl_operator.spec.formats import IntOrPercent, NodeSelector, Toleration


class SpotProvider(StrEnum):
    """Whose spot capacity the rollout workers use; each has its own node label and taint."""

    GKE = "gke"
    EKS = "eks"
    KARPENTER = "karpenter"
    AKS = "aks"
    CUSTOM = "custom"  # the operator adds nothing: the user's nodeSelector and tolerations decide


class Spot(Spec):
    """Run rollout workers on preemptible (spot) nodes."""

    enabled: bool = False
    """Schedule rollout workers on spot nodes."""

    provider: SpotProvider | None = None
    """Cloud or autoscaler whose spot node label and taint the operator adds: gke, eks,
    karpenter, aks, or custom (add your own nodeSelector and tolerations). Required when
    enabled."""

    fallback_to_on_demand: bool = True
    """Bring up on-demand rollout workers while spot capacity is missing."""

    max_unavailable: IntOrPercent = "25%"
    """Rollout workers that may be missing (preempted or pending) before the operator falls back
    to on-demand nodes: a count, or a percentage of replicas such as '25%'. Training continues at
    reduced speed meanwhile."""

    @model_validator(mode="after")
    def _provider_when_enabled(self) -> Spot:
        if self.enabled and self.provider is None:
            names = ", ".join(p.value for p in SpotProvider)
            raise ValueError(f"provider: required when spot is enabled; one of {names}")
        return self


class Autoscaling(Spec):
    """Who sets an elastic fleet's replicas while the job runs."""

    policy: Literal["Learner"] = "Learner"
    """Learner: the operator sizes the fleet by what the learner needs, from the driver's
    metrics: more workers while the learner waits for data (busy less than
    targetLearnerUtilisation) and the policy lag stays within optimizerConfig.maxPolicyLag; fewer
    while batches are dropped as too stale or the learner is saturated."""

    target_learner_utilisation: float = Field(0.8, ge=0.1, le=1.0)
    """The share of its time the learner should spend learning: below it the learner waits for
    data, and the fleet grows in proportion (as an HPA scales to its target)."""

    stabilization_seconds: int = Field(60, ge=0, le=3600)
    """The least time between two changes, so the fleet does not flap while the learner's figures
    settle after one."""


class RolloutWorkers(RolloutConfig):
    """The remote rollout workers (Ray actors) and where their pods run."""

    spot: Spot = Field(default_factory=Spot)
    """Spot (preemptible) placement of the rollout workers."""

    node_selector: NodeSelector = Field(default_factory=dict)
    """Node labels the rollout workers' pods require (never a control-plane node's)."""

    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the rollout workers' pods."""

    autoscaling: Autoscaling | None = None
    """Size the elastic fleet (minReplicas, maxReplicas) by what the learner needs; null leaves
    replicas to the user, `kubectl scale` or an HPA."""

    @model_validator(mode="after")
    def _autoscaling_needs_bounds(self) -> RolloutWorkers:
        if self.autoscaling is not None and (
            self.min_replicas is None or self.max_replicas is None
        ):
            raise ValueError(
                "autoscaling: it sizes an elastic fleet within [minReplicas, maxReplicas]; set both"
            )
        return self

    @model_validator(mode="after")
    def _spot_needs_workers(self) -> RolloutWorkers:
        if self.spot.enabled and self.replicas == 0:
            raise ValueError(
                "spot.enabled: replicas is 0, so there are no remote rollout workers to put on "
                "spot nodes; set replicas >= 1 or disable spot"
            )
        if self.spot.provider == SpotProvider.CUSTOM and not (
            self.node_selector or self.tolerations
        ):
            raise ValueError(
                "spot.provider: custom adds no node selector or toleration; set nodeSelector or "
                "tolerations here so the workers reach your spot nodes"
            )
        if SPOT_RAY_RESOURCE in self.ray_resources and not self.spot.enabled:
            raise ValueError(
                f"rayResources.{SPOT_RAY_RESOURCE}: only the pods of the spot worker group "
                f"advertise {SPOT_RAY_RESOURCE}, and spot is not enabled; enable spot or remove "
                "it, or no rollout worker could ever be placed"
            )
        return self
