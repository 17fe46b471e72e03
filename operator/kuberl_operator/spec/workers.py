"""spec.rolloutWorkers: the remote rollout workers (replicas and envs per worker come from the
trainer's RolloutConfig), their spot placement and the nodes their pods run on."""

from __future__ import annotations

from enum import StrEnum

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


class RolloutWorkers(RolloutConfig):
    """The remote rollout workers (Ray actors) and where their pods run."""

    spot: Spot = Field(default_factory=Spot)
    """Spot (preemptible) placement of the rollout workers."""

    node_selector: NodeSelector = Field(default_factory=dict)
    """Node labels the rollout workers' pods require (never a control-plane node's)."""

    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the rollout workers' pods."""

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
