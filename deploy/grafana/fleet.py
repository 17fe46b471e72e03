"""kuberl-fleet.json: every job at a glance (phases, preemptions, restarts, samples/s, GPU use, the
operator and the API), across the namespaces the `namespace` variable selects."""

from __future__ import annotations

from typing import Any

from panels import (
    LOST_PHASES,
    bars,
    dashboard,
    panel,
    query_variable,
    right_axis,
    stat,
    target,
    timeseries,
)

from kuberl_api.metrics import METRIC_REQUEST_DURATION, METRIC_REQUESTS
from kuberl_contract.progress_row import (
    METRIC_CHECKPOINT_FAILURES,
    METRIC_EPISODE_RETURN_MEAN,
    METRIC_SAMPLES_PER_SECOND,
)
from kuberl_operator.constants import (
    METRIC_JOB_PHASE,
    METRIC_JOBS,
    METRIC_PREEMPTIONS,
    METRIC_RECONCILE_DURATION,
    METRIC_RECONCILE_ERRORS,
    METRIC_RESTARTS,
)
from kuberl_operator.spec import Phase


def fleet() -> dict[str, Any]:
    ns = 'namespace=~"$namespace"'
    # Counts of jobs read 0, not "No data", when there are none in a phase.
    panels = [
        stat(
            "Jobs running",
            f'sum({METRIC_JOBS}{{{ns}, phase="{Phase.RUNNING}"}}) or vector(0)',
            "short",
            "RLJobs in phase Running.",
        ),
        stat(
            "Jobs preempted or resuming",
            f'sum({METRIC_JOBS}{{{ns}, phase=~"{LOST_PHASES}"}}) or vector(0)',
            "short",
            "RLJobs that lost pods to preemption or restart from a checkpoint right now.",
        ),
        stat(
            "Jobs failed",
            f'sum({METRIC_JOBS}{{{ns}, phase="{Phase.FAILED}"}}) or vector(0)',
            "short",
            "RLJobs in phase Failed (kept until deleted or their TTL passes).",
        ),
        stat(
            "Preemptions in range",
            f"sum(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__range]))",
            "short",
            "Pods of RLJobs preempted in the dashboard's time range.",
        ),
        stat(
            "Samples per second",
            f"sum({METRIC_SAMPLES_PER_SECOND}{{{ns}}})",
            "suffix: steps/s",
            "Env steps sampled per second, summed over every training job.",
        ),
        stat(
            "kuberl services up",
            'sum(up{job=~"kuberl-operator|kuberl-api"})',
            "short",
            "Operator and API targets Prometheus scrapes successfully.",
        ),
        timeseries(
            "Jobs by phase",
            [target(f"sum by (phase) ({METRIC_JOBS}{{{ns}}})", "{{phase}}")],
            "short",
            "RLJobs in each phase, as whoever runs them counts them: the operator on a cluster, "
            "the API's local backend on one machine.",
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        panel(
            "table",
            "Jobs",
            [target(f"{METRIC_JOB_PHASE}{{{ns}}} == 1", instant=True)],
            "short",
            "Every RLJob and its current phase.",
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "Value": True, "__name__": True},
                        "indexByName": {"namespace": 0, "rljob": 1, "phase": 2},
                    },
                }
            ],
        ),
        bars(
            "Preemptions",
            [
                target(
                    "sum by (namespace, rljob) "
                    f"(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{rljob}}",
                )
            ],
            "short",
            "Pods (rollout workers and heads) of each job preempted per interval.",
            width=8,
        ),
        bars(
            "Restarts",
            [
                target(
                    "sum by (namespace, rljob) "
                    f"(increase({METRIC_RESTARTS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{rljob}}",
                )
            ],
            "short",
            "Restarts of each job after a failure (a lost head, a failed driver) per interval.",
            width=8,
        ),
        bars(
            "Checkpoint failures",
            [
                target(
                    "sum by (namespace, rljob) "
                    f"(increase({METRIC_CHECKPOINT_FAILURES}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{rljob}}",
                )
            ],
            "short",
            "Failed checkpoint saves of each job per interval (store full, unreachable, access "
            "denied): training goes on, but a preemption would lose the work since its last good "
            "checkpoint.",
            width=8,
        ),
        timeseries(
            "Samples per second by job",
            [
                target(
                    f"sum by (namespace, rljob) ({METRIC_SAMPLES_PER_SECOND}{{{ns}}})",
                    "{{namespace}}/{{rljob}}",
                )
            ],
            "suffix: steps/s",
            "Env steps each job's driver sampled per second in its last iteration.",
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        timeseries(
            "Mean episode return by job",
            [target(f"{METRIC_EPISODE_RETURN_MEAN}{{{ns}}}", "{{namespace}}/{{rljob}}")],
            "short",
            "Mean return of each job's recent episodes.",
        ),
        timeseries(
            "GPU utilisation",
            [
                target(
                    f"avg by (namespace, pod, gpu) (DCGM_FI_DEV_GPU_UTIL{{{ns}}})",
                    "{{namespace}}/{{pod}} GPU {{gpu}}",
                )
            ],
            "percent",
            "Utilisation of each GPU by pod, from NVIDIA's DCGM exporter (a cluster with GPU "
            "nodes and dcgm-exporter installed; empty otherwise).",
            custom={"fillOpacity": 10},
        ),
        timeseries(
            "Operator reconcile time",
            [
                target(
                    "histogram_quantile(0.95, sum by (le) "
                    f"(rate({METRIC_RECONCILE_DURATION}_bucket[$__rate_interval])))",
                    "p95",
                ),
                target(
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate({METRIC_RECONCILE_DURATION}_bucket[$__rate_interval])))",
                    "median",
                ),
                target(
                    f"sum(rate({METRIC_RECONCILE_ERRORS}{{{ns}}}[$__rate_interval]))",
                    "errors/s",
                ),
            ],
            "s",
            "How long one reconcile of one RLJob takes; failed reconciles (retried) per second "
            "on the right.",
            overrides=[right_axis("errors/s", "reqps")],
        ),
        timeseries(
            "API requests by status code",
            [target(f"sum by (code) (rate({METRIC_REQUESTS}[$__rate_interval]))", "{{code}}")],
            "reqps",
            "Requests the REST API answered per second, by HTTP status code.",
        ),
        timeseries(
            "API latency (p95) by route",
            [
                target(
                    "histogram_quantile(0.95, sum by (le, route) "
                    f"(rate({METRIC_REQUEST_DURATION}_bucket[$__rate_interval])))",
                    "{{route}}",
                )
            ],
            "s",
            "95th percentile of the time the REST API takes to answer, per route template.",
        ),
    ]
    variables = [query_variable("namespace", f"label_values({METRIC_JOBS}, namespace)", True)]
    return dashboard(
        "kuberl-fleet",
        "kuberl / Fleet",
        "Every RLJob at a glance: phases, preemptions, restarts, throughput and GPU use.",
        variables,
        panels,
    )
