"""The driver's Prometheus metrics. Names are defined here once; labels stay bounded
(namespace, rljob, algorithm)."""

from __future__ import annotations

import math
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server

from kuberl_contract.progress_row import (
    ADVANTAGE_STD,
    ALPHA,
    ALPHA_LOSS,
    CHECKPOINT_LABEL,
    CLIP_FRACTION,
    ENTROPY,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    EPISODES_THIS_ITER,
    EPSILON,
    ES_GRADIENT_NORM,
    ES_UPDATE_RATIO,
    ES_WEIGHTS_NORM,
    EVALUATION_RETURN_MEAN,
    EXPLOITS,
    GRAD_NORM,
    IMPORTANCE_RATIO_MAX,
    ITERATION,
    KL,
    LEARNER_QUEUE_DEPTH,
    LEARNER_UTILISATION,
    METRIC_CHECKPOINT,
    METRIC_CHECKPOINT_AGE,
    METRIC_CHECKPOINT_FAILURES,
    METRIC_ENV_STEPS_SAMPLED,
    METRIC_ENV_STEPS_TRAINED,
    METRIC_EPISODE_LENGTH_MEAN,
    METRIC_EPISODE_RETURN_MEAN,
    METRIC_EPISODES,
    METRIC_EVALUATION_RETURN_MEAN,
    METRIC_ITERATION,
    METRIC_ITERATIONS_TOTAL,
    METRIC_LAST_CHECKPOINT_TIMESTAMP,
    METRIC_LAST_ITERATION_TIMESTAMP,
    METRIC_LEARNER_QUEUE_DEPTH,
    METRIC_LEARNER_SECONDS,
    METRIC_LEARNER_UTILISATION,
    METRIC_POLICY_ENTROPY,
    METRIC_POLICY_EPISODE_RETURN_MEAN,
    METRIC_POLICY_KL,
    METRIC_POLICY_LAG,
    METRIC_POLICY_LAG_MAX,
    METRIC_POLICY_LAG_P90,
    METRIC_POLICY_LOSS,
    METRIC_POLICY_STATISTIC,
    METRIC_RESOURCE_WAIT,
    METRIC_SAMPLE_SECONDS,
    METRIC_SAMPLES_PER_SECOND,
    METRIC_STALE_BATCHES_DROPPED,
    METRIC_STRAGGLERS_DROPPED,
    METRIC_TD_LOSS,
    METRIC_TIMESTEPS,
    METRIC_TRIAL_EPISODE_RETURN_MEAN,
    METRIC_TRIAL_EXPLOITS,
    METRIC_TRIAL_TIMESTEPS,
    METRIC_VALUE_LOSS,
    METRIC_WEIGHT_SYNC_SECONDS,
    METRIC_WORKER_DOWNTIME,
    METRIC_WORKER_RESTARTS,
    METRIC_WORKERS_READY,
    POLICIES,
    POLICY_LABEL,
    POLICY_LAG,
    POLICY_LAG_MAX,
    POLICY_LAG_P90,
    POLICY_LOSS,
    POLICY_STATS,
    Q_MEAN,
    RLJOB_LABEL,
    SAMPLES_PER_S,
    SGD_STEPS,
    STALE_BATCHES_DROPPED,
    STRAGGLERS_DROPPED,
    TD_ERROR_MEAN,
    TD_LOSS,
    TIMESTEPS_THIS_ITER,
    TIMESTEPS_TOTAL,
    TIMESTEPS_TRAINED_THIS_ITER,
    TRIALS,
    VF_LOSS,
    WORKER_DOWNTIME_S,
    WORKERS_READY,
)

LABELS = ("namespace", RLJOB_LABEL, "algorithm")
POLICY_LABELS = (*LABELS, POLICY_LABEL)  # a multi-agent job's policies: at most 64
TRIAL_LABELS = (*LABELS, "trial")  # a population's trials: at most hyperparameters.population

METRIC_RETURN_TARGET = "kuberl_return_target"
"""Gauge: the mean episode return the job aims at (`return_target`); NaN when it names none. The
KuberlReturnStalled alert leaves a job that reached it alone: a solved job cannot improve."""

