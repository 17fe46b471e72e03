"""Pure readings of what the reconciler fetched: Kubernetes objects and the driver's metrics in,
the plain values of `status.Observed` out. No I/O here, so every reading is unit-tested on
objects shaped as KubeRay and the kubelet write them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from kuberl_contract.final_record import FinalRecord
from kuberl_contract.json_values import finite_or_none
from kuberl_contract.progress_row import (
    CHECKPOINT_LABEL,
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    METRIC_CHECKPOINT,
    METRIC_EPISODE_RETURN_MEAN,
    METRIC_EVALUATION_RETURN_MEAN,
    METRIC_ITERATION,
    METRIC_LAST_ITERATION_TIMESTAMP,
    METRIC_LEARNER_UTILISATION,
    METRIC_POLICY_LAG_MAX,
    METRIC_RESOURCE_WAIT,
    METRIC_SAMPLES_PER_SECOND,
    METRIC_STALE_BATCHES_DROPPED,
    METRIC_TIMESTEPS,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
)
from kuberl_operator.constants import (
    ATTEMPT_LABEL,
    GROUP,
    KIND,
    RAY_HEAD_NODE_TYPE,
    RAY_NODE_TYPE_LABEL,
    ROLLOUT_GROUP,
)
from kuberl_operator.cost import PodOnNode, pod_on_node
from kuberl_operator.status import (
    HEAD_GROUP,
    HeadFate,
    LearnerLoad,
    ObservedCluster,
    ObservedHead,
    ObservedProgress,
    TakenName,
    UnschedulablePods,
)

Object = dict[str, Any]

# Pod reasons the node lifecycle controller and the kubelet give a pod whose node went away
# (clusters without the DisruptionTarget condition, before Kubernetes 1.26, say only this).
NODE_GONE_REASONS = frozenset({"NodeLost", "NodeShutdown", "Terminated"})
# KubeRay labels every pod of a worker group with the group's name.
RAY_GROUP_LABEL = "ray.io/group"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _condition(obj: Object, type_: str) -> Object | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def _labels(obj: Object) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def controller(obj: Object) -> Object | None:
    """The object's controller: the ownerReference marked `controller` (at most one may be)."""
    owners = obj.get("metadata", {}).get("ownerReferences") or []
    return next((owner for owner in owners if owner.get("controller")), None)


def taken_name(kind: str, obj: Object, job_name: str, job_uid: str) -> TakenName | None:
    """None when the object (of `kind`, under a name a child of the job `job_name` needs) is the
    job's: its controller is the job's UID, as for every child the operator creates. Else the
    name is taken: by a child of an earlier RLJob of the same name (the garbage collector removes
    those), or by someone else's object."""
    owner = controller(obj) or {}
    if job_uid and owner.get("uid") == job_uid:
        return None
    leftover = (
        owner.get("kind") == KIND
        and str(owner.get("apiVersion", "")).split("/")[0] == GROUP
        and owner.get("name") == job_name
    )
    return TakenName(kind, obj["metadata"]["name"], leftover=leftover)


def cluster_attempt(ray_cluster: Object) -> int:
    """The attempt a RayCluster serves (its `kuberl.io/attempt` label); 0 when unlabelled."""
    try:
        return int(_labels(ray_cluster).get(ATTEMPT_LABEL, "0"))
    except ValueError:
        return 0


def observed_cluster(ray_cluster: Object, head_pod: Object | None) -> ObservedCluster:
    """KubeRay's view of the cluster (`.status.state`, or its HeadPodReady condition) and
    whether the head pod is Ready."""
    state = (ray_cluster.get("status") or {}).get("state")
    head_ready_condition = _condition(ray_cluster, "HeadPodReady")
    if state is None and head_ready_condition and head_ready_condition.get("status") == "True":
        state = "ready"  # KubeRay >= 1.2 may leave the deprecated state empty
    ready = head_pod is not None and pod_ready(head_pod)
    return ObservedCluster(
        name=ray_cluster["metadata"]["name"],
        attempt=cluster_attempt(ray_cluster),
        state=state,
        head_ready=ready,
    )


def pod_ready(pod: Object) -> bool:
    ready = _condition(pod, "Ready")
    return (
        ready is not None
        and ready.get("status") == "True"
        and not pod["metadata"].get("deletionTimestamp")
    )


def disruption(pod: Object) -> str | None:
    """Why a pod was preempted, in words, or None: a DisruptionTarget condition (preemption,
    eviction, taint manager, pod GC after its node went away) or a node-gone reason."""
    target = _condition(pod, "DisruptionTarget")
    if target is not None and target.get("status") == "True":
        detail = target.get("message") or ""
        return f"{target.get('reason') or 'DisruptionTarget'}" + (f": {detail}" if detail else "")
    reason = (pod.get("status") or {}).get("reason")
    if reason in NODE_GONE_REASONS:
        return f"{reason}: its node is gone"
    return None


