"""The operator's Prometheus metrics (DESIGN.md §6): jobs by phase, reconcile duration,
preemptions and restarts, where each job's time and rollout workers go, and what each job cost
and may cost (the spot dashboard's figures). Labels stay bounded: namespace, rljob (the RLJob's
name), phase, capacity."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kuberl_contract.progress_row import RLJOB_LABEL
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
    METRIC_RECONCILE_DURATION,
    METRIC_RECONCILE_ERRORS,
    METRIC_RESTARTS,
    METRIC_ROLLOUT_WORKER_SECONDS,
    METRIC_ROLLOUT_WORKERS,
    ROLLOUT_GROUP,
)
from kuberl_operator.observe import RAY_GROUP_LABEL, disruption, worker_pods
from kuberl_operator.spec import Cost, Phase, RLJobStatus

# Values of the `capacity` label: which kind of node a rollout worker pod runs on.
SPOT = "spot"
ON_DEMAND = "on-demand"
CAPACITIES = (SPOT, ON_DEMAND)


def rollout_workers(pods: Iterable[dict[str, Any]], spot: bool) -> dict[str, int]:
    """Running rollout worker pods by capacity: the main rollout group is on spot nodes when the
    job asks for spot, every other group (the on-demand fallback) on on-demand nodes. Pending,
    preempted and terminating pods cost nothing yet or any more, so they are not counted."""
    counts = dict.fromkeys(CAPACITIES, 0)
    for pod in worker_pods(pods):
        meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
        if phase != "Running" or meta.get("deletionTimestamp") or disruption(pod):
            continue
        on_spot = spot and (meta.get("labels") or {}).get(RAY_GROUP_LABEL) == ROLLOUT_GROUP
        counts[SPOT if on_spot else ON_DEMAND] += 1
    return counts


@dataclass
class _Seen:
    """A job as the previous reconcile left it: the time until now is charged to this."""

    at: float
    phase: str
    workers: dict[str, int] = field(default_factory=dict)


class CostCollector:
    """Each job's status.cost, and its budget, as Prometheus series. They are read from the status,
    the one tally, rather than counted here: an operator restarted goes on from the same figures
    and never counts a poll twice."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], tuple[Cost | None, float | None]] = {}
        """(namespace, name) -> (status.cost, spec.budget.maxDollars)."""

    def collect(self) -> Iterator[Metric]:
        job = ("namespace", RLJOB_LABEL)
        dollars = CounterMetricFamily(
            METRIC_JOB_COST,
            "Dollars each RLJob has cost (status.cost), by capacity (spot or on-demand).",
            labels=(*job, "capacity"),
        )
        equivalent = CounterMetricFamily(
            METRIC_JOB_ON_DEMAND_EQUIVALENT,
            "What each RLJob's pod-hours would have cost on on-demand nodes of the same types.",
            labels=job,
        )
        gpu_hours = CounterMetricFamily(
            METRIC_JOB_GPU_HOURS, "GPU-hours of each RLJob's pods.", labels=job
        )
        worker_hours = CounterMetricFamily(
            METRIC_JOB_WORKER_HOURS, "Rollout worker pod-hours of each RLJob.", labels=job
        )
        at_target = GaugeMetricFamily(
            METRIC_JOB_COST_AT_TARGET,
            "Dollars each RLJob had cost when it first reached its target return.",
            labels=job,
        )
        budget = GaugeMetricFamily(
            METRIC_JOB_BUDGET, "Each RLJob's spec.budget.maxDollars.", labels=job
        )
        for key, (cost, max_dollars) in sorted(self.jobs.items()):
            if max_dollars is not None:
                budget.add_metric(key, max_dollars)
            if cost is None:
                continue
            dollars.add_metric((*key, SPOT), cost.spot_dollars)
            dollars.add_metric((*key, ON_DEMAND), cost.on_demand_dollars)
            equivalent.add_metric(key, cost.on_demand_equivalent_dollars)
            gpu_hours.add_metric(key, cost.gpu_hours)
            worker_hours.add_metric(key, cost.worker_hours)
            if cost.dollars_at_target is not None:
                at_target.add_metric(key, cost.dollars_at_target)
        yield from (dollars, equivalent, gpu_hours, worker_hours, at_target, budget)


class OperatorMetrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry()
        self._clock = clock
        r = self.registry
        self.jobs = Gauge(
            METRIC_JOBS,
            "RLJobs by namespace and phase.",
            ("namespace", "phase"),
            registry=r,
        )
        self.job_phase = Gauge(
            METRIC_JOB_PHASE,
            "1 for each RLJob's current phase (the series of its other phases are absent).",
            ("namespace", RLJOB_LABEL, "phase"),
            registry=r,
        )
        self.phase_seconds = Counter(
            METRIC_JOB_PHASE_SECONDS,
            "Seconds RLJobs spent in each phase, as the operator observed them (until finished).",
            ("namespace", RLJOB_LABEL, "phase"),
            registry=r,
        )
        self.workers = Gauge(
            METRIC_ROLLOUT_WORKERS,
            "Running rollout worker pods of each RLJob, by capacity (spot or on-demand).",
            ("namespace", RLJOB_LABEL, "capacity"),
            registry=r,
        )
        self.worker_seconds = Counter(
            METRIC_ROLLOUT_WORKER_SECONDS,
            "Seconds of running rollout worker pods of each RLJob, by capacity (worker-time).",
            ("namespace", RLJOB_LABEL, "capacity"),
            registry=r,
        )
        self.reconcile_duration = Histogram(
            METRIC_RECONCILE_DURATION,
            "Time one reconcile of one RLJob takes (observe, compute, write, act).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.reconcile_errors = Counter(
            METRIC_RECONCILE_ERRORS,
            "Reconciles that failed (and are retried).",
            ("namespace",),
            registry=r,
        )
        self.preemptions = Counter(
            METRIC_PREEMPTIONS,
            "Preempted pods (rollout workers and heads) of RLJobs.",
            ("namespace", RLJOB_LABEL),
            registry=r,
        )
        self.restarts = Counter(
            METRIC_RESTARTS,
            "Restarts of RLJobs after failures.",
            ("namespace", RLJOB_LABEL),
            registry=r,
        )
        self.cost = CostCollector()
        r.register(self.cost)
        self._seen: dict[tuple[str, str], _Seen] = {}

    def serve(self, port: int, address: str = "0.0.0.0") -> Callable[[], None]:
        """Serve /metrics; returns the function that stops serving."""
        server, thread = start_http_server(port, addr=address, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop

    def observed(
        self,
        namespace: str,
        name: str,
        before: RLJobStatus,
        after: RLJobStatus,
        workers: Mapping[str, int] | None = None,
        budget: float | None = None,
    ) -> None:
        """Count what one status write changed; `workers` are the job's running rollout workers
        by capacity (`rollout_workers`), none when it has no Ray cluster; `budget` is its
        spec.budget.maxDollars, None without one."""
        self.cost.jobs[namespace, name] = (after.cost, budget)
        job = {"namespace": namespace, RLJOB_LABEL: name}
        previous = self._seen.get((namespace, name))
        if previous is None:
            # Every series of a job exists from its first reconcile, so increase() and rate()
            # see its first preemption, and "none yet" reads 0 rather than no data.
            for counter in (self.preemptions, self.restarts):
                counter.labels(**job)
            for phase in Phase:
                self.phase_seconds.labels(**job, phase=phase.value)
            for capacity in CAPACITIES:
                self.worker_seconds.labels(**job, capacity=capacity)
        if after.preemptions > before.preemptions:
            self.preemptions.labels(**job).inc(after.preemptions - before.preemptions)
        if after.restarts > before.restarts:
            self.restarts.labels(**job).inc(after.restarts - before.restarts)
        phase = (after.phase or Phase.PENDING).value
        self._charge(
            namespace, name, previous, phase, dict(workers or dict.fromkeys(CAPACITIES, 0))
        )
        self._move_phase(namespace, name, previous.phase if previous else None, phase)

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: it leaves the phase counts, its gauges and its cost's series (its other
        counters stay, as counters do)."""
        self.cost.jobs.pop((namespace, name), None)
        previous = self._seen.pop((namespace, name), None)
        if previous is not None:
            self._move_phase(namespace, name, previous.phase, None)
            for capacity in CAPACITIES:
                self.workers.remove(namespace, name, capacity)

    def _charge(
        self,
        namespace: str,
        name: str,
        previous: _Seen | None,
        phase: str,
        workers: dict[str, int],
    ) -> None:
        """The time since the job's previous reconcile goes to the phase and the workers it had
        then (a job is reconciled every few seconds while active, so the error is that long)."""
        now = self._clock()
        if previous is not None:
            elapsed = max(now - previous.at, 0.0)
            self.phase_seconds.labels(namespace, name, previous.phase).inc(elapsed)
            for capacity, count in previous.workers.items():
                self.worker_seconds.labels(namespace, name, capacity).inc(count * elapsed)
        self._seen[namespace, name] = _Seen(now, phase, workers)
        for capacity, count in workers.items():
            self.workers.labels(namespace, name, capacity).set(count)

    def _move_phase(self, namespace: str, name: str, old: str | None, new: str | None) -> None:
        """The job leaves phase `old` and enters `new` (None: none, it is new or gone)."""
        if old == new:
            return
        if old is not None:
            self.jobs.labels(namespace=namespace, phase=old).dec()
            self.job_phase.remove(namespace, name, old)
        if new is not None:
            self.jobs.labels(namespace=namespace, phase=new).inc()
            self.job_phase.labels(namespace, name, new).set(1)