# learner statistic → (metric name, help); only these leave the process, so cardinality is fixed
LEARNER_GAUGES = {
    POLICY_LOSS: (METRIC_POLICY_LOSS, "Policy loss of the last iteration."),
    VF_LOSS: (METRIC_VALUE_LOSS, "Value-function loss of the last iteration."),
    TD_LOSS: (
        METRIC_TD_LOSS,
        "TD loss of the last iteration (DQN's Huber loss, SAC's squared error).",
    ),
    ENTROPY: (METRIC_POLICY_ENTROPY, "Mean policy entropy of the last iteration."),
    KL: (METRIC_POLICY_KL, "Approximate KL between old and new policy."),
    # The asynchronous optimizers' learner thread (NaN for the synchronous ones, which have none).
    POLICY_LAG: (
        METRIC_POLICY_LAG,
        "Learner steps between sampling a batch and learning on it (mean of the last iteration).",
    ),
    POLICY_LAG_P90: (METRIC_POLICY_LAG_P90, "90th percentile of the last iteration's policy lag."),
    POLICY_LAG_MAX: (METRIC_POLICY_LAG_MAX, "Largest policy lag of the last iteration."),
    LEARNER_QUEUE_DEPTH: (METRIC_LEARNER_QUEUE_DEPTH, "Batches waiting for the learner thread."),
    LEARNER_UTILISATION: (
        METRIC_LEARNER_UTILISATION,
        "Share (0..1) of the last iteration the learner thread spent learning.",
    ),
}

UNGAUGED_POLICY_STATS = frozenset(
    {
        ADVANTAGE_STD,
        ALPHA,
        ALPHA_LOSS,
        CLIP_FRACTION,
        EPSILON,
        ES_GRADIENT_NORM,
        ES_UPDATE_RATIO,
        ES_WEIGHTS_NORM,
        GRAD_NORM,
        IMPORTANCE_RATIO_MAX,
        Q_MEAN,
        SGD_STEPS,
        TD_ERROR_MEAN,
    }
)
"""The policies' statistics (progress_row.POLICY_STATS) that stay in the progress row and
TensorBoard; every other one has its gauge in LEARNER_GAUGES."""


def return_target(stop_return: float | None, env: str) -> float | None:
    """The mean episode return a job aims at: its `stop.episodeReturnMean`, else the return at which
    gymnasium's registry calls the env solved (`reward_threshold`: CartPole-v1's 475), else None
    (an env without one, or a `module:Class` env, which has no registry entry)."""
    if stop_return is not None:
        return stop_return
    if ":" in env:  # gymnasium.spec would import the module named before the colon
        return None
    import gymnasium  # only the driver asks, after it made the env

    try:
        return gymnasium.spec(env).reward_threshold
    except gymnasium.error.Error:  # not registered in this process (a namespace not loaded)
        return None


