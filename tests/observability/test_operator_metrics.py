"""The operator's per-job series the dashboards and alerts read: phase, time per phase, rollout
workers by capacity and worker-time, preemptions and restarts from the first reconcile on, and
each job's cost and budget as its status says them."""

from __future__ import annotations

from kuberl_operator.constants import (
    METRIC_JOB_BUDGET,
    METRIC_JOB_COST,
    METRIC_JOB_COST_AT_TARGET,
    METRIC_JOB_GPU_HOURS,
    METRIC_JOB_ON_DEMAND_EQUIVALENT,
    METRIC_JOB_PHASE,
    METRIC_JOB_PHASE_SECONDS,
    METRIC_JOB_WORKER_HOURS,
    METRIC_JOBS,
    METRIC_PREEMPTIONS,
    METRIC_RESTARTS,
    METRIC_ROLLOUT_WORKER_SECONDS,
    METRIC_ROLLOUT_WORKERS,
)
from kuberl_operator.metrics import ON_DEMAND, SPOT, OperatorMetrics, rollout_workers
from kuberl_operator.spec import Cost, Phase, RLJobStatus


def worker(name: str, group: str, phase: str = "Running") -> dict:
    labels = {"ray.io/node-type": "worker", "ray.io/group": group}
    return {"metadata": {"name": name, "uid": name, "labels": labels}, "status": {"phase": phase}}


HEAD = {"metadata": {"name": "head", "labels": {"ray.io/node-type": "head"}}, "status": {}}


def test_running_rollout_workers_are_counted_by_capacity():
    preempted = worker("w4", "rollout")
    preempted["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    leaving = worker("w5", "rollout")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods = [
        HEAD,
        worker("w1", "rollout"),
        worker("w2", "rollout"),
        worker("w3", "rollout", phase="Pending"),  # no node yet: costs nothing
        preempted,
        leaving,
        worker("w6", "rollout-on-demand"),
    ]
    assert rollout_workers(pods, spot=True) == {SPOT: 2, ON_DEMAND: 1}
    assert rollout_workers(pods, spot=False) == {SPOT: 0, ON_DEMAND: 3}
    assert rollout_workers([], spot=True) == {SPOT: 0, ON_DEMAND: 0}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_time_goes_to_the_phase_and_the_workers_a_job_had():
    clock = Clock()
    metrics = OperatorMetrics(clock=clock)
    job = {"namespace": "team", "rljob": "cartpole"}
    pending, running = RLJobStatus(), RLJobStatus(phase=Phase.RUNNING)
    preempted = RLJobStatus(phase=Phase.PREEMPTED, preemptions=1)

    metrics.observed("team", "cartpole", pending, running, {SPOT: 2, ON_DEMAND: 0})
    # from the first reconcile on, every series reads 0 rather than being absent
    for phase in Phase:
        assert sample(metrics, METRIC_JOB_PHASE_SECONDS, **job, phase=phase) == 0
    assert sample(metrics, METRIC_PREEMPTIONS, **job) == 0
    assert sample(metrics, METRIC_RESTARTS, **job) == 0
    assert sample(metrics, METRIC_JOB_PHASE, **job, phase="Running") == 1

    clock.now += 10
    metrics.observed("team", "cartpole", running, preempted, {SPOT: 1, ON_DEMAND: 1})
    clock.now += 4
    metrics.observed("team", "cartpole", preempted, running, {SPOT: 2, ON_DEMAND: 0})

    seconds, worker_seconds = METRIC_JOB_PHASE_SECONDS, METRIC_ROLLOUT_WORKER_SECONDS
    assert sample(metrics, seconds, **job, phase="Running") == 10
    assert sample(metrics, seconds, **job, phase="Preempted") == 4
    assert sample(metrics, worker_seconds, **job, capacity=SPOT) == 2 * 10 + 1 * 4
    assert sample(metrics, worker_seconds, **job, capacity=ON_DEMAND) == 1 * 4
    assert sample(metrics, METRIC_ROLLOUT_WORKERS, **job, capacity=SPOT) == 2
    assert sample(metrics, METRIC_PREEMPTIONS, **job) == 1
    # one phase series per job: the old phase's is gone
    assert sample(metrics, METRIC_JOB_PHASE, **job, phase="Preempted") is None
    assert sample(metrics, METRIC_JOBS, namespace="team", phase="Running") == 1

    metrics.forget("team", "cartpole")
    assert sample(metrics, METRIC_JOB_PHASE, **job, phase="Running") is None
    assert sample(metrics, METRIC_ROLLOUT_WORKERS, **job, capacity=SPOT) is None
    assert sample(metrics, METRIC_JOBS, namespace="team", phase="Running") == 0
    assert sample(metrics, worker_seconds, **job, capacity=SPOT) == 24  # counters stay


def test_a_jobs_cost_and_budget_are_its_status_and_spec_and_leave_with_it():
    metrics = OperatorMetrics()
    job = {"namespace": "team-a", "rljob": "pricey"}
    metrics.observed("team-a", "pricey", RLJobStatus(), RLJobStatus(), budget=50.0)
    assert sample(metrics, METRIC_JOB_COST, **job, capacity=SPOT) is None  # nothing on a node yet
    assert sample(metrics, METRIC_JOB_BUDGET, **job) == 50.0

    cost = Cost(
        dollars=3.0,
        spot_dollars=1.0,
        on_demand_dollars=2.0,
        on_demand_equivalent_dollars=4.5,
        gpu_hours=1.5,
        worker_hours=6.0,
        dollars_at_target=2.5,
    )
    # Read from the status, not counted here: a restarted operator shows the same figures.
    restarted = OperatorMetrics()
    restarted.observed("team-a", "pricey", RLJobStatus(), RLJobStatus(cost=cost))
    assert sample(restarted, METRIC_JOB_COST, **job, capacity=SPOT) == 1.0
    assert sample(restarted, METRIC_JOB_COST, **job, capacity=ON_DEMAND) == 2.0
    assert sample(restarted, METRIC_JOB_ON_DEMAND_EQUIVALENT, **job) == 4.5
    assert sample(restarted, METRIC_JOB_GPU_HOURS, **job) == 1.5
    assert sample(restarted, METRIC_JOB_WORKER_HOURS, **job) == 6.0
    assert sample(restarted, METRIC_JOB_COST_AT_TARGET, **job) == 2.5
    assert sample(restarted, METRIC_JOB_BUDGET, **job) is None  # no budget

    restarted.forget("team-a", "pricey")
    assert sample(restarted, METRIC_JOB_COST, **job, capacity=SPOT) is None
