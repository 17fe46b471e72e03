"""The API's series: each named once (kuberl_api.metrics), and the count of jobs by namespace and
phase one metric with the operator's, exported by whoever runs the jobs. The local backend runs
them, so the API counts them; on the kubernetes backend the operator does, and the API's scrape
leaves the count out rather than double it."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from promql import exported_metric_names

from kuberl_api.backend import JobSummary
from kuberl_api.kubernetes_backend import KubernetesBackend
from kuberl_api.local import LocalBackend
from kuberl_api.metrics import (
    METRIC_JOB_EVALUATION_RETURN,
    METRIC_JOB_RETURN,
    METRIC_JOB_TIMESTEPS,
    METRIC_REQUEST_DURATION,
    METRIC_REQUESTS,
    ApiMetrics,
)
from kuberl_operator.constants import METRIC_JOBS
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.spec import RLJobStatus

JOBS = [
    JobSummary("team", "cartpole", "PPO", "Running", episode_return_mean=12.5, timesteps=100),
    JobSummary("team", "pendulum", "SAC", "Running"),
    JobSummary("lab", "lander", "DQN", "Succeeded", timesteps=4000),
]


def families(text: bytes | str) -> dict[str, Metric]:
    text = text.decode() if isinstance(text, bytes) else text
    return {family.name: family for family in text_string_to_metric_families(text)}


def counts(family: Metric) -> dict[tuple[str, str], float]:
    assert all(sample.labels.keys() == {"namespace", "phase"} for sample in family.samples)
    return {(s.labels["namespace"], s.labels["phase"]): s.value for s in family.samples}


def test_every_series_of_the_api_is_a_named_constant():
    histogram = {METRIC_REQUEST_DURATION + suffix for suffix in ("_bucket", "_count", "_sum")}
    assert exported_metric_names("api") == {
        METRIC_REQUESTS,
        *histogram,
        METRIC_JOB_RETURN,
        METRIC_JOB_EVALUATION_RETURN,
        METRIC_JOB_TIMESTEPS,
        METRIC_JOBS,
    }


def test_the_local_backend_counts_its_jobs_as_the_operator_counts_its_own():
    api = families(ApiMetrics(LocalBackend.counts_jobs).render(JOBS))[METRIC_JOBS]
    assert counts(api) == {("team", "Running"): 2, ("lab", "Succeeded"): 1}

    operator = OperatorMetrics()
    for job in JOBS:
        operator.observed(job.namespace, job.name, RLJobStatus(), RLJobStatus(phase=job.phase))
    operated = {family.name: family for family in operator.registry.collect()}[METRIC_JOBS]
    # one metric whichever component exports it: the same type, help, labels and counts
    assert (api.type, api.documentation) == (operated.type, operated.documentation)
    assert counts(operated) == counts(api)


def test_on_the_kubernetes_backend_the_operator_alone_counts_the_jobs():
    text = ApiMetrics(KubernetesBackend.counts_jobs).render(JOBS).decode()
    assert METRIC_JOBS not in text  # neither samples nor its HELP and TYPE
    shown = families(text)
    # the per-job series are the API's own, on either backend
    assert {s.labels["rljob"] for s in shown[METRIC_JOB_TIMESTEPS].samples} == {
        "cartpole",
        "pendulum",
        "lander",
    }
    assert shown[METRIC_JOB_RETURN].samples[0].value == 12.5