def _terminated_with_error(pod: Object) -> str | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return (
                f"container {container.get('name')} exited {terminated.get('exitCode')}"
                f" ({terminated.get('reason') or 'Error'})"
            )
    return None


def observed_head(pod: Object | None) -> ObservedHead | None:
    """What became of the head pod (and its UID): preempted, failed (Failed phase, a container
    exited with an error, or deleted), or running; None while it does not exist."""
    if pod is None:
        return None
    uid = pod["metadata"].get("uid") or ""
    preempted = disruption(pod)
    if preempted:
        return ObservedHead(HeadFate.PREEMPTED, preempted, uid)
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        why = status.get("message") or status.get("reason") or "pod Failed"
        return ObservedHead(HeadFate.FAILED, why, uid)
    crashed = _terminated_with_error(pod)
    if crashed:
        return ObservedHead(HeadFate.FAILED, crashed, uid)
    if pod["metadata"].get("deletionTimestamp"):
        return ObservedHead(HeadFate.FAILED, "the pod was deleted", uid)
    return ObservedHead(HeadFate.RUNNING, uid=uid)


def head_pod(pods: Iterable[Object]) -> Object | None:
    """The cluster's head pod; the newest one if KubeRay has made a replacement already."""
    heads = [p for p in pods if _labels(p).get(RAY_NODE_TYPE_LABEL) == RAY_HEAD_NODE_TYPE]
    return max(heads, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)


def worker_pods(pods: Iterable[Object]) -> list[Object]:
    return [
        p for p in pods if _labels(p).get(RAY_NODE_TYPE_LABEL) not in (None, RAY_HEAD_NODE_TYPE)
    ]


def desired_workers(ray_cluster: Object) -> int:
    groups = ray_cluster.get("spec", {}).get("workerGroupSpecs") or []
    return sum(int(g.get("replicas") or 0) for g in groups)


class WorkerPods(NamedTuple):
    """The current attempt's rollout worker pods as the status counts them."""

    disrupted: frozenset[str]
    """UIDs of the preempted ones."""
    short: int
    """How many the cluster lacks: its groups' replicas minus `live`."""
    live: int
    """Those not preempted and not being deleted (Pending ones included): the job's current size,
    as its scale subresource reports it."""


def workers(ray_cluster: Object, pods: Iterable[Object]) -> WorkerPods:
    """The worker pods as the status counts them: KubeRay refills a group by creating pods, so a
    group is whole again once pods that were not preempted, and are not being deleted, number its
    replicas (Pending ones included)."""
    disrupted, live = set(), 0
    for pod in worker_pods(pods):
        if disruption(pod):
            disrupted.add(pod["metadata"]["uid"])
        elif not pod["metadata"].get("deletionTimestamp"):
            live += 1
    return WorkerPods(frozenset(disrupted), max(0, desired_workers(ray_cluster) - live), live)


def scheduled_nodes(pods: Iterable[Object]) -> set[str]:
    """The names of the nodes the pods are scheduled on (spec.nodeName)."""
    return {name for p in pods if (name := (p.get("spec") or {}).get("nodeName"))}


def pods_on_nodes(
    pods: Iterable[Object], nodes: dict[str, Object], now: datetime
) -> tuple[PodOnNode, ...]:
    """The pods that hold a node now, with the node (`nodes`, by name: those that could be read):
    scheduled and not finished (a Succeeded or Failed pod holds nothing). Each has held its node
    since its PodScheduled condition turned True, else since it was created."""
    held = []
    for pod in pods:
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        if node is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        scheduled = _condition(pod, "PodScheduled") or {}
        when = scheduled.get("lastTransitionTime") if scheduled.get("status") == "True" else None
        since = parse_time(when) or parse_time(pod["metadata"].get("creationTimestamp"))
        seconds = None if since is None else max((now - since).total_seconds(), 0.0)
        role = "head" if _labels(pod).get(RAY_NODE_TYPE_LABEL) == RAY_HEAD_NODE_TYPE else "worker"
        held.append(pod_on_node(pod, node, role, seconds))
    return tuple(held)


