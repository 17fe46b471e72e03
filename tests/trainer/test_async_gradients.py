"""AsyncGradients' control flow against mock workers through real Ray actors: each gradient is
applied once, fresh weights go back only to the worker whose gradient was applied, and the calls
in flight per worker stay bounded."""

import time
from collections import Counter

import numpy as np
import pytest
from mock_worker import MockWorker

from kuberl_trainer.optimizers.async_gradients import AsyncGradientsOptimizer
from kuberl_trainer.rollouts.rollout_worker import Gradients
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config

ROWS = 10


class MockPolicy:
    def __init__(self):
        self.applied: list[tuple[int, int]] = []  # (worker, call) of every gradient applied
        self.global_timesteps = 0

    def apply_gradients(self, gradients):
        self.applied.append(tuple(int(x) for x in gradients[0]))

    def get_weights(self):
        return {"w": np.array([len(self.applied)], np.float32)}  # the version: gradients applied

    def set_global_timesteps(self, timesteps):
        self.global_timesteps = timesteps


class GradientWorker(MockWorker):
    def __init__(self, index, cpus=None):
        super().__init__(index, MockPolicy())

    def compute_gradients(self) -> Gradients:
        self.calls += 1
        # The gradient names its worker and call; the weights it was computed on come along.
        gradients = [np.array([self.index, self.calls])]
        version = self.received[-1] if self.received else -1
        return Gradients(gradients, {"loss": version}, ROWS, np.ones(1), np.ones(1, int))


class CountingWorkerSet(WorkerSet):
    """Records the most calls ever in flight on each worker."""

    def __init__(self, *args, **kwargs):
        self.most_in_flight: Counter = Counter()
        super().__init__(*args, **kwargs)

    def call(self, index, method, *args):
        ref = super().call(index, method, *args)
        self.most_in_flight[index] = max(self.most_in_flight[index], self.in_flight(index))
        return ref


def config(requests_in_flight: int):
    return trainer_config(
        algorithm="A3C", optimizerConfig={"requestsInFlightPerWorker": requests_in_flight}
    )


def test_local_only_computes_and_applies_in_turn():
    workers = WorkerSet(GradientWorker, lambda index: {"index": index}, num_remote=0)
    optimizer = AsyncGradientsOptimizer(workers, config(1))
    for _ in range(3):
        result = optimizer.step()
    assert workers.local_worker.policy.applied == [(0, 1), (0, 2), (0, 3)]
    assert result.steps_sampled == result.steps_trained == ROWS
    assert optimizer.counters.steps_sampled == 3 * ROWS
    assert result.learner_stats["policy_lag"] == 0


@pytest.mark.parametrize("requests_in_flight", [1, 2])
def test_each_gradient_is_applied_once_and_answered_with_weights_to_its_worker_only(
    ray_local, requests_in_flight
):
    workers = CountingWorkerSet(
        GradientWorker, lambda index: {"index": index}, num_remote=2, cpus_per_worker=0.5
    )
    try:
        all_started(workers)
        optimizer = AsyncGradientsOptimizer(workers, config(requests_in_flight))
        for _ in range(10):
            # At least one gradient per worker: every one that has arrived is applied.
            assert optimizer.step().steps_sampled >= 2 * ROWS
        applied = workers.local_worker.policy.applied
        assert len(applied) == len(set(applied))  # each gradient applied exactly once
        assert len(applied) * ROWS == optimizer.counters.steps_sampled
        assert workers.most_in_flight == {1: requests_in_flight, 2: requests_in_flight}

        for index, calls, received in workers.foreach_remote("report"):
            # The start's broadcast (version 0; worker 2, started once worker 1 had, took it as it
            # joined too), then after each of its own gradients the version that gradient made,
            # and nothing after anyone else's.
            own = [version for version, (w, _) in enumerate(applied, start=1) if w == index]
            assert received == [0] * index + own
            # Its gradients were applied in the order it computed them; the calls beyond them
            # are still in flight.
            assert [c for w, c in applied if w == index] == list(range(1, len(own) + 1))
            assert calls - len(own) == requests_in_flight
    finally:
        workers.stop()


@pytest.mark.parametrize("requests_in_flight", [1, 2])
def test_policy_lag_counts_the_gradients_applied_since_a_workers_weights(
    ray_local, requests_in_flight
):
    workers = WorkerSet(
        GradientWorker, lambda index: {"index": index}, num_remote=2, cpus_per_worker=0.5
    )
    try:
        all_started(workers)  # neither's gradients wait for its process; both hold the weights
        optimizer = AsyncGradientsOptimizer(workers, config(requests_in_flight))
        applied = workers.local_worker.policy.applied
        lags = []
        # Until both workers' gradients were applied. The later one's first gradient was computed
        # on the weights both started with and applied after the other's, so its lag is at least
        # 1. On a busy machine one worker may answer every call of several steps first.
        deadline = time.monotonic() + 300
        while len(lags) < 6 or len({worker for worker, _ in applied}) < 2:
            assert time.monotonic() < deadline, f"one worker's gradients only: {applied}"
            before = optimizer.counters.steps_sampled // ROWS  # gradients applied so far
            result = optimizer.step()
            count = result.steps_sampled // ROWS
            # The mock's loss is the weights version it computed on; a gradient's lag is the
            # number applied before it minus that version.
            applied_before = before + (count - 1) / 2  # the mean over the step's gradients
            lag = result.learner_stats["policy_lag"]
            assert lag == pytest.approx(applied_before - result.learner_stats["loss"])
            lags.append(lag)
        assert max(lags) > 0  # a mean over each step's gradients
    finally:
        workers.stop()


@pytest.mark.parametrize("algorithm", ["PG", "A2C", "A3C"])
def test_real_policies_train_on_async_gradients_without_remote_workers(tmp_path, algorithm):
    from kuberl_contract.config import RolloutConfig
    from kuberl_trainer.job.driver import Driver

    optimizer = {} if algorithm == "A3C" else {"optimizer": "AsyncGradients"}
    config = trainer_config(algorithm=algorithm, stop={"iterations": 3}, **optimizer)
    result = Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()
    # 3 iterations of 2 envs x rollout_length steps; the steps that only reset an env count as none
    steps = 3 * 2 * config.hyperparameters.rollout_length
    assert 0.8 * steps <= result.timesteps <= steps
