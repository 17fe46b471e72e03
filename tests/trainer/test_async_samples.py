"""AsyncSamples' control flow against mock workers (real Ray actors): calls kept in flight,
weights only to the worker that returned, the learner's queue holding the driver back, learner
failures reaching the driver, policy lag, a killed worker replaced. Every wait is on a condition."""

import json
import math
import os
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.optimizers import async_samples
from kuberl_trainer.optimizers.async_samples import AsyncSamplesOptimizer, calls_to_keep_in_flight
from kuberl_trainer.optimizers.learner_thread import LearnerError, LearnerThread
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config, wait_until

ROWS = 10


class MockPolicy:
    """Its weights are its version: the number of batches it has learned on."""

    def __init__(self):
        self.version = 0
        self.learned: list[int] = []
        self.lags: list[float] = []  # the policy_lag of each batch learned on
        self.learning = threading.Event()  # set once a learn call has started
        self.gate: threading.Event | None = None  # when set by a test, learning waits on it
        self.error: Exception | None = None  # when set by a test, learning raises it
        self.learn_s = 0.0  # when set by a test, a learn call takes at least this long
        self.global_timesteps = 0

    def learn_on_batch(self, batch: SampleBatch):
        self.learning.set()
        if self.gate is not None:
            self.gate.wait()
        time.sleep(self.learn_s)
        if self.error is not None:
            raise self.error
        self.learned.append(len(batch))
        self.lags.append(batch.policy_lag)
        self.version += 1
        return {"loss": 1.0}

    def get_weights(self):
        return {"w": np.full(1, self.version, np.float32)}

    def set_global_timesteps(self, timesteps: int):
        self.global_timesteps = timesteps


class MockWorker:
    as_remote = classmethod(RolloutWorker.as_remote.__func__)

    def __init__(self, cpus=None):
        self.policy = MockPolicy()
        self.samples = 0
        self.received: list[int] = []  # versions of the weights set, in order

    def sample(self) -> SampleBatch:
        self.samples += 1
        return SampleBatch({"obs": np.zeros((ROWS, 1), np.float32)}, np.ones(1), np.ones(1, int))

    def set_weights(self, weights, global_timesteps):
        self.received.append(int(weights["w"][0]))

    def get_weights(self):  # the local worker's, for a remote worker that joins later
        return self.policy.get_weights()

    def report(self):
        return self.samples, self.received

    def pid(self):
        return os.getpid()

    def close(self):
        pass


class TimedWorker(MockWorker):
    """Says that each sample call took `sample_s` seconds (it returns at once), `cpu_wait_s` of
    them waiting for a CPU, and hangs in its call number `hang_at` (1, 2, ...) if given."""

    def __init__(
        self,
        sample_s: float,
        cpu_wait_s: float = 0.0,
        hang_at: int | None = None,
        cpus=None,
    ):
        super().__init__(cpus)
        self.sample_s = sample_s
        self.cpu_wait_s = cpu_wait_s
        self.hang_at = hang_at

    def sample(self) -> SampleBatch:
        if self.samples + 1 == self.hang_at:
            threading.Event().wait()
        batch = super().sample()
        batch.sample_s, batch.cpu_wait_s = self.sample_s, self.cpu_wait_s
        return batch


class SpyWorkerSet(WorkerSet):
    """A WorkerSet that logs the traffic through its task pool, in order: ("call", i),
    ("returned", i), ("weights", i, version); and the versions put in the object store."""

    def __init__(self, *args, **kwargs):
        self.log: list[tuple] = []
        self.puts: list[int] = []
        self.max_in_flight = 0
        self._put_versions: dict = {}
        super().__init__(*args, **kwargs)

    def call(self, index, method, *args):
        ref = super().call(index, method, *args)
        self.max_in_flight = max(self.max_in_flight, self.in_flight(index))
        self.log.append(("call", index))
        return ref

    def completed(self, timeout=None, refs=None):
        results = super().completed(timeout, refs)
        self.log += [("returned", index) for index, _ in results]
        return results

    def put_weights(self, weights, global_timesteps):
        ref = super().put_weights(weights, global_timesteps)
        self.puts.append(int(weights["w"][0]))
        self._put_versions[ref] = self.puts[-1]
        return ref

    def send_weights(self, index, weights_ref):
        self.log.append(("weights", index, self._put_versions[weights_ref]))
        super().send_weights(index, weights_ref)


