"""Pure readings of pods, RayClusters and driver metrics (observe.py), on objects shaped as KubeRay
and the kubelet write them."""

from datetime import UTC, datetime, timedelta

import pytest

from kuberl_contract.final_record import FinalRecord, Outcome
from kuberl_operator.builders import build_ray_cluster, scale_on_demand, stale_spec
from kuberl_operator.observe import (
    disruption,
    observed_cluster,
    observed_head,
    pending_spot_workers,
    progress_from_final_record,
    progress_from_metrics,
    unschedulable,
    waiting_from_metrics,
    workers,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec.status import Progress
from kuberl_operator.status import HEAD_GROUP, HeadFate, UnschedulablePods
from kuberl_operator.status.compute import merge_progress
from kuberl_operator.status.observed import ObservedProgress
from kuberl_operator.validation import validate_rljob
from testkit import edited, rljob

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pod(uid: str, node_type: str = "worker", group: str = "rollout", **status) -> dict:
    labels = {"ray.io/node-type": node_type, "ray.io/group": group}
    created = (NOW - timedelta(seconds=status.pop("age", 0))).isoformat()
    return {
        "metadata": {"name": uid, "uid": uid, "labels": labels, "creationTimestamp": created},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        | status,
    }


DISRUPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, None),
        ({"conditions": [DISRUPTED]}, "PreemptionByScheduler"),
        ({"conditions": [DISRUPTED | {"message": "spot"}]}, "PreemptionByScheduler: spot"),
        ({"conditions": [DISRUPTED | {"status": "False"}]}, None),
        ({"reason": "NodeLost"}, "NodeLost: its node is gone"),
    ],
)
def test_disruption(status, expected):
    assert disruption(pod("p", **status)) == expected


@pytest.mark.parametrize(
    ("head", "fate"),
    [
        (pod("h", "head"), HeadFate.RUNNING),
        (pod("h", "head", conditions=[DISRUPTED]), HeadFate.PREEMPTED),
        (pod("h", "head", phase="Failed", reason="Evicted"), HeadFate.FAILED),
        (
            pod(
                "h",
                "head",
                containerStatuses=[
                    {"name": "ray-head", "state": {"terminated": {"exitCode": 137}}}
                ],
            ),
            HeadFate.FAILED,
        ),
    ],
)
def test_observed_head(head, fate):
    assert observed_head(head).fate == fate
    assert observed_head(head).uid == "h"  # which pod it is: KubeRay may replace it
    assert observed_head(None) is None


def test_a_deleted_head_is_lost():
    head = pod("h", "head")
    head["metadata"]["deletionTimestamp"] = NOW.isoformat()
    assert observed_head(head).fate == HeadFate.FAILED


JOB = validate_rljob(
    rljob(
        "walker",
        namespace="default",
        minimal=True,
        rolloutWorkers={
            "replicas": 3,
            "spot": {"enabled": True, "provider": "gke", "fallbackToOnDemand": True},
        },
    )
)
CLUSTER = build_ray_cluster(JOB, OperatorSettings(), 2)


def test_cluster_readiness_needs_kuberay_ready_and_a_ready_head():
    cluster = CLUSTER | {"status": {"state": "ready"}}
    assert observed_cluster(cluster, pod("h", "head")).ready
    assert observed_cluster(cluster, pod("h", "head")).attempt == 2
    assert not observed_cluster(cluster, None).ready
    assert not observed_cluster(CLUSTER, pod("h", "head")).ready
    conditions = {"conditions": [{"type": "HeadPodReady", "status": "True"}]}
    assert observed_cluster(CLUSTER | {"status": conditions}, pod("h", "head")).ready


def test_workers_preempted_and_short():
    pods = [pod("h", "head"), pod("a"), pod("b", conditions=[DISRUPTED])]
    assert workers(CLUSTER, pods) == (frozenset({"b"}), 2, 1)
    refilled = [*pods, pod("c"), pod("d", phase="Pending")]
    assert workers(CLUSTER, refilled) == (frozenset({"b"}), 0, 3)


def test_pending_spot_workers_and_the_on_demand_fallback():
    pods = [pod("a"), pod("b", phase="Pending", age=30), pod("c", phase="Pending", age=200)]
    pods.append(pod("d", group="rollout-on-demand", phase="Pending", age=500))
    assert pending_spot_workers(pods, NOW) == (2, 200)
    assert scale_on_demand(CLUSTER, 0) == []
    [test, replace] = scale_on_demand(CLUSTER, 2)
    assert test["value"] == "rollout-on-demand" and replace["value"] == 2


