"""Pure readings of pods, RayClusters and driver metrics (observe.py), on objects shaped as KubeRay
and the kubelet write them."""

from datetime import UTC, datetime, timedelta

import pytest

from kuberl_operator.builders import build_ray_cluster, scale_on_demand, stale_spec
from kuberl_operator.observe import (
    disruption,
    observed_cluster,
    observed_head,
    pending_spot_workers,
    workers,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.status import HeadFate
from kuberl_operator.validation import validate_rljob
from testkit import edited

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
    assert observed_head(None) is None


def test_a_deleted_head_is_lost():
    head = pod("h", "head")
    head["metadata"]["deletionTimestamp"] = NOW.isoformat()
    assert observed_head(head).fate == HeadFate.FAILED


JOB = validate_rljob(
    {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "walker", "namespace": "default"},
        "spec": {
            "trainer": {"algorithm": "PPO", "env": "CartPole-v1", "stop": {"timesteps": 1000}},
            "rolloutWorkers": {
                "replicas": 3,
                "spot": {"enabled": True, "provider": "gke", "fallbackToOnDemand": True},
            },
        },
    }
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
    assert workers(CLUSTER, pods) == (frozenset({"b"}), 2)
    refilled = [*pods, pod("c"), pod("d", phase="Pending")]
    assert workers(CLUSTER, refilled) == (frozenset({"b"}), 0)


def test_pending_spot_workers_and_the_on_demand_fallback():
    pods = [pod("a"), pod("b", phase="Pending", age=30), pod("c", phase="Pending", age=200)]
    pods.append(pod("d", group="rollout-on-demand", phase="Pending", age=500))
    assert pending_spot_workers(pods, NOW) == (2, 200)
    assert scale_on_demand(CLUSTER, 0) == []
    [test, replace] = scale_on_demand(CLUSTER, 2)
    assert test["value"] == "rollout-on-demand" and replace["value"] == 2


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
