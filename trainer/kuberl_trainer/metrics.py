"""The driver's Prometheus metrics. Names are defined here once; labels stay bounded
(namespace, job, algorithm)."""

from __future__ import annotations

import math
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server

from kuberl_trainer.progress_row import (
    LEARNER_QUEUE_DEPTH,
    LEARNER_UTILISATION,
    POLICY_LAG,
    STRAGGLERS_DROPPED,
)

LABELS = ("namespace", "job", "algorithm")

# learner statistic → (metric name, help); only these leave the process, so cardinality is fixed
LEARNER_GAUGES = {
    "policy_loss": ("kuberl_policy_loss", "Policy loss of the last iteration."),
    "vf_loss": ("kuberl_value_loss", "Value-function loss of the last iteration."),
    "loss": ("kuberl_td_loss", "TD (Huber) loss of the last iteration."),
    "entropy": ("kuberl_policy_entropy", "Mean policy entropy of the last iteration."),
    "kl": ("kuberl_policy_kl", "Approximate KL between old and new policy."),
    # The asynchronous optimizers' learner thread (NaN for the synchronous ones, which have none).
    POLICY_LAG: ("kuberl_policy_lag", "Learner steps between sampling a batch and learning on it."),
    LEARNER_QUEUE_DEPTH: ("kuberl_learner_queue_depth", "Batches waiting for the learner thread."),
    LEARNER_UTILISATION: (
        "kuberl_learner_utilisation",
        "Share (0..1) of the last iteration the learner thread spent learning.",
    ),
}


class TrainerMetrics:
    def __init__(self, namespace: str, job: str, algorithm: str):
        self.registry = CollectorRegistry()
        self.labels = {"namespace": namespace, "job": job, "algorithm": algorithm}
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=r).labels(**self.labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r).labels(**self.labels)

        self.iterations = counter("kuberl_iterations_total", "Training iterations completed.")
        self.steps_sampled = counter("kuberl_env_steps_sampled_total", "Env steps sampled.")
        self.steps_trained = counter("kuberl_env_steps_trained_total", "Env steps trained on.")
        self.episodes = counter("kuberl_episodes_total", "Episodes finished while sampling.")
        self.episode_return = gauge("kuberl_episode_return_mean", "Mean recent episode return.")
        self.episode_return.set(math.nan)  # no episode has finished yet: not a return of 0
        self.episode_length = gauge("kuberl_episode_length_mean", "Mean recent episode length.")
        self.evaluation_return = gauge(
            "kuberl_evaluation_return_mean", "Mean return of the last greedy evaluation."
        )
        self.evaluation_return.set(math.nan)  # none yet, or the job does not evaluate
        self.samples_per_second = gauge(
            "kuberl_samples_per_second", "Env steps sampled per second in the last iteration."
        )
        # Where the run stands, across resumed runs (the counters above restart with the process):
        # what the operator reads into the RLJob's status.progress.
        self.iteration = gauge("kuberl_training_iteration", "Training iterations completed in all.")
        self.timesteps = gauge("kuberl_training_timesteps", "Env steps sampled in all.")
        self.last_iteration = gauge(
            "kuberl_last_iteration_timestamp_seconds", "Unix time the newest iteration ended."
        )
        self.checkpoint = Info(
            "kuberl_checkpoint", "Location of the newest checkpoint.", LABELS, registry=r
        ).labels(**self.labels)
        self.learner_time = counter("kuberl_learner_seconds_total", "Time spent learning.")
        self.sample_time = counter("kuberl_sample_seconds_total", "Time spent sampling.")
        self.weight_sync_time = counter(
            "kuberl_weight_sync_seconds_total", "Time spent broadcasting weights."
        )
        self.worker_restarts = counter(
            "kuberl_worker_restarts_total", "Rollout workers recreated after dying."
        )
        self.stragglers_dropped = counter(
            "kuberl_stragglers_dropped_total",
            "Rollout worker batches dropped because they came after the step's sample timeout.",
        )
        self._stragglers_seen = 0  # the row's count is this run's total; the counter takes steps
        self.last_checkpoint = gauge(
            "kuberl_last_checkpoint_timestamp_seconds", "Unix time of the newest checkpoint."
        )
        self.checkpoint_age = gauge(
            "kuberl_checkpoint_age_seconds", "Seconds since the newest checkpoint was written."
        )
        self._last_checkpoint_time = math.nan
        self.checkpoint_age.set_function(lambda: time.time() - self._last_checkpoint_time)
        self.learner = {stat: gauge(name, doc) for stat, (name, doc) in LEARNER_GAUGES.items()}
        for learner_gauge in self.learner.values():
            learner_gauge.set(math.nan)  # a statistic this algorithm lacks is no loss of 0

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def checkpointed(self, when: float, path: object) -> None:
        self._last_checkpoint_time = when
        self.last_checkpoint.set(when)
        self.checkpoint.info({"path": str(path)})

    def position(self, iteration: int, timesteps: int) -> None:
        self.iteration.set(iteration)
        self.timesteps.set(timesteps)

    def record(self, row: dict, timer_deltas: dict[str, float], new_restarts: int) -> None:
        """Update from one iteration's progress row."""
        self.iterations.inc()
        self.position(row["iteration"], row["timesteps_total"])
        self.last_iteration.set(time.time())
        self.steps_sampled.inc(row["timesteps_this_iter"])
        self.steps_trained.inc(row["timesteps_trained_this_iter"])
        self.episodes.inc(row["episodes_this_iter"])
        self.samples_per_second.set(row["samples_per_s"])
        for gauge, key in (
            (self.episode_return, "episode_return_mean"),
            (self.episode_length, "episode_len_mean"),
            (self.evaluation_return, "evaluation_return_mean"),
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
        for stat, gauge in self.learner.items():
            if stat in row:
                gauge.set(row[stat])
