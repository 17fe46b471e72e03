"""Pods about to go, end to end: kopf running for real against the emulated Kubernetes API, and a
real Ray head's Jobs API. A rollout worker gets a DisruptionTarget condition, or its node a
disruption taint: the operator submits one drain job for it to the Ray head (whose entrypoint runs
the trainer's drain module there: the head has no node at the pod's address, so it only says so),
says so in a NodeDraining Event and remembers it in status.draining; later polls submit nothing
more, and a drain job is never taken for a driver. The harness is test_operator's."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from test_operator import (  # noqa: F401 (cluster and ray_head are the harness's fixtures)
    EVENTS,
    PATIENCE,
    PODS,
    RUNNING_READY,
    Cluster,
    cluster,
    ray_head,
)

from kuberl_contract.drain import DRAIN_SUBMISSION_PREFIX, drain_entrypoint
from kuberl_operator.ray_jobs import RayJobsClient
from kuberl_operator.status.disruption import DISRUPTION_TAINTS, drain_submission_id
from testkit import rljob, wait_until

pytestmark = pytest.mark.slow

WORKER_IP = "10.244.1.7"  # no node of the test's Ray head has it


def spot_job(name: str) -> dict:
    job = rljob(name, rolloutWorkers={"replicas": 1, "spot": {"enabled": True, "provider": "gke"}})
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    return job


def the_worker(world: Cluster, name: str) -> dict:
    selector = f"ray.io/cluster={name},ray.io/node-type=worker"
    [worker] = world.kube_api.list(PODS, params={"labelSelector": selector})
    return worker


def draining_events(world: Cluster, name: str) -> list[dict]:
    return [
        e
        for e in world.kube_api.list(EVENTS)
        if e["involvedObject"]["name"] == name and e["reason"] == "NodeDraining"
    ]


def polls_later(world: Cluster, name: str, polls: int = 2) -> None:
    """Waits until the operator has looked at the job `polls` more times (each poll tallies the
    cost of its pods anew)."""

    def tallied() -> str:
        return world.status(name)["cost"]["lastTallyTime"]

    for _ in range(polls):
        before = tallied()
        wait_until(lambda before=before: tallied() != before, PATIENCE, "a poll")


def drain_jobs(world: Cluster, pod: str) -> list[dict]:
    """The drain jobs of the pod `pod` that the Ray head knows, as its Jobs API lists them (the
    head is the module's: other tests' jobs are there too)."""
    jobs = world.kuberay.ray.get(f"{world.kuberay.ray_url}/api/jobs/", timeout=10).json()
    return [
        j
        for j in jobs
        if (j["submission_id"] or "").startswith(DRAIN_SUBMISSION_PREFIX)
        and j["submission_id"].endswith(f"-{pod}")
    ]


def driver_statuses(world: Cluster) -> dict:
    """The submissions the operator's Ray Jobs client lists as drivers."""
    ray_url, token = world.kuberay.ray_url, world.token

    async def listed() -> dict:
        async with aiohttp.ClientSession() as session:
            return await RayJobsClient(ray_url, token, session).statuses()

    return asyncio.run(listed())


def test_a_worker_with_a_disruption_target_is_drained_once(cluster: Cluster):  # noqa: F811
    with cluster.operator():
        cluster.submit(spot_job("evicted"))
        cluster.wait_phase("evicted", "Running")
        worker = the_worker(cluster, "evicted")
        name = worker["metadata"]["name"]
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "spot capacity reclaimed",
        }
        with cluster.kuberay.lock:  # KubeRay deletes a disrupted pod once the operator saw it
            conditions = [*RUNNING_READY["conditions"], disruption]
            status = {"podIP": WORKER_IP, "conditions": conditions}
            cluster.kube_api.patch(f"{PODS}/{name}/status", {"status": status})
            wait_until(
                lambda: cluster.status("evicted").get("draining") == [name],
                PATIENCE,
                "the worker in status.draining",
            )
            [drain] = drain_jobs(cluster, name)
            assert drain["submission_id"] == drain_submission_id(1, name)
            reason = "PreemptionByScheduler: spot capacity reclaimed"
            assert drain["entrypoint"] == drain_entrypoint([WORKER_IP], 30, reason)
            [event] = wait_until(
                lambda: draining_events(cluster, "evicted"), PATIENCE, "the NodeDraining Event"
            )
            assert event["type"] == "Normal"
            assert event["message"] == (
                f"pod {name} ({WORKER_IP}) is about to go ({reason}): its Ray node drains, to be "
                "gone within 30s"
            )

            polls_later(cluster, "evicted")  # the worker is still about to go: nothing more
            assert len(drain_jobs(cluster, name)) == 1
            assert len(draining_events(cluster, "evicted")) == 1
            assert cluster.status("evicted")["draining"] == [name]

        # KubeRay deletes the pod: it is forgotten, and the drain job never counted as a driver.
        wait_until(
            lambda: cluster.status("evicted").get("draining") == [],
            PATIENCE,
            "the gone pod out of status.draining",
        )
        assert cluster.kuberay.submissions("evicted") == ["evicted-1"]
        drivers = driver_statuses(cluster)  # the head's Jobs API lists the drain job: not as one
        assert "evicted-1" in drivers and drain["submission_id"] not in drivers
        assert cluster.status("evicted")["restarts"] == 0


def test_a_worker_on_a_tainted_node_is_drained_once(cluster: Cluster):  # noqa: F811
    with cluster.operator():
        cluster.submit(spot_job("tainted"))
        cluster.wait_phase("tainted", "Running")
        worker = the_worker(cluster, "tainted")
        name, node = worker["metadata"]["name"], worker["spec"]["nodeName"]
        status = {"podIP": WORKER_IP, "conditions": RUNNING_READY["conditions"]}
        cluster.kube_api.patch(f"{PODS}/{name}/status", {"status": status})
        polls_later(cluster, "tainted")
        assert cluster.status("tainted")["draining"] == []  # an IP alone says nothing

        taint = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
        cluster.kube_api.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [taint]}})
        wait_until(
            lambda: cluster.status("tainted").get("draining") == [name],
            PATIENCE,
            "the worker in status.draining",
        )
        [drain] = drain_jobs(cluster, name)
        reason = f"node {node} is tainted karpenter.sh/disrupted: {DISRUPTION_TAINTS[taint['key']]}"
        assert drain["entrypoint"] == drain_entrypoint([WORKER_IP], 30, reason)
        wait_until(lambda: draining_events(cluster, "tainted"), PATIENCE, "the NodeDraining Event")

        polls_later(cluster, "tainted")
        assert len(drain_jobs(cluster, name)) == 1
        assert len(draining_events(cluster, "tainted")) == 1
        drivers = driver_statuses(cluster)
        assert "tainted-1" in drivers and drain["submission_id"] not in drivers
        assert cluster.status("tainted")["phase"] == "Running"  # a drain is no preemption yet
