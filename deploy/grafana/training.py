"""kuberl-training.json: one job's training, chosen with the `namespace` and `rljob` variables
(returns against timesteps, losses, throughput, where the driver's time goes, checkpoints, and the
rollout workers it samples with)."""

from __future__ import annotations

from typing import Any

from panels import (
    bars,
    dashboard,
    panel,
    query_variable,
    right_axis,
    stat,
    target,
    timeseries,
)

from kuberl_contract.progress_row import (
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
    METRIC_POLICY_EPISODE_RETURN_MEAN,
    METRIC_POLICY_KL,
    METRIC_POLICY_LAG,
    METRIC_POLICY_LOSS,
    METRIC_POLICY_STATISTIC,
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
from kuberl_operator.constants import (
    METRIC_JOB_PHASE,
    METRIC_PREEMPTIONS,
    METRIC_RESTARTS,
    METRIC_ROLLOUT_WORKERS,
)


def training() -> dict[str, Any]:
    sel = 'namespace="$namespace", rljob="$rljob"'
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
            "Return per policy",
            [target(f"{METRIC_POLICY_EPISODE_RETURN_MEAN}{{{sel}}}", "{{policy}}")],
            "short",
            "A multi-agent job's policies: the mean recent return of each one's agents (a job "
            "of one policy has none).",
            width=12,
        ),
        timeseries(
            "Learner statistics per policy",
            [
                target(
                    f'{METRIC_POLICY_STATISTIC}{{{sel}, statistic=~"policy_loss|vf_loss|loss|kl"}}',
                    "{{policy}} {{statistic}}",
                )
            ],
            "short",
            "A multi-agent job's policies: each one's losses and KL in the last iteration.",
            width=12,
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
        query_variable(
            "rljob",
            f'label_values({METRIC_ITERATION}{{namespace="$namespace"}}, rljob)',
            label="RLJob",
        ),
    ]
    return dashboard(
        "kuberl-training",
        "kuberl / Training",
        "One RLJob's training: returns against timesteps, losses, throughput, time, checkpoints.",
        variables,
        panels,
    )
