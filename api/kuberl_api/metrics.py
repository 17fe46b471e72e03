"""Prometheus metrics of the API: requests and their latency, and the jobs it serves.

Names follow the project's conventions (`kuberl_` prefix, `_total` and `_seconds` suffixes) under
`kuberl_api_` so they never collide with the trainer's or the operator's series; each is a constant
below, which the dashboards import. The one exception is the count of jobs by namespace and phase,
`kuberl_jobs` (kuberl_operator.constants.METRIC_JOBS): one fact, one metric, exported by whoever
runs the jobs. The local backend runs them, so the API counts them; on the kubernetes backend the
operator runs and counts them, and the API does not export the count a second time. Labels are
bounded: requests by method, route template (never the raw path) and status code; jobs by
namespace, rljob (the RLJob's name: `job` is Prometheus's scrape job), algorithm and phase. Job
gauges are rebuilt from the backend at each scrape, so a deleted job's series disappear with it.

Request series are public; job series name jobs, so each scrape shows only the namespaces whose
rljobs the caller may list (`visible_jobs`): on the kubernetes backend that is what RBAC gives the
scraper's token, asked anew for every scrape, never cached. A caller without a valid token costs
one TokenReview and no listing; the listing itself (the API's own view) is shared by the scrapes of
a few seconds (listing_cache.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kuberl_api.backend import Action, ApiError, Authorizer, Backend, Identity, JobSummary
from kuberl_contract.progress_row import RLJOB_LABEL
from kuberl_operator.constants import METRIC_JOBS

METRIC_REQUESTS = "kuberl_api_requests_total"
"""Counter: HTTP requests answered, by method, route template and status code."""
METRIC_REQUEST_DURATION = "kuberl_api_request_duration_seconds"
"""Histogram: time to answer an HTTP request, by method and route template."""
METRIC_JOB_RETURN = "kuberl_api_job_episode_return_mean"
"""Gauge: latest mean episode return of each job."""
METRIC_JOB_EVALUATION_RETURN = "kuberl_api_job_evaluation_return_mean"
"""Gauge: latest greedy evaluation's mean return of each job that evaluates."""
METRIC_JOB_TIMESTEPS = "kuberl_api_job_timesteps"
"""Gauge: env steps each job has sampled."""
JOB_LABELS = ("namespace", RLJOB_LABEL, "algorithm", "phase")
# Latency buckets for an API answering from memory and SQLite: sub-millisecond to seconds.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ApiMetrics:
    def __init__(self, counts_jobs: bool) -> None:
        """`counts_jobs`: export the count of jobs (the backend runs them; Backend.counts_jobs)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            METRIC_REQUESTS,
            "HTTP requests answered, by method, route template and status code.",
            ("method", "route", "code"),
            registry=r,
        )
        self.latency = Histogram(
            METRIC_REQUEST_DURATION,
            "Time to answer an HTTP request, by method and route template.",
            ("method", "route"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.job_return = Gauge(
            METRIC_JOB_RETURN, "Latest mean episode return of each job.", JOB_LABELS, registry=r
        )
        self.job_evaluation_return = Gauge(
            METRIC_JOB_EVALUATION_RETURN,
            "Latest greedy evaluation's mean return of each job that evaluates.",
            JOB_LABELS,
            registry=r,
        )
        self.job_timesteps = Gauge(
            METRIC_JOB_TIMESTEPS, "Env steps each job has sampled.", JOB_LABELS, registry=r
        )
        # Only where the API runs the jobs itself: on a cluster the operator counts them under
        # the same name (Backend.counts_jobs).
        self.jobs = Gauge(
            METRIC_JOBS,
            "RLJobs by namespace and phase.",
            ("namespace", "phase"),
            registry=r if counts_jobs else None,
        )
        self.counts_jobs = counts_jobs

    def observe_request(self, method: str, route: str, code: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        self.requests.labels(method, route, str(code)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self, jobs: list[JobSummary]) -> bytes:
        """The exposition text, with job series set from `jobs`."""
        for gauge in (self.jobs, self.job_return, self.job_evaluation_return, self.job_timesteps):
            gauge.clear()
        counts: dict[tuple[str, str], int] = {}
        for job in jobs:
            counts[job.namespace, job.phase] = counts.get((job.namespace, job.phase), 0) + 1
            labels = (job.namespace, job.name, job.algorithm, job.phase)
            self.job_timesteps.labels(*labels).set(job.timesteps)
            if job.episode_return_mean is not None:
                self.job_return.labels(*labels).set(job.episode_return_mean)
            if job.evaluation_return_mean is not None:
                self.job_evaluation_return.labels(*labels).set(job.evaluation_return_mean)
        if self.counts_jobs:
            for (namespace, phase), count in counts.items():
                self.jobs.labels(namespace, phase).set(count)
        return generate_latest(self.registry)


async def visible_jobs(
    backend: Backend, authorizer: Authorizer, token: str | None
) -> list[JobSummary]:
    """The jobs of the namespaces whose rljobs `token` may list, asking as little as that takes.

    The token is authenticated once, before anything is listed: without a token, or with one
    nobody vouches for, nothing is listed and the scrape shows the request series only. Then
    one review at the cluster scope, which a reader of every namespace (Prometheus, as a rule)
    passes; only when it is refused, one per namespace of the listing. Any refusal (401, 403, or
    Kubernetes away) shows less rather than failing the scrape."""
    try:
        identity = await authorizer.authenticate(token)
    except ApiError:
        return []
    if await _may_list(authorizer, identity, None):
        return await backend.summaries()
    jobs = await backend.summaries()
    namespaces = sorted({job.namespace for job in jobs})
    allowed = await asyncio.gather(*(_may_list(authorizer, identity, ns) for ns in namespaces))
    shown = {namespace for namespace, ok in zip(namespaces, allowed, strict=True) if ok}
    return [job for job in jobs if job.namespace in shown]


async def _may_list(authorizer: Authorizer, identity: Identity, namespace: str | None) -> bool:
    try:
        await authorizer.check(identity, Action("list", namespace))
    except ApiError:
        return False
    return True


class RequestMetricsMiddleware:
    """Counts and times every request (plain ASGI: no per-request task or body buffering)."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_recording_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(
                scope["method"], template, status["code"], time.perf_counter() - started
            )