NO_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
NO_MATCH = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def pending(uid: str, node_type: str = "worker", group: str = "rollout", **scheduled) -> dict:
    """A pod kube-scheduler found no node for (PodScheduled False, reason Unschedulable)."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": NO_GPU,
    }
    return pod(uid, node_type, group, phase="Pending", conditions=[condition | scheduled])


def test_unschedulable_pods_by_group_with_the_schedulers_message():
    deleting = pending("gone")
    deleting["metadata"]["deletionTimestamp"] = NOW.isoformat()
    pods = [
        pod("running"),
        pending("on-demand", group="rollout-on-demand", message=NO_MATCH),
        pending("a"),
        pending("b", message=NO_MATCH),
        pending("c"),
        pending("h", "head", "headgroup"),
        pod("new", phase="Pending"),  # the scheduler has not tried it yet
        pending("error", reason="SchedulerError"),  # not a lack of nodes
        pending("placed", status="True", reason=""),
        deleting,
    ]
    assert unschedulable(pods) == (
        UnschedulablePods(HEAD_GROUP, 1, NO_GPU),
        UnschedulablePods("rollout", 3, NO_GPU),  # the message most of the group's pods have
        UnschedulablePods("rollout-on-demand", 1, NO_MATCH),
    )
    assert unschedulable([pod("h", "head"), pod("a")]) == ()


def test_an_even_split_of_messages_gives_the_same_one_whatever_the_order():
    pods = [pending("a"), pending("b", message=NO_MATCH)]
    assert unschedulable(pods) == unschedulable(pods[::-1])


def edited_job(**changes) -> object:
    document = JOB.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return validate_rljob(edited(document, **changes))


def test_stale_spec_names_edits_that_need_the_next_attempt():
    assert stale_spec(JOB, CLUSTER) == ()
    in_place = {"spec.suspend": True, "spec.restartPolicy": {"maxRestarts": 9}}
    assert stale_spec(edited_job(**in_place), CLUSTER) == ()  # the operator applies those at once
    needs_restart = edited_job(**{"spec.trainer.seed": 7, "spec.rolloutWorkers.replicas": 4})
    assert stale_spec(needs_restart, CLUSTER) == ("rolloutWorkers", "trainer")
    assert stale_spec(needs_restart, {"metadata": {}}) == ()  # a cluster not built by kuberl


# --- The driver's progress, as the trainer reports it -------------------------------------------


def exposition(metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_the_drivers_metrics_are_read_as_the_trainer_writes_them():
    from kuberl_trainer.job.metrics import TrainerMetrics

    metrics = TrainerMetrics("default", "walker", "PPO")
    assert progress_from_metrics(exposition(metrics)) is None  # no iteration yet
    assert waiting_from_metrics(exposition(metrics)) == 0.0

    metrics.waiting_for_resources(12.5)
    assert waiting_from_metrics(exposition(metrics)) == 12.5
    metrics.waiting_for_resources(0.0)
    assert waiting_from_metrics(exposition(metrics)) == 0.0

    metrics.checkpointed(1_700_000_000.0, "s3://bucket/walker/checkpoint-00000002")
    row = {
        "iteration": 3,
        "timesteps_total": 12_000,
        "timesteps_this_iter": 4000,
        "timesteps_trained_this_iter": 4000,
        "episodes_this_iter": 20,
        "episode_return_mean": 31.5,
        "episode_len_mean": 31.5,
        "evaluation_return_mean": None,
        "samples_per_s": 1500.0,
    }
    metrics.record(row, {}, 0)
    progress = progress_from_metrics(exposition(metrics))
    assert progress is not None
    assert progress.row == {
        "iteration": 3,
        "timesteps_total": 12_000,
        "episode_return_mean": 31.5,
        "evaluation_return_mean": None,  # not evaluated yet
        "samples_per_s": 1500.0,
    }
    assert progress.last_checkpoint == "s3://bucket/walker/checkpoint-00000002"

    metrics.record(row | {"iteration": 4, "evaluation_return_mean": 488.5}, {}, 0)
    evaluated = progress_from_metrics(exposition(metrics))
    assert evaluated.row["evaluation_return_mean"] == 488.5
    status = merge_progress(Progress(), evaluated)
    assert (status.episode_return_mean, status.evaluation_return_mean) == (31.5, 488.5)
    # A later row without a new evaluation keeps the last one.
    later = ObservedProgress(
        row={"iteration": 5, "evaluation_return_mean": None},
        time=evaluated.time + timedelta(seconds=1),
    )
    assert merge_progress(status, later).evaluation_return_mean == 488.5


def test_the_final_record_gives_the_last_progress():
    record = FinalRecord(
        outcome=Outcome.STOPPED,
        exit_code=0,
        message="stopped at timesteps>=20000",
        time=NOW.timestamp(),
        iteration=40,
        timesteps_total=20_480,
        episode_return_mean=float("nan"),
        time_total_s=12.5,
        checkpoint="/runs/walker/checkpoints/checkpoint-00000040",
    )
    progress = progress_from_final_record(record)
    assert progress is not None and progress.time == NOW
    assert progress.row == {"iteration": 40, "timesteps_total": 20_480, "time_total_s": 12.5}
    assert progress.last_checkpoint == "/runs/walker/checkpoints/checkpoint-00000040"

    invalid = FinalRecord(Outcome.INVALID_JOB, 65, "unknown env", NOW.timestamp())
    assert progress_from_final_record(invalid) is None  # ended before training
    assert progress_from_final_record(None) is None
