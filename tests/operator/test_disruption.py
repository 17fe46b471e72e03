"""Pods about to go (status/disruption.py), read from plain dicts as the Kubernetes API returns
them: every signal, the pods that hold no Ray node to drain, the deadline; and which of them a
running job drains, once each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from test_status import NOW, on_cluster, running, spec

from kuberl_contract.drain import DRAIN_SUBMISSION_PREFIX
from kuberl_operator.spec import Phase
from kuberl_operator.status import compute_status
from kuberl_operator.status.disruption import (
    DEFAULT_GRACE_SECONDS,
    DISRUPTION_TAINTS,
    PodAboutToGo,
    drain_submission_id,
    draining_message,
    next_drains,
    pods_about_to_go,
)

NODE = "node-spot"


def pod(name: str = "worker-1", ip: str | None = "10.0.0.7", **fields: Any) -> dict:
    """A running pod on NODE; `conditions`, `phase`, `deletionTimestamp` and
    `terminationGracePeriodSeconds` where given."""
    status: dict[str, Any] = {"phase": fields.get("phase", "Running")}
    if ip is not None:
        status["podIP"] = ip
    if "conditions" in fields:
        status["conditions"] = fields["conditions"]
    spec: dict[str, Any] = {"nodeName": NODE}
    if "grace" in fields:
        spec["terminationGracePeriodSeconds"] = fields["grace"]
    meta: dict[str, Any] = {"name": name}
    if "deleted_by" in fields:
        meta["deletionTimestamp"] = fields["deleted_by"]
    return {"metadata": meta, "spec": spec, "status": status}


def node(*taint_keys: str) -> dict:
    taints = [{"key": key, "effect": "NoSchedule"} for key in taint_keys]
    return {"metadata": {"name": NODE}, "spec": {"taints": taints}}


def target(reason: str, status: str = "True", message: str = "") -> list[dict]:
    """A pod's conditions with a DisruptionTarget, as Kubernetes writes it."""
    condition = {"type": "DisruptionTarget", "status": status, "reason": reason}
    if message:
        condition["message"] = message
    return [{"type": "Ready", "status": "True"}, condition]


@pytest.mark.parametrize(
    "reason",
    [
        "PreemptionByScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "TerminationByKubelet",
    ],
)
def test_a_disruption_target_condition_says_the_pod_is_about_to_go(reason: str):
    [going] = pods_about_to_go([pod(conditions=target(reason))], {NODE: node()}, NOW)
    assert going == PodAboutToGo("worker-1", "10.0.0.7", reason, DEFAULT_GRACE_SECONDS)


def test_the_condition_s_message_is_part_of_the_reason_and_a_false_one_is_no_signal():
    said = pod(conditions=target("PreemptionByScheduler", message="spot capacity reclaimed"))
    [going] = pods_about_to_go([said], {}, NOW)
    assert going.reason == "PreemptionByScheduler: spot capacity reclaimed"
    withdrawn = pod(conditions=target("PreemptionByScheduler", status="False"))
    assert pods_about_to_go([withdrawn], {}, NOW) == ()


@pytest.mark.parametrize("key", sorted(DISRUPTION_TAINTS))
def test_each_disruption_taint_on_the_node_says_its_pods_are_about_to_go(key: str):
    [going] = pods_about_to_go([pod()], {NODE: node("other.io/taint", key)}, NOW)
    assert going.reason == f"node {NODE} is tainted {key}: {DISRUPTION_TAINTS[key]}"
    assert going.deadline_s == DEFAULT_GRACE_SECONDS


def test_a_cordon_or_an_unknown_taint_or_an_unread_node_is_no_signal():
    cordoned = node("node.kubernetes.io/unschedulable", "dedicated")
    assert pods_about_to_go([pod()], {NODE: cordoned}, NOW) == ()
    assert pods_about_to_go([pod()], {}, NOW) == ()  # the node could not be read


def test_a_pod_being_deleted_goes_by_its_deletion_timestamp():
    deleted_by = (NOW + timedelta(seconds=44.2)).isoformat().replace("+00:00", "Z")
    [going] = pods_about_to_go([pod(deleted_by=deleted_by, grace=600)], {}, NOW)
    assert (going.reason, going.deadline_s) == ("the pod is being deleted", 45)
    late = (NOW - timedelta(seconds=5)).isoformat()
    [overdue] = pods_about_to_go([pod(deleted_by=late)], {}, NOW)
    assert overdue.deadline_s == 0


