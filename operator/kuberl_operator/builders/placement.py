"""Where the Ray pods run: node selectors, tolerations and node affinity.

The head runs the driver, which is the learner, so it gets the learner's node selection (and the
GPU toleration when it has GPUs). It stays on on-demand nodes: it never gets the spot selector, and
when spot.provider names a cloud it also gets a node affinity that excludes that cloud's spot nodes.

Rollout workers. One Ray worker pod per rollout worker, in the group `rollout`, on spot nodes when
spot is enabled: the provider's node selector and, on GKE and AKS, the toleration of its spot taint
(DESIGN.md §3), merged with the user's rolloutWorkers.nodeSelector and tolerations (the user's
entries win on the same key: they are the more specific statement). With provider `custom` the
user's nodeSelector and tolerations alone are the spot placement.

The on-demand fallback group (scaling.py) has the same pods minus the spot placement, plus a node
affinity that keeps them off the provider's spot nodes; with `custom`, none of the user's
selectors and tolerations, since those are the spot placement.
"""

from __future__ import annotations

from typing import NamedTuple

from kuberl_operator.builders.names import Object
from kuberl_operator.constants import GPU_RESOURCE
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob, RolloutWorkers, SpotProvider, Toleration

GPU_TOLERATION: Object = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


class SpotPreset(NamedTuple):
    """How a provider marks its spot nodes: a label, and on some clouds a taint of the same key
    and value."""

    label: str
    value: str
    tainted: bool

    def node_selector(self) -> dict[str, str]:
        return {self.label: self.value}

    def tolerations(self) -> list[Object]:
        if not self.tainted:
            return []
        return [
            {"key": self.label, "operator": "Equal", "value": self.value, "effect": "NoSchedule"}
        ]

    def not_spot(self) -> Object:
        """A node-affinity requirement matching every node but this provider's spot nodes (NotIn
        also matches nodes without the label)."""
        return {"key": self.label, "operator": "NotIn", "values": [self.value]}


SPOT_PRESETS: dict[SpotProvider, SpotPreset] = {
    SpotProvider.GKE: SpotPreset("cloud.google.com/gke-spot", "true", tainted=True),
    SpotProvider.EKS: SpotPreset("eks.amazonaws.com/capacityType", "SPOT", tainted=False),
    SpotProvider.KARPENTER: SpotPreset("karpenter.sh/capacity-type", "spot", tainted=False),
    SpotProvider.AKS: SpotPreset("kubernetes.azure.com/scalesetpriority", "spot", tainted=True),
}


class Placement(NamedTuple):
    """Where a pod may run: node selector, tolerations, and node-affinity requirements."""

    node_selector: dict[str, str]
    tolerations: list[Object]
    required: list[Object]

    def pod_fields(self) -> Object:
        fields: Object = {}
        if self.node_selector:
            fields["nodeSelector"] = self.node_selector
        if self.tolerations:
            # The same toleration from a preset and from the user would read as a mistake.
            fields["tolerations"] = [
                t for i, t in enumerate(self.tolerations) if t not in self.tolerations[:i]
            ]
        if self.required:
            terms = [{"matchExpressions": self.required}]
            fields["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            }
        return fields


def _tolerations(tolerations: list[Toleration]) -> list[Object]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tolerations]


def spot_preset(job: RLJob) -> SpotPreset | None:
    """The preset of the provider the job names (enabled or not); None for custom or none."""
    provider = job.spec.rollout_workers.spot.provider
    return SPOT_PRESETS.get(provider) if provider else None


def head_placement(job: RLJob, settings: OperatorSettings) -> Placement:
    learner, preset = job.spec.learner, spot_preset(job)
    gpu_model = {settings.gpu_type_label: learner.gpu_type} if learner.gpu_type else {}
    return Placement(
        node_selector=gpu_model | learner.node_selector,
        tolerations=([dict(GPU_TOLERATION)] if learner.gpus else [])
        + _tolerations(learner.tolerations),
        required=[preset.not_spot()] if preset else [],
    )


def spot_placement(workers: RolloutWorkers, preset: SpotPreset | None) -> Placement:
    selector = preset.node_selector() if preset else {}
    tolerations = preset.tolerations() if preset else []
    return Placement(
        node_selector=selector | workers.node_selector,
        tolerations=tolerations + _tolerations(workers.tolerations),
        required=[],
    )


def on_demand_placement(workers: RolloutWorkers, preset: SpotPreset | None) -> Placement:
    if preset is None:  # custom: the user's selectors and tolerations are the spot placement
        return Placement(node_selector={}, tolerations=[], required=[])
    return Placement(
        node_selector=dict(workers.node_selector),
        tolerations=_tolerations(workers.tolerations),
        required=[preset.not_spot()],
    )


def plain_placement(workers: RolloutWorkers) -> Placement:
    return Placement(dict(workers.node_selector), _tolerations(workers.tolerations), required=[])
