"""Writes kuberl's Grafana dashboards: `python deploy/grafana/generate.py` (a test fails when the
committed JSON differs from what this writes).

- kuberl-fleet.json: every job at a glance (phases, preemptions, restarts, samples/s, GPU use, the
  operator and the API);
- kuberl-training.json: one job's training, chosen with the `namespace` and `job` variables;
- kuberl-spot.json: spot and cost (preemptions, time lost to them, worker-hours by capacity).

Plain dicts. The metric names come from the code that exports them (kuberl_trainer.progress_row,
kuberl_operator.constants, kuberl_api.metrics), so a renamed metric changes its panels with it. The
dashboards use a `${datasource}` variable, so they import into any Grafana with a Prometheus data
source (the Helm chart ships them as ConfigMaps for Grafana's dashboard sidecar). Series carry the
RLJob's name in `job` (scraped with honor_labels: true, see deploy/prometheus/kuberl-alerts.yaml);
panels of series only a cluster exports say so in their description (kube-state-metrics'
kube_pod_*, NVIDIA DCGM exporter's DCGM_FI_*).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kuberl_api.metrics import METRIC_REQUEST_DURATION, METRIC_REQUESTS
from kuberl_operator.constants import (
    METRIC_JOB_PHASE,
    METRIC_JOB_PHASE_SECONDS,
    METRIC_JOBS,
    METRIC_PREEMPTIONS,
    METRIC_RECONCILE_DURATION,
    METRIC_RECONCILE_ERRORS,
    METRIC_RESTARTS,
    METRIC_ROLLOUT_WORKER_SECONDS,
    METRIC_ROLLOUT_WORKERS,
)
from kuberl_trainer.progress_row import (
    METRIC_CHECKPOINT_AGE,
    METRIC_CHECKPOINT_FAILURES,
    METRIC_ENV_STEPS_TRAINED,
    METRIC_EPISODE_LENGTH_MEAN,
    METRIC_EPISODE_RETURN_MEAN,
    METRIC_EVALUATION_RETURN_MEAN,
    METRIC_ITERATION,
    METRIC_LEARNER_QUEUE_DEPTH,
    METRIC_LEARNER_SECONDS,
    METRIC_LEARNER_UTILISATION,
    METRIC_POLICY_ENTROPY,
    METRIC_POLICY_KL,
    METRIC_POLICY_LAG,
    METRIC_POLICY_LOSS,
    METRIC_RESOURCE_WAIT,
    METRIC_SAMPLE_SECONDS,
    METRIC_SAMPLES_PER_SECOND,
    METRIC_STRAGGLERS_DROPPED,
    METRIC_TD_LOSS,
    METRIC_TIMESTEPS,
    METRIC_VALUE_LOSS,
    METRIC_WEIGHT_SYNC_SECONDS,
    METRIC_WORKER_DOWNTIME,
    METRIC_WORKER_RESTARTS,
    METRIC_WORKERS_READY,
)

HERE = Path(__file__).resolve().parent
# Grafana 11/12 dashboards; older ones migrate a dashboard of a newer schema as far as they can.
SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["kuberl"]
# The operator's phases whose time goes to preemption: lost rollout workers, and the restart from
# the newest checkpoint.
LOST_PHASES = "Preempted|Resuming"
ACTIVE_PHASES = "Provisioning|Running|Preempted|Resuming"

Panel = dict[str, Any]

# --- Building blocks ------------------------------------------------------------------------------


def target(expr: str, legend: str = "", instant: bool = False) -> dict[str, Any]:
    query: dict[str, Any] = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
    if instant:
        query |= {"instant": True, "range": False, "format": "table"}
    return query


def panel(
    kind: str,
    title: str,
    targets: list[dict[str, Any]],
    unit: str,
    description: str,
    width: int = 12,
    height: int = 8,
    options: dict[str, Any] | None = None,
    custom: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Panel:
    """One panel; `layout` gives it an id and a place."""
    defaults: dict[str, Any] = {"unit": unit}
    if custom:
        defaults["custom"] = custom
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"w": width, "h": height},
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
        "targets": [
            {**query, "refId": chr(ord("A") + index)} for index, query in enumerate(targets)
        ],
        **extra,
    }


def timeseries(title: str, targets: list, unit: str, description: str, **kwargs: Any) -> Panel:
    kwargs.setdefault("options", {"legend": {"displayMode": "list", "placement": "bottom"}})
    return panel("timeseries", title, targets, unit, description, **kwargs)


def bars(title: str, targets: list, unit: str, description: str, **kwargs: Any) -> Panel:
    """Counts per interval (preemptions, restarts), stacked."""
    custom = {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}}
    return timeseries(title, targets, unit, description, custom=custom, **kwargs)


def stat(title: str, expr: str, unit: str, description: str, **kwargs: Any) -> Panel:
    options = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    kwargs.setdefault("width", 4)
    kwargs.setdefault("height", 4)
    return panel("stat", title, [target(expr)], unit, description, options=options, **kwargs)


def right_axis(name: str, unit: str) -> dict[str, Any]:
    """An override putting the series named `name` on a right-hand axis with its own unit."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def layout(panels: list[Panel]) -> list[Panel]:
    """Ids in order, and places left to right in Grafana's 24 columns, wrapping to a new row."""
    x = y = row_height = 0
    for number, item in enumerate(panels, start=1):
        grid = item["gridPos"]
        if x + grid["w"] > 24:
            x, y, row_height = 0, y + row_height, 0
        grid.update(x=x, y=y)
        item["id"] = number
        x += grid["w"]
        row_height = max(row_height, grid["h"])
    return panels


def datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
    }


def query_variable(name: str, definition: str, multi: bool = False) -> dict[str, Any]:
    """A variable filled from `label_values(...)`; a multi-valued one selects everything by
    default (used as `label=~"$name"`)."""
    variable: dict[str, Any] = {
        "name": name,
        "label": name.capitalize(),
        "type": "query",
        "datasource": DATASOURCE,
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time-range change: jobs come and go
        "sort": 1,
        "hide": 0,
        "multi": multi,
        "includeAll": multi,
        "current": {},
    }
    if multi:
        variable |= {"allValue": ".*", "current": {"text": "All", "value": "$__all"}}
    return variable


def dashboard(uid: str, title: str, description: str, variables: list, panels: list) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,  # a shared crosshair: one moment across every panel
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "links": [
            {
                "title": "kuberl",
                "type": "dashboards",
                "tags": TAGS,
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(panels),
    }


# --- The dashboards -------------------------------------------------------------------------------


def fleet() -> dict[str, Any]:
    ns = 'namespace=~"$namespace"'
    # Counts of jobs read 0, not "No data", when there are none in a phase.
    panels = [
        stat(
            "Jobs running",
            f'sum({METRIC_JOBS}{{{ns}, phase="Running"}}) or vector(0)',
            "short",
            "RLJobs the operator sees in phase Running.",
        ),
        stat(
            "Jobs preempted or resuming",
            f'sum({METRIC_JOBS}{{{ns}, phase=~"{LOST_PHASES}"}}) or vector(0)',
            "short",
            "RLJobs that lost pods to preemption or restart from a checkpoint right now.",
        ),
        stat(
            "Jobs failed",
            f'sum({METRIC_JOBS}{{{ns}, phase="Failed"}}) or vector(0)',
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
            "RLJobs in each phase, as the operator counts them.",
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
                        "indexByName": {"namespace": 0, "job": 1, "phase": 2},
                    },
                }
            ],
        ),
        bars(
            "Preemptions",
            [
                target(
                    "sum by (namespace, job) "
                    f"(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{job}}",
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
                    "sum by (namespace, job) "
                    f"(increase({METRIC_RESTARTS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{job}}",
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
                    "sum by (namespace, job) "
                    f"(increase({METRIC_CHECKPOINT_FAILURES}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{job}}",
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
                    f"sum by (namespace, job) ({METRIC_SAMPLES_PER_SECOND}{{{ns}}})",
                    "{{namespace}}/{{job}}",
                )
            ],
            "suffix: steps/s",
            "Env steps each job's driver sampled per second in its last iteration.",
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        timeseries(
            "Mean episode return by job",
            [target(f"{METRIC_EPISODE_RETURN_MEAN}{{{ns}}}", "{{namespace}}/{{job}}")],
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


def training() -> dict[str, Any]:
    sel = 'namespace="$namespace", job="$job"'
    panels = [
        stat("Iteration", f"max({METRIC_ITERATION}{{{sel}}})", "short", "Iterations done."),
        stat(
            "Timesteps",
            f"max({METRIC_TIMESTEPS}{{{sel}}})",
            "short",
            "Env steps sampled in all (across resumed runs).",
        ),
        stat(
            "Mean return",
            f"max({METRIC_EPISODE_RETURN_MEAN}{{{sel}}})",
            "short",
            "Mean return of the recent episodes.",
        ),
        stat(
            "Evaluation return",
            f"max({METRIC_EVALUATION_RETURN_MEAN}{{{sel}}})",
            "short",
            "Mean return of the last greedy evaluation (algorithms that evaluate).",
        ),
        stat(
            "Samples per second",
            f"max({METRIC_SAMPLES_PER_SECOND}{{{sel}}})",
            "suffix: steps/s",
            "Env steps sampled per second in the last iteration.",
        ),
        stat(
            "Checkpoint age",
            f"max({METRIC_CHECKPOINT_AGE}{{{sel}}})",
            "s",
            "Time since the newest checkpoint: what a preemption now would cost.",
        ),
        timeseries(
            "Episode return and timesteps",
            [
                target(f"{METRIC_EPISODE_RETURN_MEAN}{{{sel}}}", "mean return"),
                target(f"{METRIC_EVALUATION_RETURN_MEAN}{{{sel}}}", "evaluation return"),
                target(f"{METRIC_TIMESTEPS}{{{sel}}}", "timesteps"),
            ],
            "short",
            "Returns over time, with the timesteps reached (right axis) to read them against.",
            width=14,
            height=9,
            overrides=[right_axis("timesteps", "short")],
        ),
        panel(
            "xychart",
            "Return against timesteps",
            [
                target(f"max({METRIC_TIMESTEPS}{{{sel}}})", "timesteps"),
                target(f"max({METRIC_EPISODE_RETURN_MEAN}{{{sel}}})", "mean return"),
                target(f"max({METRIC_EVALUATION_RETURN_MEAN}{{{sel}}})", "evaluation return"),
            ],
            "short",
            "The learning curve as RL papers draw it: return (y) against env steps (x).",
            width=10,
            height=9,
            transformations=[
                {"id": "joinByField", "options": {"byField": "Time", "mode": "outer"}}
            ],
            options={
                "mapping": "manual",
                "series": [
                    {
                        "frame": {"matcher": {"id": "byIndex", "options": 0}},
                        "x": {"matcher": {"id": "byName", "options": "timesteps"}},
                        "y": {"matcher": {"id": "byName", "options": name}},
                    }
                    for name in ("mean return", "evaluation return")
                ],
                "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
            },
            custom={"show": "points+lines", "pointSize": {"fixed": 4}},
        ),
        timeseries(
            "Losses",
            [
                target(f"{METRIC_POLICY_LOSS}{{{sel}}}", "policy loss"),
                target(f"{METRIC_VALUE_LOSS}{{{sel}}}", "value loss"),
                target(f"{METRIC_TD_LOSS}{{{sel}}}", "TD loss"),
            ],
            "short",
            "The learner's losses in the last iteration (those the algorithm has).",
            width=8,
        ),
        timeseries(
            "Policy entropy",
            [target(f"{METRIC_POLICY_ENTROPY}{{{sel}}}", "entropy")],
            "short",
            "Mean entropy of the policy: how much it still explores.",
            width=8,
        ),
        timeseries(
            "KL divergence",
            [target(f"{METRIC_POLICY_KL}{{{sel}}}", "KL")],
            "short",
            "Approximate KL between the policy before and after an update.",
            width=8,
        ),
        timeseries(
            "Throughput",
            [
                target(f"{METRIC_SAMPLES_PER_SECOND}{{{sel}}}", "sampled (last iteration)"),
                target(
                    f"sum(rate({METRIC_ENV_STEPS_TRAINED}{{{sel}}}[$__rate_interval]))",
                    "trained",
                ),
            ],
            "suffix: steps/s",
            "Env steps sampled per second, and env steps the learner trained on per second.",
            width=8,
        ),
        timeseries(
            "Where the driver's time goes",
            [
                target(f"sum(rate({metric}{{{sel}}}[$__rate_interval]))", label)
                for metric, label in (
                    (METRIC_SAMPLE_SECONDS, "sampling"),
                    (METRIC_LEARNER_SECONDS, "learning"),
                    (METRIC_WEIGHT_SYNC_SECONDS, "weight sync"),
                )
            ],
            "percentunit",
            "Share of wall time the driver spends sampling, learning and broadcasting weights.",
            width=8,
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        timeseries(
            "Checkpoint age",
            [target(f"{METRIC_CHECKPOINT_AGE}{{{sel}}}", "age")],
            "s",
            "Time since the newest checkpoint was written (a saw tooth while all is well).",
            width=8,
        ),
        bars(
            "Worker restarts, preemptions and restarts",
            [
                target(
                    f"sum(increase({METRIC_WORKER_RESTARTS}{{{sel}}}[$__rate_interval]))",
                    "rollout workers recreated",
                ),
                target(
                    f"sum(increase({METRIC_PREEMPTIONS}{{{sel}}}[$__rate_interval]))",
                    "pods preempted",
                ),
                target(
                    f"sum(increase({METRIC_RESTARTS}{{{sel}}}[$__rate_interval]))",
                    "job restarts",
                ),
            ],
            "short",
            "Rollout worker actors the driver recreated, and the operator's counts of preempted "
            "pods and restarts after failures.",
            width=8,
        ),
        panel(
            "state-timeline",
            "Phase",
            [target(f"{METRIC_JOB_PHASE}{{{sel}}}", "{{phase}}")],
            "short",
            "The job's phase over time, as the operator set it.",
            width=8,
            options={"mergeValues": True, "showValue": "never"},
        ),
        timeseries(
            "Rollout workers by capacity",
            [target(f"{METRIC_ROLLOUT_WORKERS}{{{sel}}}", "{{capacity}}")],
            "short",
            "Running rollout worker pods on spot and on on-demand nodes.",
            width=8,
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        timeseries(
            "Episode length",
            [target(f"{METRIC_EPISODE_LENGTH_MEAN}{{{sel}}}", "mean length")],
            "short",
            "Mean length of the recent episodes, in env steps.",
            width=8,
        ),
        timeseries(
            "Policy lag",
            [target(f"{METRIC_POLICY_LAG}{{{sel}}}", "policy lag")],
            "short",
            "Asynchronous optimizers: learner steps between the weights a batch was sampled with "
            "and those it was learned on (mean of the last iteration). V-trace corrects small "
            "lags; a growing one means the learner falls behind the workers.",
            width=8,
        ),
        timeseries(
            "Learner queue and utilisation",
            [
                target(f"{METRIC_LEARNER_QUEUE_DEPTH}{{{sel}}}", "queued batches"),
                target(f"{METRIC_LEARNER_UTILISATION}{{{sel}}}", "utilisation"),
            ],
            "short",
            "Asynchronous optimizers: batches waiting for the learner thread, and the share of "
            "time it spent learning (right axis). A full queue at utilisation near 1: the "
            "learner is the bottleneck; an empty one at low utilisation: the workers are.",
            width=8,
            overrides=[right_axis("utilisation", "percentunit")],
        ),
        timeseries(
            "Rollout workers ready and down",
            [
                target(f"max({METRIC_WORKERS_READY}{{{sel}}})", "ready"),
                target(
                    f"sum(rate({METRIC_WORKER_DOWNTIME}{{{sel}}}[$__rate_interval]))",
                    "down",
                ),
            ],
            "short",
            "Remote rollout workers ready to sample, and worker slots without a working worker "
            "(seconds lost per second: 1 is one worker missing all along) after a node was lost "
            "or an actor died, until its replacement answers. The driver trains on what is left "
            "meanwhile.",
            width=12,
        ),
        timeseries(
            "Waiting for worker nodes",
            [target(f"max({METRIC_RESOURCE_WAIT}{{{sel}}})", "waiting")],
            "s",
            "How long the driver has waited, at start, for Ray nodes its rollout workers fit on "
            "(their pods still starting, or Pending); 0 when it is not waiting. Past "
            "KUBERL_WORKERS_JOIN_TIMEOUT_SECONDS the attempt fails; pods the scheduler cannot "
            "place show in the RLJob's Schedulable condition.",
            width=12,
        ),
        bars(
            "Stragglers dropped",
            [
                target(
                    f"sum(increase({METRIC_STRAGGLERS_DROPPED}{{{sel}}}[$__rate_interval]))",
                    "batches dropped",
                )
            ],
            "short",
            "SyncSamples and SyncReplay with a sample timeout: rollout worker batches that came "
            "after it and were dropped (the step learned without them).",
            width=12,
        ),
        bars(
            "Checkpoint failures",
            [
                target(
                    f"sum(increase({METRIC_CHECKPOINT_FAILURES}{{{sel}}}[$__rate_interval]))",
                    "failed saves",
                )
            ],
            "short",
            "Checkpoint saves that failed (store full, unreachable, access denied). Training goes "
            "on and the previous checkpoint is kept, but a preemption now loses everything since "
            "it (the checkpoint age panel); the next save tries again.",
            width=12,
        ),
    ]
    variables = [
        query_variable("namespace", f"label_values({METRIC_ITERATION}, namespace)"),
        query_variable("job", f'label_values({METRIC_ITERATION}{{namespace="$namespace"}}, job)'),
    ]
    return dashboard(
        "kuberl-training",
        "kuberl / Training",
        "One RLJob's training: returns against timesteps, losses, throughput, time, checkpoints.",
        variables,
        panels,
    )


def spot() -> dict[str, Any]:
    ns = 'namespace=~"$namespace"'
    lost = f'{METRIC_JOB_PHASE_SECONDS}{{{ns}, phase=~"{LOST_PHASES}"}}'
    active = f'{METRIC_JOB_PHASE_SECONDS}{{{ns}, phase=~"{ACTIVE_PHASES}"}}'
    worker_seconds = f"{METRIC_ROLLOUT_WORKER_SECONDS}{{{ns}}}"
    spot_seconds = f'{METRIC_ROLLOUT_WORKER_SECONDS}{{{ns}, capacity="spot"}}'
    panels = [
        stat(
            "Preemptions in range",
            f"sum(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__range]))",
            "short",
            "Pods of RLJobs preempted in the dashboard's time range.",
            width=6,
        ),
        stat(
            "Time in Preempted or Resuming",
            f"sum(increase({lost}[$__range]))",
            "s",
            "Job time spent with preempted pods or restarting from a checkpoint, in the range.",
            width=6,
        ),
        stat(
            "Share of job time lost",
            f"sum(increase({lost}[$__range])) / sum(increase({active}[$__range]))",
            "percentunit",
            "Time in Preempted or Resuming over the time jobs were active (Provisioning, Running, "
            "Preempted, Resuming), in the range.",
            width=6,
        ),
        stat(
            "Spot share of worker-hours",
            f"sum(increase({spot_seconds}[$__range])) / sum(increase({worker_seconds}[$__range]))",
            "percentunit",
            "Share of rollout worker time that ran on spot nodes, in the range.",
            width=6,
        ),
        bars(
            "Preemptions over time",
            [
                target(
                    "sum by (namespace, job) "
                    f"(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{job}}",
                )
            ],
            "short",
            "Pods of each job preempted per interval.",
        ),
        panel(
            "bargauge",
            "Time lost to preemption by job",
            [
                target(
                    f"sum by (namespace, job) (increase({lost}[$__range]))", "{{namespace}}/{{job}}"
                )
            ],
            "s",
            "Time each job spent in Preempted or Resuming in the range.",
            options={"displayMode": "basic", "orientation": "horizontal"},
        ),
        panel(
            "piechart",
            "Worker-hours by capacity",
            [
                target(
                    f"sum by (capacity) (increase({worker_seconds}[$__range])) / 3600",
                    "{{capacity}}",
                )
            ],
            "h",
            "Rollout worker-hours on spot and on on-demand nodes in the range.",
            width=8,
            options={"pieType": "donut", "reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        panel(
            "bargauge",
            "Worker-hours by job and capacity",
            [
                target(
                    "sum by (namespace, job, capacity) "
                    f"(increase({worker_seconds}[$__range])) / 3600",
                    "{{namespace}}/{{job}} {{capacity}}",
                )
            ],
            "h",
            "Rollout worker-hours of each job on spot and on on-demand nodes in the range.",
            width=16,
            options={"displayMode": "basic", "orientation": "horizontal"},
        ),
        timeseries(
            "Rollout workers by capacity",
            [target(f"sum by (capacity) ({METRIC_ROLLOUT_WORKERS}{{{ns}}})", "{{capacity}}")],
            "short",
            "Running rollout worker pods on spot and on on-demand nodes (the on-demand fallback "
            "shows here when spot capacity is short).",
            custom={"stacking": {"mode": "normal"}, "fillOpacity": 30},
        ),
        timeseries(
            "Pending rollout worker pods",
            [
                target(
                    "sum by (namespace) (kube_pod_status_phase"
                    f'{{{ns}, phase="Pending", pod=~".+-rollout(-on-demand)?-worker-.+"}})',
                    "{{namespace}}",
                )
            ],
            "short",
            "Rollout worker pods waiting for a node, from kube-state-metrics (installed in most "
            "clusters with Prometheus): spot capacity that is not there.",
        ),
        timeseries(
            "Rollout worker slots down",
            [
                target(
                    "sum by (namespace, job) "
                    f"(rate({METRIC_WORKER_DOWNTIME}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{job}}",
                )
            ],
            "short",
            "Rollout worker slots of each job without a working worker (seconds lost per second) "
            "after a lost node or actor, until its replacement answers: the time spot "
            "preemptions cost the drivers, which train on at reduced speed meanwhile.",
        ),
        timeseries(
            "Drivers waiting for worker nodes",
            [
                target(
                    f"max by (namespace, job) ({METRIC_RESOURCE_WAIT}{{{ns}}})",
                    "{{namespace}}/{{job}}",
                )
            ],
            "s",
            "How long each job's driver has waited, at start, for Ray nodes its rollout workers "
            "fit on (their pods still starting, or Pending for want of spot capacity).",
        ),
    ]
    variables = [query_variable("namespace", f"label_values({METRIC_JOBS}, namespace)", True)]
    return dashboard(
        "kuberl-spot",
        "kuberl / Spot and cost",
        "Preemptions, the time they cost, and rollout worker-hours on spot and on-demand nodes.",
        variables,
        panels,
    )


DASHBOARDS = {
    "kuberl-fleet.json": fleet,
    "kuberl-training.json": training,
    "kuberl-spot.json": spot,
}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> None:
    for name, build in DASHBOARDS.items():
        (HERE / name).write_text(render(build))
        print(f"wrote {HERE / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