def make_optimizer(num_remote: int, **optimizer_config):
    """PPO's config: no train_batch_size, so every batch is one learner step."""
    config = trainer_config(
        algorithm="PPO", optimizer="AsyncSamples", optimizer_config=optimizer_config
    )
    workers = SpyWorkerSet(MockWorker, lambda index: {}, num_remote, cpus_per_worker=0.5)
    return workers, AsyncSamplesOptimizer(workers, config)


def stopped(workers, optimizer):
    optimizer.stop()
    assert not optimizer.learner.is_alive()
    workers.stop()


def test_local_only_samples_with_the_learners_policy_and_learns_every_batch():
    workers, optimizer = make_optimizer(0)
    try:
        results = [optimizer.step() for _ in range(5)]
        assert optimizer.policy_lock is optimizer.learner.lock
        assert [r.steps_sampled for r in results] == [ROWS] * 5
        wait_until(lambda: optimizer.learner.num_steps == 5, what="the learner to catch up")
        trained = sum(r.steps_trained for r in results) + optimizer.step().steps_trained
        assert 5 * ROWS <= trained == optimizer.counters.steps_trained
        assert optimizer.counters.steps_trained <= optimizer.counters.steps_sampled == 6 * ROWS
        assert workers.local_worker.samples == 6 and not workers.puts  # nothing to broadcast
    finally:
        stopped(workers, optimizer)


def test_calls_stay_in_flight_and_weights_go_only_to_the_worker_that_returned(ray_local):
    workers, optimizer = make_optimizer(2, requests_in_flight_per_worker=3, broadcast_interval=2)
    try:
        all_started(workers)  # worker 2 took the policy as built when it joined: a put of its own
        joined = len(workers.puts)
        sampled = 0
        while optimizer.learner.num_steps < 30:
            sampled += optimizer.step().steps_sampled
        assert workers.max_in_flight == 3  # topped up to the limit, never past it

        last_version: dict[int, int] = {}
        in_flight: Counter = Counter()
        for position, event in enumerate(workers.log):
            kind, index = event[:2]
            in_flight[index] += {"call": 1, "returned": -1}.get(kind, 0)
            if kind == "weights":  # the first, or to a worker that returned a batch
                version = event[2]
                if index in last_version:
                    assert in_flight[index] < 3, workers.log[max(0, position - 10) : position + 1]
                    assert version - last_version[index] >= 2  # broadcast_interval
                last_version[index] = version
        sent = Counter(event[0] for event in workers.log)["weights"]
        assert sent > 2, "no worker ever got fresh weights"
        puts = workers.puts[joined:]
        assert len(puts) == len(set(puts))  # one put per version
        for index, (_, received) in zip((1, 2), workers.foreach_remote("report"), strict=True):
            sent = [e[2] for e in workers.log if e[:2] == ("weights", index)]
            assert received == [0] * (index - 1) + sent
    finally:
        stopped(workers, optimizer)