class TrainerMetrics:
    def __init__(
        self, namespace: str, rljob: str, algorithm: str, target: float | None = None
    ) -> None:
        """`target`: the mean episode return the job aims at (`return_target`), if any."""
        self.registry = CollectorRegistry()
        self.labels = {"namespace": namespace, RLJOB_LABEL: rljob, "algorithm": algorithm}
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=r).labels(**self.labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r).labels(**self.labels)

        self.iterations = counter(METRIC_ITERATIONS_TOTAL, "Training iterations completed.")
        self.steps_sampled = counter(METRIC_ENV_STEPS_SAMPLED, "Env steps sampled.")
        self.steps_trained = counter(METRIC_ENV_STEPS_TRAINED, "Env steps trained on.")
        self.episodes = counter(METRIC_EPISODES, "Episodes finished while sampling.")
        self.episode_return = gauge(METRIC_EPISODE_RETURN_MEAN, "Mean recent episode return.")
        self.episode_return.set(math.nan)  # no episode has finished yet: not a return of 0
        self.episode_length = gauge(METRIC_EPISODE_LENGTH_MEAN, "Mean recent episode length.")
        self.evaluation_return = gauge(
            METRIC_EVALUATION_RETURN_MEAN, "Mean return of the last greedy evaluation."
        )
        self.evaluation_return.set(math.nan)  # none yet, or the job does not evaluate
        self.return_target = gauge(
            METRIC_RETURN_TARGET,
            "Mean episode return the job aims at: its stop.episodeReturnMean, else the env's "
            "registered reward threshold (NaN: neither).",
        )
        self.return_target.set(math.nan if target is None else target)
        self.samples_per_second = gauge(
            METRIC_SAMPLES_PER_SECOND, "Env steps sampled per second in the last iteration."
        )
        # Where the run stands, across resumed runs (the counters above restart with the process):
        # what the operator reads into the RLJob's status.progress.
        self.iteration = gauge(METRIC_ITERATION, "Training iterations completed in all.")
        self.timesteps = gauge(METRIC_TIMESTEPS, "Env steps sampled in all.")
        self.last_iteration = gauge(
            METRIC_LAST_ITERATION_TIMESTAMP, "Unix time the newest iteration ended."
        )
        self.checkpoint = Info(
            METRIC_CHECKPOINT, "Location of the newest checkpoint.", LABELS, registry=r
        ).labels(**self.labels)
        self.learner_time = counter(METRIC_LEARNER_SECONDS, "Time spent learning.")
        self.sample_time = counter(METRIC_SAMPLE_SECONDS, "Time spent sampling.")
        self.weight_sync_time = counter(
            METRIC_WEIGHT_SYNC_SECONDS, "Time spent broadcasting weights."
        )
        self.worker_restarts = counter(
            METRIC_WORKER_RESTARTS, "Rollout workers recreated after dying."
        )
        self.stragglers_dropped = counter(
            METRIC_STRAGGLERS_DROPPED,
            "Rollout worker batches dropped because they came after the step's sample timeout.",
        )
        self._stragglers_seen = 0  # the row's count is this run's total; the counter takes steps
        self.stale_batches_dropped = counter(
            METRIC_STALE_BATCHES_DROPPED,
            "Batches the learner dropped instead of learning on them: they lagged more than "
            "optimizerConfig.maxPolicyLag learner steps.",
        )
        self.worker_downtime = counter(
            METRIC_WORKER_DOWNTIME,
            "Seconds rollout worker slots went without a working worker, summed over slots: from a "
            "lost worker's last answer to its replacement's first (noticing the loss, waiting for "
            "a node, starting the actor).",
        )
        self._downtime_seen = 0.0  # as _stragglers_seen
        self.workers_ready = gauge(
            METRIC_WORKERS_READY,
            "Remote rollout workers ready to sample (not replacements still starting or waiting "
            "for a node).",
        )
        self.last_checkpoint = gauge(
            METRIC_LAST_CHECKPOINT_TIMESTAMP, "Unix time of the newest checkpoint."
        )
        self.checkpoint_age = gauge(
            METRIC_CHECKPOINT_AGE, "Seconds since the newest checkpoint was written."
        )
        self._last_checkpoint_time = math.nan
        self.checkpoint_age.set_function(lambda: time.time() - self._last_checkpoint_time)
        self.checkpoint_failures = counter(
            METRIC_CHECKPOINT_FAILURES,
            "Checkpoint saves that failed (store full, unreachable, denied); training went on, the "
            "previous checkpoint was kept, and the next save retries.",
        )
        self.resource_wait = gauge(
            METRIC_RESOURCE_WAIT,
            "Seconds the driver has waited at start for Ray nodes its actors fit on (0: none).",
        )
        self.trial_return = Gauge(
            METRIC_TRIAL_EPISODE_RETURN_MEAN,
            "Mean recent episode return of a trial of the population.",
            TRIAL_LABELS,
            registry=r,
        )
        self.trial_timesteps = Gauge(
            METRIC_TRIAL_TIMESTEPS,
            "Env steps a trial of the population sampled.",
            TRIAL_LABELS,
            registry=r,
        )
        self.trial_exploits = Counter(
            METRIC_TRIAL_EXPLOITS,
            "Times a trial took a better trial's weights and hyperparameters.",
            TRIAL_LABELS,
            registry=r,
        )
        self.policy_return = Gauge(
            METRIC_POLICY_EPISODE_RETURN_MEAN,
            "Mean recent episode return of the agents of a policy of a multi-agent job.",
            POLICY_LABELS,
            registry=r,
        )
        self.policy_statistic = Gauge(
            METRIC_POLICY_STATISTIC,
            "A learner statistic of a policy of a multi-agent job, its last iteration's.",
            (*POLICY_LABELS, "statistic"),
            registry=r,
        )
        self.learner = {stat: gauge(name, doc) for stat, (name, doc) in LEARNER_GAUGES.items()}
        for learner_gauge in self.learner.values():
            learner_gauge.set(math.nan)  # a statistic this algorithm lacks is no loss of 0

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def checkpointed(self, when: float, path: object) -> None:
        self._last_checkpoint_time = when
        self.last_checkpoint.set(when)
        self.checkpoint.info({CHECKPOINT_LABEL: str(path)})

    def checkpoint_failed(self) -> None:
        self.checkpoint_failures.inc()

    def waiting_for_resources(self, seconds: float) -> None:
        self.resource_wait.set(seconds)

    def position(self, iteration: int, timesteps: int) -> None:
        self.iteration.set(iteration)
        self.timesteps.set(timesteps)

    def record(self, row: dict, timer_deltas: dict[str, float], new_restarts: int) -> None:
        """Update from one iteration's progress row."""
        self.iterations.inc()
        self.position(row[ITERATION], row[TIMESTEPS_TOTAL])
        self.last_iteration.set(time.time())
        self.steps_sampled.inc(row[TIMESTEPS_THIS_ITER])
        self.steps_trained.inc(row[TIMESTEPS_TRAINED_THIS_ITER])
        self.episodes.inc(row[EPISODES_THIS_ITER])
        self.samples_per_second.set(row[SAMPLES_PER_S])
        for gauge, key in (
            (self.episode_return, EPISODE_RETURN_MEAN),
            (self.episode_length, EPISODE_LEN_MEAN),
            (self.evaluation_return, EVALUATION_RETURN_MEAN),
        ):
            if row.get(key) is not None:
                gauge.set(row[key])
        self.learner_time.inc(timer_deltas.get("learn", 0.0))
        self.sample_time.inc(timer_deltas.get("sample", 0.0))
        self.weight_sync_time.inc(timer_deltas.get("weight_sync", 0.0))
        self.worker_restarts.inc(new_restarts)
        stragglers = row.get(STRAGGLERS_DROPPED, 0)
        # Below the last total: a new WorkerSet counting from 0 again.
        seen = self._stragglers_seen if stragglers >= self._stragglers_seen else 0
        self.stragglers_dropped.inc(stragglers - seen)
        self._stragglers_seen = stragglers
        downtime = row.get(WORKER_DOWNTIME_S, 0.0)
        seen = self._downtime_seen if downtime >= self._downtime_seen else 0.0
        self.worker_downtime.inc(downtime - seen)
        self._downtime_seen = downtime
        self.stale_batches_dropped.inc(row.get(STALE_BATCHES_DROPPED, 0))  # the iteration's
        if WORKERS_READY in row:
            self.workers_ready.set(row[WORKERS_READY])
        for stat, gauge in self.learner.items():
            if stat in row:
                gauge.set(row[stat])
        for entry in row.get(POLICIES, ()):
            labels = self.labels | {POLICY_LABEL: entry[POLICY_LABEL]}
            if math.isfinite(entry[EPISODE_RETURN_MEAN]):
                self.policy_return.labels(**labels).set(entry[EPISODE_RETURN_MEAN])
            for statistic in POLICY_STATS:
                if statistic in entry:
                    gauge = self.policy_statistic.labels(**labels, statistic=statistic)
                    gauge.set(entry[statistic])
        for trial in row.get(TRIALS, ()):
            labels = self.labels | {"trial": str(trial["trial"])}
            self.trial_return.labels(**labels).set(trial[EPISODE_RETURN_MEAN])
            self.trial_timesteps.labels(**labels).set(trial[TIMESTEPS_TOTAL])
        for exploit in row.get(EXPLOITS, ()):
            self.trial_exploits.labels(**self.labels | {"trial": str(exploit["trial"])}).inc()
