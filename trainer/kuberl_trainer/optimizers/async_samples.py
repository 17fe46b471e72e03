"""AsyncSamples (IMPALA, APPO, and PPO swapped onto it): the rollout workers sample while the
learner learns, neither waiting for the other's step.

The workers keep as many sample calls in flight as the learner takes batches while one call
samples, plus one train batch's worth (at most `requests_in_flight_per_worker` per worker): enough
that the learner never waits for a batch, and no more, since a call beyond those only waits for the
learner, and grows the lag of every batch by its turn. The calls go first to workers that have not
returned a batch yet (started or replaced), then to those that returned one last: where the learner
takes fewer calls than the workers could make, the same few workers sample on and the others wait.
Spreading the calls over every worker instead stepped each env a fraction as often, so episodes
took that much longer to end and be reported: 12 APPO workers of 64 CartPole envs took 147-196k env
steps (6.8 s) to report a mean return of 475, where 2 workers took 86k (3.2 s); now 98k (3.9 s,
against 2.9 s). A call's sampling is timed without the time its worker waited for a CPU: where more
processes share the CPUs than they hold (12 workers, their learner and a busy process on 2 cores),
a call's wall time grows with the calls in flight, and counting it would ask for more calls still,
until every worker sampled and batches lagged about 9 learner steps instead of 2. Until the
learner's step and a call's sampling have been timed, every worker samples; a starting worker's
first call, and the call of a worker that keeps it far longer than calls take (a hung env), are not
counted, so that the others go on sampling meanwhile.

Returned batches go to a learner thread behind a bounded queue, concatenated up to the policy's
train_batch_size (one by one when it has none, as PPO). When the learner falls behind, the driver
blocks on the full queue and stops collecting, so the workers finish their queued calls and idle
instead of memory growing. A worker that returns a batch gets fresh weights before its next call
once the learner has taken `broadcast_interval` steps since its last ones; the weights go into
the object store once per version, shared by every worker that needs them.

Staleness is bounded where it is cheapest to know: when the learner takes a train batch, a sample
call's batch that lags more than `max_policy_lag` learner steps (between the weights it was sampled
with and the learner's) is dropped and counted, and the fresh ones are concatenated and learned on,
their mean lag noted on the batch (IMPALA splits a batch into as many minibatches as it allows).
A learner step that keeps nothing changes no weights and is no step of the weights' version.

A step returns after one batch per remote worker (from the local worker when none is healthy):
the env steps of a SyncSamples iteration, so iterations compare. Its learner statistics are those
of the learn calls finished meanwhile, plus the lag of the batches learned on (`policy_lag`, its
mean; `policy_lag_p90`, `policy_lag_max`), the batches dropped as stale, the queue depth and the
learner's utilisation over the step. Without remote workers the local worker samples with the
learner's own policy (or its CPU copy, refreshed first), under the learner's lock, so sampling and
learning take turns.

Checkpoints keep the counters only: batches queued or in flight are lost on a restore (a few
batches, which the workers sample again in seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from kuberl_contract.progress_row import (
    LEARNER_QUEUE_DEPTH,
    LEARNER_UTILISATION,
    POLICY_LAG,
    POLICY_LAG_MAX,
    POLICY_LAG_P90,
    STALE_BATCHES_DROPPED,
)
from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult
from kuberl_trainer.optimizers.flow_control import (
    calls_to_keep_in_flight,
    counts_in_flight,
    in_call_order,
    is_stale,
    weights_due,
)
from kuberl_trainer.optimizers.learner_thread import LearnerThread, moving_average
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.pool_events import Completed
from kuberl_trainer.rollouts.worker_set import WorkerSet

if TYPE_CHECKING:
    from kuberl_trainer.policies.interface import Weights

# The longest the driver waits on its workers before it looks at the learner (which may have
# failed) and for replacement workers that have started.
_POLL_S = 1.0
__all__ = ["AsyncSamplesOptimizer", "TrainBatch", "calls_to_keep_in_flight", "train_batch"]


class AsyncSamplesOptimizer(PolicyOptimizer):
    def __init__(self, workers: WorkerSet, config: Any):
        super().__init__(workers, config)
        settings = config.optimizer_config
        # Null settings take AsyncSamples' own defaults (OptimizerConfig says why): 1 call in
        # flight per worker, 1 batch queued for the learner.
        self.requests_per_worker = settings.requests_in_flight_per_worker or 1
        self.broadcast_interval = settings.broadcast_interval
        self.max_policy_lag = settings.max_policy_lag
        self.train_batch_size = getattr(config.hyperparameters, "train_batch_size", None)
        # (weights, version) copied by the learner after each step, so that sending weights
        # never waits for a learn call to finish
        self._published: tuple[Weights, int] | None = None
        # Learner steps that changed the weights: their version. Unlike learner.num_steps, a
        # train batch dropped whole as stale does not count.
        self.version = 0
        self.learner = LearnerThread(self._learn, settings.learner_queue_size or 1)
        self.learner.start()
        self._pending: list[tuple[SampleBatch, int]] = []  # (batch, version) short of a batch
        self._last_return: dict[int, float] = {}  # worker index → when it last returned a batch
        self._last_call: dict[int, float] = {}  # worker index → when its latest call went out
        # Moving averages that size the calls in flight (calls_to_keep_in_flight), with the
        # learner's own of its learn calls' seconds: a sample call's seconds on its worker less
        # those it waited for a CPU, and the sample calls in a train batch. The calls' whole
        # seconds set the patience with a straggler.
        self._sample_s: float | None = None
        self._sampling_s: float | None = None
        self._calls_per_step = 1.0

    @property
    def policy_lock(self):
        return self.learner.lock

    def stop(self) -> None:
        self.learner.stop()

    def step(self) -> StepResult:
        busy_before, start = self.learner.busy_s, time.perf_counter()
        batches: list[SampleBatch] = []
        learned: list[_Learned] = []
        while len(batches) < max(1, self.workers.num_remote):
            for batch, version in self._collect():
                batches.append(batch)
                self._feed(batch, version)
            learned += self.learner.results()
        self.counters.timers["learn"] = self.learner.busy_s
        stats = {
            LEARNER_QUEUE_DEPTH: float(self.learner.queue_depth),
            LEARNER_UTILISATION: self.learner.share_busy_since(busy_before, start),
        }
        stats[STALE_BATCHES_DROPPED] = sum(item.dropped for item in learned)
        learned_on = [item for item in learned if item.lags]
        if learned_on:
            keys = learned_on[0].stats
            stats |= {k: float(np.mean([item.stats[k] for item in learned_on])) for k in keys}
            lags = [lag for item in learned_on for lag in item.lags]
            stats[POLICY_LAG] = float(np.mean(lags))
            stats[POLICY_LAG_P90] = float(np.percentile(lags, 90))
            stats[POLICY_LAG_MAX] = float(max(lags))
        return self._result(batches, stats, sum(item.rows for item in learned))

    def _collect(self) -> list[tuple[SampleBatch, int]]:
        """The batches that arrived, each with the weights version it was sampled with."""
        healthy = self.workers.healthy_indices
        if not healthy:  # none asked for, or all being replaced: the local worker samples
            with self.timer("sample"), self.learner.lock:
                self.workers.refresh_local_copy()  # the learner has moved on since
                return [(self.workers.local_worker.sample(), self.version)]
        self._request_samples(healthy)
        with self.timer("sample"):
            events = self.workers.events(timeout=_POLL_S)
        batches = []
        for event in events:
            if isinstance(event, Completed):
                batch = event.result
                self._sample_s = moving_average(self._sample_s, batch.sample_s)
                sampling_s = max(0.0, batch.sample_s - batch.cpu_wait_s)
                self._sampling_s = moving_average(self._sampling_s, sampling_s)
                self._last_return[event.worker] = time.monotonic()
                batches.append((batch, event.tag))
            else:  # joined or lost: a new worker in the slot has returned no batch yet
                self._last_return.pop(event.worker, None)
        return batches

    def _request_samples(self, healthy: list[int]) -> None:
        """Sample calls, the workers in call order, up to the calls to keep in flight; each
        worker gets fresh weights first where due, and its call the version it samples with."""
        now = time.monotonic()
        in_flight = sum(
            self.workers.in_flight(index)
            for index in healthy
            if counts_in_flight(
                index in self._last_return, now - self._last_call.get(index, now), self._sample_s
            )
        )
        capacity = len(healthy) * self.requests_per_worker
        wanted = capacity
        learn_s = self.learner.call_s
        if learn_s is not None and self._sampling_s is not None:
            wanted = calls_to_keep_in_flight(
                self._sampling_s, learn_s, self._calls_per_step, capacity
            )
        for index in in_call_order(healthy, self._last_return):
            while in_flight < wanted and self.workers.in_flight(index) < self.requests_per_worker:
                version = self._refresh_weights(index)
                self.workers.call_tagged(index, version, "sample")
                self._last_call[index] = time.monotonic()
                in_flight += 1

    def _refresh_weights(self, index: int) -> int:
        """Before a call: the latest weights, unless the worker's are fewer than
        broadcast_interval learner steps old. Returns the version the worker holds."""
        if self._published is None:  # nothing learned yet: the policy as built or restored
            with self.learner.lock:
                self._published = (self.policy.get_weights(), self.version)
        weights, version = self._published
        held = self.workers.broadcaster.held.get(index)
        if not weights_due(held, version, self.broadcast_interval):
            return held
        with self.timer("weight_sync"):
            self.workers.offer_weights(index, version, lambda: weights, self.counters.steps_sampled)
        return version

    def _feed(self, batch: SampleBatch, version: int) -> None:
        """Queue the batch for the learner once train_batch_size rows have come together;
        blocks while the queue is full."""
        self._pending.append((batch, version))
        pending = sum(b.env_steps for b, _ in self._pending)
        if self.train_batch_size and pending < self.train_batch_size:
            return
        self._calls_per_step = moving_average(self._calls_per_step, len(self._pending))
        self.learner.put(train_batch(self._pending))
        self._pending = []

    def _learn(self, item: TrainBatch) -> _Learned:
        """In the learner thread: drop the sample calls' rows that lag more than max_policy_lag,
        learn on the others, and note how far behind they were."""
        lags = [self.version - version for version in item.versions]
        fresh = [not is_stale(lag, self.max_policy_lag) for lag in lags]
        dropped = fresh.count(False)
        if not any(fresh):
            return _Learned({}, [], 0, dropped)
        kept = [lag for lag, keep in zip(lags, fresh, strict=True) if keep]
        columns = item.batch.columns
        if dropped:  # rare: the concatenation is the driver's, and only this cuts it
            rows = np.repeat(fresh, item.rows)
            columns = {key: column[rows] for key, column in columns.items()}
        batch = SampleBatch(columns, policy_lag=float(np.mean(kept)))
        self.policy.set_global_timesteps(self.counters.steps_sampled)
        stats = self.policy.learn_on_batch(batch)
        self.version += 1
        self._published = (self.policy.get_weights(), self.version)
        return _Learned(stats, kept, batch.env_steps, dropped)


class TrainBatch(NamedTuple):
    """Sample calls' batches concatenated for one learn call (in the driver, off the learner's
    thread), with each call's weights version and row count, so that stale ones can be cut out."""

    batch: SampleBatch
    versions: list[int]
    rows: list[int]


def train_batch(sampled: list[tuple[SampleBatch, int]]) -> TrainBatch:
    """The learner's item from (batch, weights version) pairs."""
    batches = [batch for batch, _ in sampled]
    versions = [version for _, version in sampled]
    return TrainBatch(SampleBatch.concat(batches), versions, [len(batch) for batch in batches])


@dataclass(frozen=True)
class _Learned:
    """What a learn call returns to the driver: the policy's statistics, the lag of each batch
    learned on (none when all were stale), the env steps learned on and the batches dropped."""

    stats: dict[str, float]
    lags: list[int]
    rows: int
    dropped: int
