"""Pods about to go, from what Kubernetes says before they go, and which of them to drain.

Kubernetes says a pod is about to go before its container gets SIGTERM: a DisruptionTarget
condition on the pod (the scheduler preempts it, the Eviction API or the taint manager evicts it,
the kubelet terminates it), a taint on its node (a cluster autoscaler, Karpenter or a cloud's
interruption handler is about to remove the node), or its deletion (metadata.deletionTimestamp).
Ray notices nothing until the pod's node leaves it; the operator, which sees these signals,
drains the pod's Ray node (kuberl_contract.drain) so the driver gives the rollout workers there no
more calls, and checkpoints at once where its head drains.

`pods_about_to_go` reads the signals of the job's pods and their nodes; `next_drains` decides
which of them are drained now, and what status.draining remembers so each pod is drained once,
across polls and operator restarts. Pure: plain dicts in, frozen values out, no clock read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kuberl_contract.drain import DRAIN_SUBMISSION_PREFIX
from kuberl_operator.constants import RAY_HEAD_NODE_TYPE, RAY_NODE_TYPE_LABEL

Object = Mapping[str, Any]

# The node taints that say the node is about to be removed, each with what it means. Only these:
# a plain cordon (node.kubernetes.io/unschedulable) keeps the pods running.
DISRUPTION_TAINTS: dict[str, str] = {
    "ToBeDeletedByClusterAutoscaler": "the cluster autoscaler removes the node",
    "karpenter.sh/disrupted": "Karpenter disrupts the node",
    "karpenter.sh/disruption": "Karpenter disrupts the node",  # before Karpenter v1
    "cloud.google.com/impending-node-termination": "GKE terminates the node",
    "aws-node-termination-handler/spot-itn": "EC2 reclaims the spot instance",
    "aws-node-termination-handler/asg-lifecycle-termination": "its auto scaling group ends it",
    "node.cloudprovider.kubernetes.io/shutdown": "the cloud provider shut the node down",
}
DEFAULT_GRACE_SECONDS = 30
"""A pod's terminationGracePeriodSeconds when its spec leaves it out (Kubernetes' default)."""


@dataclass(frozen=True)
class PodAboutToGo:
    """A running pod of the job that Kubernetes says is about to go."""

    name: str
    ip: str
    """Its IP: its Ray node's address."""
    reason: str
    """Why, in words: the DisruptionTarget's reason, the node's taint, or its deletion."""
    deadline_s: int
    """Seconds from now until it is gone: until its deletionTimestamp where it is being deleted,
    else its termination grace period."""
    head: bool = False
    """The Ray head's pod: its driver is told to checkpoint, its node never drained (Ray would
    end the idle head, and the cluster with it, at once)."""


def pods_about_to_go(
    pods: Iterable[Object], nodes: Mapping[str, Object], now: datetime
) -> tuple[PodAboutToGo, ...]:
    """The pods that are about to go, by name: running pods with an IP whose DisruptionTarget
    condition is True, whose node (`nodes`, by name) carries a DISRUPTION_TAINTS taint, or that
    are being deleted. Pods not Running, or without an IP, hold no Ray node to drain."""
    going = []
    for pod in pods:
        status, meta = pod.get("status") or {}, pod.get("metadata") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip:
            continue
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        reason = (
            _disruption_target(status)
            or _disruption_taint(node_name, nodes.get(node_name))
            or ("the pod is being deleted" if meta.get("deletionTimestamp") else None)
        )
        if reason is not None:
            head = (meta.get("labels") or {}).get(RAY_NODE_TYPE_LABEL) == RAY_HEAD_NODE_TYPE
            going.append(PodAboutToGo(meta["name"], ip, reason, deadline_seconds(pod, now), head))
    return tuple(sorted(going, key=lambda pod: pod.name))


def deadline_seconds(pod: Object, now: datetime) -> int:
    """Whole seconds from `now` until the pod is gone: its deletionTimestamp (set to its deletion
    plus its grace period) where it is being deleted, else its terminationGracePeriodSeconds
    (DEFAULT_GRACE_SECONDS when its spec leaves it out)."""
    deleted_by = (pod.get("metadata") or {}).get("deletionTimestamp")
    if deleted_by:
        when = datetime.fromisoformat(deleted_by.replace("Z", "+00:00"))
        return max(0, math.ceil((when - now).total_seconds()))
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_SECONDS if grace is None else max(0, int(grace))


def _disruption_target(status: Object) -> str | None:
    """The DisruptionTarget condition's reason (PreemptionByScheduler, EvictionByEvictionAPI,
    DeletionByTaintManager, TerminationByKubelet, ...) and message, where it is True."""
    conditions = status.get("conditions") or []
    target = next((c for c in conditions if c.get("type") == "DisruptionTarget"), None)
    if target is None or target.get("status") != "True":
        return None
    reason, message = target.get("reason") or "DisruptionTarget", target.get("message")
    return f"{reason}: {message}" if message else reason


def _disruption_taint(node_name: str, node: Object | None) -> str | None:
    """The first DISRUPTION_TAINTS taint of the node, in words."""
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    key = next((t.get("key") for t in taints if t.get("key") in DISRUPTION_TAINTS), None)
    if key is None:
        return None
    return f"node {node_name} is tainted {key}: {DISRUPTION_TAINTS[key]}"


def next_drains(
    draining: Sequence[str], about_to_go: Iterable[PodAboutToGo], pod_names: Set[str]
) -> tuple[tuple[PodAboutToGo, ...], list[str]]:
    """The pods to drain now (about to go and not drained yet) and status.draining after them:
    the names of the pods drained, each kept while a pod of that name exists (`pod_names`), so
    that no poll and no restarted operator drains a pod twice."""
    kept = {name for name in draining if name in pod_names}
    new = tuple(pod for pod in about_to_go if pod.name not in kept)
    return new, sorted(kept | {pod.name for pod in new})


def drain_submission_id(attempt: int, pod_name: str) -> str:
    """The Ray submission id of the job that drains the pod `pod_name` in attempt `attempt`:
    fixed, so that the Jobs API refuses a second submission of it."""
    return f"{DRAIN_SUBMISSION_PREFIX}{attempt}-{pod_name}"


def draining_message(pod: PodAboutToGo) -> str:
    """The NodeDraining Event's message: which pod, why, and the deadline."""
    what = "the driver checkpoints now" if pod.head else "its Ray node drains"
    return (
        f"pod {pod.name} ({pod.ip}) is about to go ({pod.reason}): {what}, "
        f"to be gone within {pod.deadline_s}s"
    )
