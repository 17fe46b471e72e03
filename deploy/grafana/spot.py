"""kuberl-spot.json: spot and cost (preemptions, time lost to them, worker-hours by capacity,
dollars by capacity against their on-demand equivalent), across the namespaces the `namespace`
variable selects."""

from __future__ import annotations

from typing import Any

from panels import (
    LOST_PHASES,
    bars,
    dashboard,
    panel,
    phases,
    query_variable,
    stat,
    target,
    timeseries,
)

from kuberl_contract.progress_row import (
    METRIC_RESOURCE_WAIT,
    METRIC_WORKER_DOWNTIME,
)
from kuberl_operator.constants import (
    METRIC_JOB_COST,
    METRIC_JOB_ON_DEMAND_EQUIVALENT,
    METRIC_JOB_PHASE_SECONDS,
    METRIC_JOBS,
    METRIC_PREEMPTIONS,
    METRIC_ROLLOUT_WORKER_SECONDS,
    METRIC_ROLLOUT_WORKERS,
)
from kuberl_operator.spec import Phase

# The phases of a job under way (Pending has no cluster yet, the others have ended): the share of
# time lost to preemption is a share of the time in these.
ACTIVE_PHASES = phases(Phase.PROVISIONING, Phase.RUNNING, Phase.PREEMPTED, Phase.RESUMING)


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
                    "sum by (namespace, rljob) "
                    f"(increase({METRIC_PREEMPTIONS}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{rljob}}",
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
                    f"sum by (namespace, rljob) (increase({lost}[$__range]))",
                    "{{namespace}}/{{rljob}}",
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
                    "sum by (namespace, rljob, capacity) "
                    f"(increase({worker_seconds}[$__range])) / 3600",
                    "{{namespace}}/{{rljob}} {{capacity}}",
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
            "Cost by capacity",
            [
                target(f"sum by (capacity) ({METRIC_JOB_COST}{{{ns}}})", "{{capacity}}"),
                target(f"sum({METRIC_JOB_ON_DEMAND_EQUIVALENT}{{{ns}}})", "all on on-demand nodes"),
            ],
            "currencyUSD",
            "Dollars the jobs have cost so far on spot and on on-demand nodes (each pod's share of "
            "its node at the operator's price table), against what the same pod-hours would "
            "have cost on on-demand nodes: the gap is what spot saved.",
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
                    "sum by (namespace, rljob) "
                    f"(rate({METRIC_WORKER_DOWNTIME}{{{ns}}}[$__rate_interval]))",
                    "{{namespace}}/{{rljob}}",
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
                    f"max by (namespace, rljob) ({METRIC_RESOURCE_WAIT}{{{ns}}})",
                    "{{namespace}}/{{rljob}}",
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
        "Preemptions, the time they cost, rollout worker-hours on spot and on-demand nodes, and "
        "what jobs cost.",
        variables,
        panels,
    )
