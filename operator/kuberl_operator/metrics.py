"""The operator's Prometheus metrics (DESIGN.md §6): jobs by phase, reconcile duration,
preemptions and restarts. Labels stay bounded: namespace, job, phase."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kuberl_operator.spec import Phase, RLJobStatus


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge(
            "kuberl_operator_jobs",
            "RLJobs by namespace and phase.",
            ("namespace", "phase"),
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "kuberl_operator_reconcile_duration_seconds",
            "Time one reconcile of one RLJob takes (observe, compute, write, act).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.reconcile_errors = Counter(
            "kuberl_operator_reconcile_errors_total",
            "Reconciles that failed (and are retried).",
            ("namespace",),
            registry=r,
        )
        self.preemptions = Counter(
            "kuberl_operator_preemptions_total",
            "Preempted pods (rollout workers and heads) of RLJobs.",
            ("namespace", "job"),
            registry=r,
        )
        self.restarts = Counter(
            "kuberl_operator_restarts_total",
            "Restarts of RLJobs after failures.",
            ("namespace", "job"),
            registry=r,
        )
        self._phases: dict[tuple[str, str], str] = {}

    def serve(self, port: int, address: str = "0.0.0.0") -> Callable[[], None]:
        """Serve /metrics; returns the function that stops serving."""
        server, thread = start_http_server(port, addr=address, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop

    def observed(self, namespace: str, name: str, before: RLJobStatus, after: RLJobStatus) -> None:
        """Count what one status write changed."""
        job = {"namespace": namespace, "job": name}
        if after.preemptions > before.preemptions:
            self.preemptions.labels(**job).inc(after.preemptions - before.preemptions)
        if after.restarts > before.restarts:
            self.restarts.labels(**job).inc(after.restarts - before.restarts)
        self._set_phase(namespace, name, (after.phase or Phase.PENDING).value)

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: it leaves the phase counts (its counters stay, as counters do)."""
        self._set_phase(namespace, name, None)

    def _set_phase(self, namespace: str, name: str, phase: str | None) -> None:
        old = self._phases.get((namespace, name))
        if old == phase:
            return
        if old is not None:
            self.jobs.labels(namespace=namespace, phase=old).dec()
        if phase is None:
            del self._phases[(namespace, name)]
        else:
            self._phases[(namespace, name)] = phase
            self.jobs.labels(namespace=namespace, phase=phase).inc()