def pending_rollout_pods(pods: Iterable[Object]) -> list[Object]:
    """The pods of the (spot) rollout group still Pending, oldest first: those that hold no node
    yet, which a shrinking group gives up first."""
    pending = [
        p
        for p in worker_pods(pods)
        if _labels(p).get(RAY_GROUP_LABEL) == ROLLOUT_GROUP
        and (p.get("status") or {}).get("phase", "Pending") == "Pending"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return sorted(pending, key=lambda p: p["metadata"].get("creationTimestamp") or "")


def pending_spot_workers(pods: Iterable[Object], now: datetime) -> tuple[int, float]:
    """(Pending pods of the spot rollout group, seconds the oldest of them has been Pending)."""
    pending = pending_rollout_pods(pods)
    created = [parse_time(p["metadata"].get("creationTimestamp")) or now for p in pending]
    oldest = max(((now - t).total_seconds() for t in created), default=0.0)
    return len(pending), oldest


def unschedulable(pods: Iterable[Object]) -> tuple[UnschedulablePods, ...]:
    """The pods the scheduler cannot place, by group (the head first, then the worker groups by
    name): those with PodScheduled False and reason Unschedulable, as kube-scheduler marks a pod
    it found no node for, and not being deleted. Each group carries its pods' most common
    message, so one odd pod does not change what the job says."""
    messages: dict[str, list[str]] = {}
    for pod in pods:
        scheduled = _condition(pod, "PodScheduled")
        if (
            scheduled is None
            or scheduled.get("status") != "False"
            or scheduled.get("reason") != "Unschedulable"
            or pod["metadata"].get("deletionTimestamp")
        ):
            continue
        labels = _labels(pod)
        head = labels.get(RAY_NODE_TYPE_LABEL) == RAY_HEAD_NODE_TYPE
        group = HEAD_GROUP if head else labels.get(RAY_GROUP_LABEL) or "unnamed"
        messages.setdefault(group, []).append(scheduled.get("message") or "no message")
    found = []
    for group, said in messages.items():
        counts = Counter(said)
        message = min(counts, key=lambda text: (-counts[text], text))  # ties: the same each time
        found.append(UnschedulablePods(group, len(said), message))
    return tuple(sorted(found, key=lambda g: (g.group != HEAD_GROUP, g.group)))


# --- The driver's progress: its metrics while it runs, its final record once it has ended ---

_CHECKPOINT_INFO = f"{METRIC_CHECKPOINT}_info"  # how Prometheus exposes an Info metric


def _metric_values(text: str) -> tuple[dict[str, float], str | None]:
    """Each sample's value by metric name, and the newest checkpoint's location."""
    values: dict[str, float] = {}
    checkpoint = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == _CHECKPOINT_INFO:
                checkpoint = sample.labels.get(CHECKPOINT_LABEL) or checkpoint
            else:
                values[sample.name] = sample.value
    return values, checkpoint


def progress_from_metrics(text: str) -> ObservedProgress | None:
    """The driver's newest iteration, as its metrics report it (the names are in
    kuberl_contract.progress_row); None before the first iteration of this run and before a resumed
    run has reported anything."""
    values, checkpoint = _metric_values(text)
    when = values.get(METRIC_LAST_ITERATION_TIMESTAMP)
    iteration = values.get(METRIC_ITERATION)
    if not when or iteration is None:
        return None
    row = {
        ITERATION: int(iteration),
        TIMESTEPS_TOTAL: int(values.get(METRIC_TIMESTEPS, 0)),
        EPISODE_RETURN_MEAN: finite_or_none(values.get(METRIC_EPISODE_RETURN_MEAN)),
        EVALUATION_RETURN_MEAN: finite_or_none(values.get(METRIC_EVALUATION_RETURN_MEAN)),
        SAMPLES_PER_S: finite_or_none(values.get(METRIC_SAMPLES_PER_SECOND)),
    }
    return ObservedProgress(
        row=row, time=datetime.fromtimestamp(when, UTC), last_checkpoint=checkpoint
    )


def learner_load_from_metrics(text: str) -> LearnerLoad | None:
    """How the driver's learner thread keeps up, as its metrics report it; None where its
    optimizer has no learner thread (or it has not reported an iteration yet)."""
    values, _ = _metric_values(text)
    utilisation = finite_or_none(values.get(METRIC_LEARNER_UTILISATION))
    if utilisation is None:
        return None
    return LearnerLoad(
        utilisation=utilisation,
        policy_lag_max=finite_or_none(values.get(METRIC_POLICY_LAG_MAX)),
        stale_batches_dropped=int(values.get(METRIC_STALE_BATCHES_DROPPED, 0)),
    )


def waiting_from_metrics(text: str) -> float:
    """Seconds the driver has been waiting for the Ray nodes of its rollout workers; 0 when it
    is not waiting (or does not say)."""
    waited = finite_or_none(_metric_values(text)[0].get(METRIC_RESOURCE_WAIT))
    return waited if waited is not None and waited > 0 else 0.0


def progress_from_final_record(record: FinalRecord | None) -> ObservedProgress | None:
    """Where training stood when the driver ended (its metrics went with it), from the final
    record that ends its log; None without one, or when it ended before training."""
    if record is None or record.iteration is None:
        return None
    return ObservedProgress(
        row=record.row(),
        time=datetime.fromtimestamp(record.time, UTC),
        last_checkpoint=record.checkpoint,
        exported_policy=record.policy,
    )