def test_without_a_deletion_the_deadline_is_the_grace_period():
    tainted = {NODE: node("ToBeDeletedByClusterAutoscaler")}
    [going] = pods_about_to_go([pod(grace=120)], tainted, NOW)
    assert going.deadline_s == 120
    [default] = pods_about_to_go([pod()], tainted, NOW)
    assert default.deadline_s == DEFAULT_GRACE_SECONDS == 30


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed", "Unknown"])
def test_pods_not_running_are_skipped(phase: str):
    tainted = {NODE: node("karpenter.sh/disrupted")}
    assert pods_about_to_go([pod(phase=phase)], tainted, NOW) == ()


def test_pods_without_an_ip_are_skipped():
    tainted = {NODE: node("karpenter.sh/disrupted")}
    assert pods_about_to_go([pod(ip=None)], tainted, NOW) == ()
    assert pods_about_to_go([pod(ip="")], tainted, NOW) == ()


def test_pods_come_by_name_and_quiet_ones_are_left_out():
    pods = [
        pod("worker-2", "10.0.0.8", conditions=target("EvictionByEvictionAPI")),
        pod("head", "10.0.0.2"),
        pod("worker-1", "10.0.0.7", deleted_by=NOW.isoformat()),
    ]
    assert [p.name for p in pods_about_to_go(pods, {NODE: node()}, NOW)] == [
        "worker-1",
        "worker-2",
    ]


# --- Which are drained, once each -----------------------------------------------------------------

A = PodAboutToGo("worker-a", "10.0.0.7", "PreemptionByScheduler", 30)
B = PodAboutToGo("worker-b", "10.0.0.8", "TerminationByKubelet", 30)


def test_pods_newly_about_to_go_are_drained_and_remembered_while_they_exist():
    drains, draining = next_drains([], [A], {"head", "worker-a"})
    assert (drains, draining) == ((A,), ["worker-a"])
    # The next poll: A is still about to go, B now too: only B is drained.
    drains, draining = next_drains(draining, [A, B], {"head", "worker-a", "worker-b"})
    assert (drains, draining) == ((B,), ["worker-a", "worker-b"])
    # A is gone: forgotten; B is still there, and not drained again.
    drains, draining = next_drains(draining, [B], {"head", "worker-b"})
    assert (drains, draining) == ((), ["worker-b"])


def test_a_drain_s_submission_id_is_fixed_per_attempt_and_pod_and_never_a_driver_s():
    submission = drain_submission_id(2, "walker-rollout-worker-x7k2p")
    assert submission == drain_submission_id(2, "walker-rollout-worker-x7k2p")
    assert submission.startswith(DRAIN_SUBMISSION_PREFIX)
    assert submission != drain_submission_id(3, "walker-rollout-worker-x7k2p")


def test_the_event_says_which_pod_why_and_the_deadline():
    assert draining_message(A) == (
        "pod worker-a (10.0.0.7) is about to go (PreemptionByScheduler): its Ray node drains, "
        "to be gone within 30s"
    )


def test_the_head_s_pod_is_known_so_its_driver_checkpoints_and_its_node_is_not_drained():
    head = pod("walker-head", deleted_by="2026-03-01T12:00:20Z")
    head["metadata"]["labels"] = {"ray.io/node-type": "head"}
    [going] = pods_about_to_go([head, pod()], {}, NOW)  # the worker is quiet
    assert going.name == "walker-head" and going.head and going.deadline_s == 20
    assert "the driver checkpoints now" in draining_message(going)


def test_a_running_job_drains_each_pod_once_across_polls():
    job = spec()
    update = running(job)
    assert update.phase == Phase.RUNNING and update.status.draining == []
    pods = frozenset({"head", "worker-a"})
    first = compute_status(job, on_cluster(update, about_to_go=(A,), pod_names=pods))
    assert first.drains == (A,) and first.status.draining == ["worker-a"]
    again = compute_status(job, on_cluster(first, about_to_go=(A,), pod_names=pods))
    assert again.drains == () and again.status.draining == ["worker-a"]
    gone = compute_status(job, on_cluster(again, pod_names=frozenset({"head"})))
    assert gone.drains == () and gone.status.draining == []
