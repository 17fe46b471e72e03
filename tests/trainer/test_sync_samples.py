"""SyncSamples' control flow against mock workers (RLlib's mock_evaluator habit): what is
broadcast, sampled and learned per step, locally and through real Ray actors."""

import logging
import os
import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kuberl_trainer.optimizers.sync_samples import SyncSamplesOptimizer
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started

ROWS = 10


class MockPolicy:
    def __init__(self):
        self.learned: list[int] = []
        self.weights = {"w": np.zeros(3, np.float32)}
        self.global_timesteps = 0

    def learn_on_batch(self, batch: SampleBatch):
        self.learned.append(len(batch))
        self.weights = {"w": self.weights["w"] + 1}
        return {"loss": 1.0}

    def set_global_timesteps(self, timesteps: int):
        self.global_timesteps = timesteps


class MockWorker:
    as_remote = classmethod(RolloutWorker.as_remote.__func__)

    def __init__(self, cpus=None):
        self.policy = MockPolicy()
        self.calls: Counter = Counter()
        self.received: list[tuple[float, int]] = []

    def sample(self) -> SampleBatch:
        self.calls["sample"] += 1
        return SampleBatch({"obs": np.zeros((ROWS, 1), np.float32)}, np.ones(1), np.ones(1, int))

    def set_weights(self, weights, global_timesteps):
        self.calls["set_weights"] += 1
        self.received.append((float(weights["w"][0]), global_timesteps))

    def get_weights(self):
        self.calls["get_weights"] += 1
        return self.policy.weights

    def pid(self):
        return os.getpid()

    def report(self):
        return dict(self.calls), self.received

    def close(self):
        pass


def test_local_only_samples_and_learns_once_per_step_without_broadcasting():
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=0)
    optimizer = SyncSamplesOptimizer(workers, config=None)
    for _ in range(3):
        result = optimizer.step()
    local = workers.local_worker
    assert local.calls == Counter(sample=3)
    assert local.policy.learned == [ROWS] * 3
    assert optimizer.counters.steps_sampled == optimizer.counters.steps_trained == 3 * ROWS
    assert local.policy.global_timesteps == 2 * ROWS  # told before the third step
    assert result.episode_returns.tolist() == [1.0]


def test_remote_workers_get_one_broadcast_and_one_sample_call_per_step(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        optimizer = SyncSamplesOptimizer(workers, config=None)
        for _ in range(3):
            result = optimizer.step()
        local = workers.local_worker
        # one get_weights → one ray.put per step, however many workers there are (and one for
        # worker 2, which joined once worker 1 had started)
        assert local.calls == Counter(get_weights=1 + 3)
        assert local.policy.learned == [2 * ROWS] * 3  # the batches of both workers, together
        for index, (calls, received) in enumerate(workers.foreach_remote("report"), 1):
            joined = index > 1  # started once worker 1 had: it took the weights as it joined
            assert calls == {"set_weights": 3 + joined, "sample": 3}
            # step k broadcasts the weights after k updates and the steps sampled so far
            assert received == [(0.0, 0)] * joined + [(0.0, 0), (1.0, 2 * ROWS), (2.0, 4 * ROWS)]
        assert result.steps_sampled == 2 * ROWS
        assert optimizer.counters.steps_sampled == 6 * ROWS
    finally:
        workers.stop()


@pytest.mark.parametrize(
    "replicas, cpus, needle", [(3, 1.0, "3 replicas x 1 CPUs"), (1, 4.0, "largest")]
)
def test_unsatisfiable_worker_requests_fail_fast(ray_local, replicas, cpus, needle):
    from kuberl_trainer.rollouts.resources import ResourceError

    with pytest.raises(ResourceError, match=needle):
        WorkerSet(MockWorker, lambda index: {}, num_remote=replicas, cpus_per_worker=cpus)


class FlakyWorker(MockWorker):
    """A worker that cannot start while the file `marker` exists (a node without capacity, an
    image that does not pull)."""

    def __init__(self, marker: str, cpus=None):
        if Path(marker).exists():
            raise RuntimeError("cannot start")
        super().__init__(cpus)


def test_replacements_that_fail_to_start_are_retried_without_counting_again(
    ray_local, tmp_path, caplog
):
    marker = tmp_path / "no-capacity"
    workers = WorkerSet(FlakyWorker, lambda index: {"marker": str(marker)}, 1, cpus_per_worker=0.5)
    try:
        optimizer = SyncSamplesOptimizer(workers, config=None)
        optimizer.step()
        marker.touch()
        os.kill(ray_local.get(workers.remote_workers[0].pid.remote()), signal.SIGKILL)

        # The worker is lost and its replacement fails to start: the local worker samples
        # meanwhile. (The replacement that joins below is the retry.)
        deadline = time.monotonic() + 300  # the condition ends the wait: a busy machine is slow
        with caplog.at_level(logging.WARNING, logger="kuberl_trainer.rollouts.worker_set"):
            while "starting rollout worker 1 failed" not in caplog.text:
                assert time.monotonic() < deadline, "no replacement was ever started"
                assert optimizer.step().steps_sampled == ROWS
        assert workers.restarts == 1 and not workers.remote_workers

        marker.unlink()  # capacity is back: the next replacement joins
        deadline = time.monotonic() + 300
        while not workers.remote_workers:
            assert time.monotonic() < deadline, "the replacement never became ready"
            optimizer.step()
        assert workers.restarts == 1
    finally:
        workers.stop()
