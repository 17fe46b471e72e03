"""What a job cost, end to end: kopf running for real against the emulated Kubernetes API, the
job's pods on a labelled on-demand node (the head) and a labelled spot node (the rollout worker),
and spec.budget suspending the job once its cost reaches it. The harness is test_operator's: the
emulated KubeRay places each pod on the node of the capacity its template selects (an m6i.xlarge:
4 CPUs, 16 Gi), and a real Ray head runs the driver."""

from __future__ import annotations

from datetime import datetime

import pytest
from test_operator import (  # noqa: F401 (cluster and ray_head are the harness's fixtures)
    PATIENCE,
    PODS,
    Cluster,
    cluster,
    metric,
    ray_head,
)

from testkit import rljob, wait_until

pytestmark = pytest.mark.slow

# The chart's default prices of an m6i.xlarge (cost.DEFAULT_PRICES), dollars per node-hour.
M6I_ON_DEMAND, M6I_SPOT = 0.192, 0.07
# The head asks for 2 CPUs and 4 Gi (half the node), the worker for 1 CPU and 2 Gi (a quarter).
HEAD_SHARE, WORKER_SHARE = 2 / 4, 1 / 4


def instant(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def held_hours(pod: dict, until: datetime) -> float:
    """Hours the pod has held its node by `until`: since it was created (the emulated scheduler
    places it at once)."""
    return (until - instant(pod["metadata"]["creationTimestamp"])).total_seconds() / 3600


def test_cost_is_the_pods_node_shares_and_a_spent_budget_suspends(cluster: Cluster):  # noqa: F811
    job = rljob(
        "priced", rolloutWorkers={"replicas": 1, "spot": {"enabled": True, "provider": "gke"}}
    )
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        wait_until(
            lambda: cluster.status("priced").get("cost", {}).get("workerHours", 0) > 5 / 3600,
            PATIENCE,
            "five worker-seconds counted",
        )
        cost = cluster.status("priced")["cost"]
        pods = {
            p["metadata"]["labels"]["ray.io/node-type"]: p
            for p in cluster.kube_api.list(PODS, params={"labelSelector": "ray.io/cluster=priced"})
        }
        assert pods["head"]["spec"]["nodeName"] == "node-on-demand"
        assert pods["worker"]["spec"]["nodeName"] == "node-spot"

        # Each pod is counted from when it was scheduled up to the last tally, at its share of its
        # node's price: the same pods were there at every poll, so no poll's granularity is lost.
        tallied = instant(cost["lastTallyTime"])
        head_hours, worker_hours = (
            held_hours(pods["head"], tallied),
            held_hours(pods["worker"], tallied),
        )
        on_demand = HEAD_SHARE * M6I_ON_DEMAND * head_hours
        spot = WORKER_SHARE * M6I_SPOT * worker_hours
        assert cost["onDemandDollars"] == pytest.approx(on_demand, rel=1e-6)
        assert cost["spotDollars"] == pytest.approx(spot, rel=1e-6)
        assert cost["dollars"] == pytest.approx(on_demand + spot, rel=1e-6)
        assert cost["onDemandEquivalentDollars"] == pytest.approx(
            on_demand + WORKER_SHARE * M6I_ON_DEMAND * worker_hours, rel=1e-6
        )
        assert cost["workerHours"] == pytest.approx(worker_hours, rel=1e-6)
        assert cost["gpuHours"] == 0 and cost.get("dollarsAtTarget") is None

        port = cluster.settings.metrics_port
        assert metric(port, "kuberl_job_cost_dollars_total", rljob="priced", capacity="spot") > 0
        assert metric(port, "kuberl_job_worker_hours_total", rljob="priced") > 0
        assert metric(port, "kuberl_job_budget_dollars", rljob="priced") is None

        # A budget the job reaches within seconds (it costs about $0.00003 a second).
        spent = cluster.status("priced")["cost"]["dollars"]
        budget = {"spec": {"budget": {"maxDollars": spent + 0.0001}}}
        cluster.kube_api.patch(cluster.kube_api.rljobs(name="priced"), budget)
        suspended = cluster.wait_phase("priced", "Suspended")
        assert suspended["cost"]["dollars"] >= spent + 0.0001
        condition = cluster.condition("priced", "Suspended")
        assert condition["reason"] == "BudgetExceeded"
        assert "spec.budget.maxDollars" in condition["message"]
        wait_until(lambda: not cluster.clusters("priced"), PATIENCE, "the RayCluster deleted")
        wait_until(
            lambda: ("Warning", "BudgetExceeded") in cluster.events("priced"),
            PATIENCE,
            "the BudgetExceeded Event",
        )
        assert metric(port, "kuberl_job_budget_dollars", rljob="priced") == pytest.approx(
            spent + 0.0001
        )

        # Raising the budget resumes the job on a new attempt; its tally goes on from where it was.
        cluster.kube_api.patch(
            cluster.kube_api.rljobs(name="priced"), {"spec": {"budget": {"maxDollars": 100}}}
        )
        [resumed] = wait_until(lambda: cluster.clusters("priced"), PATIENCE, "a new RayCluster")
        assert resumed["metadata"]["labels"]["kuberl.io/attempt"] == "2"
        assert cluster.status("priced")["cost"]["dollars"] >= suspended["cost"]["dollars"]

        cluster.kube_api.delete(cluster.kube_api.rljobs(name="priced"))
        wait_until(lambda: not cluster.clusters("priced"), PATIENCE, "the RayCluster gone")