class WatchedLearner(LearnerThread):
    """A learner thread that notes when the driver tries to put into a full queue."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.put_into_full_queue = threading.Event()

    def put(self, item):
        if self.inqueue.full():
            self.put_into_full_queue.set()
        super().put(item)


def test_a_slow_learner_holds_the_driver_back_at_the_queue_bound(ray_local, monkeypatch):
    monkeypatch.setattr(async_samples, "LearnerThread", WatchedLearner)
    workers, optimizer = make_optimizer(2, learner_queue_size=2)
    policy = workers.local_worker.policy
    policy.gate = threading.Event()
    done = threading.Event()

    def drive():
        while not done.is_set():
            optimizer.step()

    driver = threading.Thread(target=drive)
    try:
        driver.start()
        # Bounds, not waits: starting the two worker actors on a starved machine took over 60 s.
        assert policy.learning.wait(timeout=180), "nothing reached the learner"
        assert optimizer.learner.put_into_full_queue.wait(timeout=180), "the queue never filled"
        # One batch being learned, the queue full, and the driver waiting to put another: it
        # holds at most what one look at the workers returned (their calls in flight).
        assert optimizer.learner.queue_depth == 2
        returned = Counter(event[0] for event in workers.log)["returned"]
        assert returned <= 1 + 2 + 2 * 2
        assert driver.is_alive() and optimizer.learner.num_steps == 0
    finally:
        done.set()
        policy.gate.set()
        driver.join()
        stopped(workers, optimizer)
    assert policy.learned  # released, it learned what was queued


def test_a_failing_learner_surfaces_in_step_instead_of_hanging_it(ray_local):
    workers, optimizer = make_optimizer(2)
    workers.local_worker.policy.error = FloatingPointError("the loss is NaN")
    try:
        with pytest.raises(LearnerError, match="the loss is NaN") as failure:
            for _ in range(100):
                optimizer.step()
        assert isinstance(failure.value.__cause__, FloatingPointError)
    finally:
        stopped(workers, optimizer)


def test_policy_lag_counts_learner_steps_since_the_batchs_weights(ray_local):
    """Weights never refreshed (broadcast_interval past the run): the k-th batch learned was
    sampled with version 0 and learned at version k, so the lag of n batches sums to n(n-1)/2."""
    workers, optimizer = make_optimizer(1, broadcast_interval=1000)
    try:
        results = [optimizer.step() for _ in range(12)]
        learned = [r for r in results if r.steps_trained]
        total_lag = sum(r.learner_stats["policy_lag"] * r.steps_trained / ROWS for r in learned)
        n = optimizer.counters.steps_trained // ROWS
        assert n >= 2 and total_lag == pytest.approx(n * (n - 1) / 2)
        for result in results:
            assert result.learner_stats["learner_queue_depth"] >= 0
            assert 0.0 <= result.learner_stats["learner_utilisation"] <= 1.0
        assert workers.puts == [0]
    finally:
        stopped(workers, optimizer)


def test_a_batch_past_max_policy_lag_is_dropped_and_counted(ray_local):
    """Weights never refreshed: the worker samples with version 0 throughout, so the k-th batch
    learned lags k steps. With maxPolicyLag 3, four batches are learned on (lags 0-3) and every
    later one is dropped; dropping changes no weights, so the lag stays 4 and none is learned."""
    workers, optimizer = make_optimizer(1, broadcast_interval=1000, max_policy_lag=3)
    try:
        results, dropped = [], 0
        while dropped < 3:
            results.append(optimizer.step())
            dropped += results[-1].learner_stats["stale_batches_dropped"]
        stats = [r.learner_stats for r in results]
        assert workers.local_worker.policy.learned == [ROWS] * 4
        assert optimizer.version == 4 and optimizer.counters.steps_trained == 4 * ROWS
        lagged = [s for s in stats if "policy_lag" in s]  # steps in which a batch was learned
        assert max(s["policy_lag_max"] for s in lagged) == 3  # never the lag of a dropped batch
        assert all(s["policy_lag"] <= s["policy_lag_p90"] <= s["policy_lag_max"] for s in lagged)
    finally:
        stopped(workers, optimizer)


def test_only_the_stale_batches_of_a_train_batch_are_cut_out():
    config = trainer_config(
        algorithm="IMPALA",
        hyperparameters={"train_batch_size": 3 * ROWS},
        optimizer_config={"max_policy_lag": 3},
    )
    workers = WorkerSet(MockWorker, lambda index: {}, 0)
    optimizer = AsyncSamplesOptimizer(workers, config)
    try:
        optimizer.version = 10
        sampled = [(MockWorker().sample(), version) for version in (6, 9, 10)]  # lags 4, 1, 0
        with optimizer.learner.lock:
            learned = optimizer._learn(async_samples.train_batch(sampled))
        assert (learned.lags, learned.rows, learned.dropped) == ([1, 0], 2 * ROWS, 1)
        assert workers.local_worker.policy.learned == [2 * ROWS]
        assert workers.local_worker.policy.lags == [0.5]  # the kept calls' mean
        assert optimizer.version == 11 and optimizer._published[1] == 11
        with optimizer.learner.lock:
            all_stale = optimizer._learn(async_samples.train_batch(sampled[:1]))
        assert (all_stale.lags, all_stale.rows, all_stale.dropped) == ([], 0, 1)
        assert optimizer.version == 11  # nothing learned: the weights are what they were
    finally:
        stopped(workers, optimizer)


def test_the_lag_distribution_is_over_the_batches_learned_on():
    """Lags of 0, 1, ..., 9 in one step: mean 4.5, p90 8.1 (numpy's linear interpolation),
    max 9; the two dropped batches are counted, and neither lag nor stats include them."""
    workers, optimizer = make_optimizer(0, max_policy_lag=9)
    learned = [
        async_samples._Learned({"loss": float(lag)}, [lag], ROWS, 0) for lag in range(10)
    ] + [async_samples._Learned({}, [], 0, 2)]
    optimizer.learner.results = lambda: learned
    try:
        stats = optimizer.step().learner_stats
        assert (stats["policy_lag"], stats["policy_lag_max"]) == (4.5, 9.0)
        assert stats["policy_lag_p90"] == pytest.approx(8.1)
        assert stats["stale_batches_dropped"] == 2 and stats["loss"] == 4.5
    finally:
        stopped(workers, optimizer)


def test_the_driver_reports_stale_batches_in_the_row_and_the_counter(ray_local, tmp_path):
    config = trainer_config(
        algorithm="IMPALA",
        stop={"timesteps": 1_500},
        hyperparameters={"rollout_length": 32, "train_batch_size": 128},
        optimizer_config={"broadcast_interval": 1000, "max_policy_lag": 2},
    )
    rollout = RolloutConfig(replicas=1, envs_per_worker=4, cpus_per_worker=0.5)
    driver = Driver(config, rollout, tmp_path, "job")
    driver.run()
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    dropped = sum(row["stale_batches_dropped"] for row in rows)
    assert dropped > 0
    assert max(row.get("policy_lag_max", 0) for row in rows) <= 2
    labels = {"namespace": "local", "rljob": "job", "algorithm": "IMPALA"}
    assert (
        driver.metrics.registry.get_sample_value("kuberl_stale_batches_dropped_total", labels)
        == dropped
    )


def test_batches_are_concatenated_up_to_the_train_batch_size(ray_local):
    config = trainer_config(algorithm="IMPALA", hyperparameters={"train_batch_size": 3 * ROWS})
    workers = WorkerSet(MockWorker, lambda index: {}, 2, cpus_per_worker=0.5)
    optimizer = AsyncSamplesOptimizer(workers, config)
    try:
        while optimizer.learner.num_steps < 4:
            optimizer.step()
        assert set(workers.local_worker.policy.learned) == {3 * ROWS}
        assert optimizer.counters.steps_trained % (3 * ROWS) == 0
        assert optimizer.counters.steps_trained <= optimizer.counters.steps_sampled
    finally:
        stopped(workers, optimizer)


def test_a_killed_worker_is_replaced_and_sampling_goes_on(ray_local):
    workers, optimizer = make_optimizer(2)
    try:
        optimizer.step()
        victim = workers.remote_workers[0]
        os.kill(ray_local.get(victim.pid.remote()), signal.SIGKILL)
        wait_until(
            lambda: optimizer.step() and workers.restarts == 1 and len(workers.remote_workers) == 2,
            timeout=120,
            what="the replacement worker",
        )
        # the replacement samples with the learner's weights, which it got before its first call
        before = optimizer.counters.steps_sampled
        wait_until(
            lambda: optimizer.step() and all(s > 0 for s, _ in workers.foreach_remote("report")),
            timeout=60,
            what="the replacement to sample",
        )
        assert optimizer.counters.steps_sampled > before
        assert workers.restarts == 1
    finally:
        stopped(workers, optimizer)


@pytest.mark.parametrize(
    "algorithm, optimizer, replicas",
    [("PPO", "AsyncSamples", 1), ("IMPALA", "SyncSamples", 0), ("APPO", "SyncSamples", 0)],
)
def test_the_swapped_pairs_train(ray_local, tmp_path, algorithm, optimizer, replicas):
    """PPO on AsyncSamples (its ratio against the behaviour policy the worker recorded), and
    IMPALA and APPO on SyncSamples (V-trace on on-policy batches), through the driver."""
    config = trainer_config(
        algorithm=algorithm,
        optimizer=optimizer,
        stop={"timesteps": 2_000},
        hyperparameters={"rollout_length": 32},
    )
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=4, cpus_per_worker=0.5)
    result = Driver(config, rollout, tmp_path, "job").run()
    assert result.stopped_by == "timesteps>=2000"
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert sum(row["timesteps_trained_this_iter"] for row in rows) > 0
    assert all(math.isfinite(row["entropy"]) for row in rows if "entropy" in row)


def test_workers_start_from_the_policy_as_restored(ray_local):
    """The driver restores a checkpoint into the policy after building the optimizer: the first
    weights the workers get are the restored ones."""
    workers, optimizer = make_optimizer(1)
    try:
        workers.local_worker.policy.version = 7
        optimizer.step()
        assert workers.puts[0] == 7
    finally:
        stopped(workers, optimizer)


def test_a_resumed_run_continues_from_the_checkpointed_counters(ray_local, tmp_path):
    """Only the counters are checkpointed: batches queued or in flight are sampled again."""
    rollout = RolloutConfig(replicas=1, envs_per_worker=4, cpus_per_worker=0.5)
    for timesteps in (1_000, 2_000):
        config = trainer_config(
            algorithm="IMPALA",
            stop={"timesteps": timesteps},
            hyperparameters={"rollout_length": 32, "train_batch_size": 128},
        )
        result = Driver(config, rollout, tmp_path, "job").run()
        assert result.stopped_by == f"timesteps>={timesteps}"
    assert result.resumed_from is not None
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["timesteps_total"] == result.timesteps >= 2_000


@pytest.mark.parametrize(
    ("sample_s", "learn_s", "calls_per_step", "capacity", "calls"),
    [
        (0.005, 0.010, 1, 12, 2),  # sampling outpaces the learner: a step's calls, plus one
        (0.025, 0.010, 1, 12, 4),
        (0.025, 0.010, 2.5, 12, 10),  # train batches of several calls
        (1.000, 0.010, 1, 12, 12),  # slow envs: every worker samples
        (0.005, 0.0, 1, 12, 12),
        (0.0, 0.010, 0.5, 12, 1),
    ],
)
def test_the_calls_kept_in_flight_are_what_the_learner_takes_while_one_samples(
    sample_s, learn_s, calls_per_step, capacity, calls
):
    assert calls_to_keep_in_flight(sample_s, learn_s, calls_per_step, capacity) == calls


@pytest.mark.parametrize(
    ("sample_s", "cpu_wait_s", "most_in_flight"), [(0.01, 0.0, 2), (10.0, 0.0, 6), (10.0, 9.99, 2)]
)
def test_workers_sample_only_as_much_as_the_learner_takes(
    ray_local, sample_s, cpu_wait_s, most_in_flight
):
    """Learn calls of at least 50 ms: calls that sample in 10 ms are kept to 2 in flight (one
    learner step's worth while one samples, plus one), so that batches do not wait their turn
    behind 6 workers' others; calls that sample for 10 s keep all 6 workers sampling, unless
    all but 10 ms of them went on waiting for a CPU: on oversubscribed CPUs more calls would
    only wait longer. A worker's first call, made while it starts, is not counted (the actor
    may take long to start). The calls kept go to the workers that returned last, so no more
    workers sample than calls are in flight: the same few go on, their envs' episodes ending as
    fast as they can."""
    config = trainer_config(algorithm="PPO", optimizer="AsyncSamples")
    timing = {"sample_s": sample_s, "cpu_wait_s": cpu_wait_s}
    workers = SpyWorkerSet(TimedWorker, lambda index: timing, 6, 0.25)
    optimizer = AsyncSamplesOptimizer(workers, config)
    workers.local_worker.policy.learn_s = 0.05

    def returned() -> set[int]:
        return {event[1] for event in workers.log if event[0] == "returned"}

    try:
        # Past the start, when every worker samples, and until every actor has started (under
        # load some take far longer than others): a bound, not a wait.
        deadline = time.monotonic() + 300
        while optimizer.learner.num_steps < 15 or len(returned()) < 6:
            assert time.monotonic() < deadline, f"workers {sorted(returned())} of 6 started"
            optimizer.step()
        settled, steps = len(workers.log), optimizer.learner.num_steps
        while optimizer.learner.num_steps < steps + 15:
            optimizer.step()
        started: set[int] = set()
        in_flight, most = 0, 0
        sampling: set[int] = set()  # the workers that returned batches once settled
        for position, (kind, index, *_) in enumerate(workers.log):
            if kind == "returned" and index not in started:
                started.add(index)  # its first call, made while it started
            elif index in started:
                in_flight += {"call": 1, "returned": -1}.get(kind, 0)
            if position >= settled:
                most = max(most, in_flight)
                if kind == "returned":
                    sampling.add(index)
        assert most == most_in_flight
        assert len(sampling) <= most
    finally:
        stopped(workers, optimizer)


def test_workers_go_on_sampling_while_others_hang(ray_local):
    """Two of three workers hang in their third call. Calls that sample in 10 ms, learned on in
    at least 50 ms, are kept to 2 in flight: the two hung ones would hold them all if they counted
    for ever. They count for 1 s, and the third worker samples on."""
    config = trainer_config(algorithm="PPO", optimizer="AsyncSamples")
    workers = SpyWorkerSet(
        TimedWorker, lambda index: {"sample_s": 0.01, "hang_at": 3 if index < 3 else None}, 3, 0.5
    )
    optimizer = AsyncSamplesOptimizer(workers, config)
    workers.local_worker.policy.learn_s = 0.05
    driver = threading.Thread(target=lambda: [optimizer.step() for _ in range(10)], daemon=True)
    try:
        driver.start()
        driver.join(timeout=180)  # a bound, not a wait: it ends as soon as the steps are done
        assert not driver.is_alive(), "sampling stopped while two workers hung"
        returned = Counter(event[1] for event in workers.log if event[0] == "returned")
        assert returned[1] == returned[2] == 2 and returned[3] >= 26  # 10 steps of 3 batches
    finally:
        stopped(workers, optimizer)
