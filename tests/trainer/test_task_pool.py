"""The WorkerSet's task pool with real Ray actors: calls in flight per worker, results as they
finish, a dead worker's calls dropped with the worker replaced and counted, and no more workers
starting at once than the Ray cluster has CPUs to spare."""

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from test_sync_samples import ROWS, MockWorker

from kuberl_trainer.rollouts.worker_pool import WorkerPool
from kuberl_trainer.rollouts.worker_set import WorkerSet, startup_slots
from testkit import all_started, wait_until


def test_results_come_back_with_their_worker_and_leave_the_pool(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        assert workers.healthy_indices == [1, 2]
        for index in (1, 2, 2):
            workers.call(index, "sample")
        assert [workers.in_flight(1), workers.in_flight(2)] == [1, 2]

        results = []
        wait_until(
            lambda: results.extend(workers.completed(timeout=1)) or len(results) == 3, timeout=90
        )
        assert sorted(index for index, _ in results) == [1, 2, 2]
        assert all(len(batch) == ROWS for _, batch in results)
        assert [workers.in_flight(1), workers.in_flight(2)] == [0, 0]
        assert workers.completed(timeout=0) == []  # nothing in flight: returns at once
    finally:
        workers.stop()


def test_weights_go_to_the_named_worker_only(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        ref = workers.put_weights(workers.local_worker.get_weights(), global_timesteps=7)
        workers.send_weights(2, ref)
        (calls_1, received_1), (calls_2, received_2) = workers.foreach_remote("report")
        assert (calls_1, received_1) == ({}, [])
        # Worker 2 joined once worker 1 had started, with the weights as they were.
        assert (calls_2, received_2) == ({"set_weights": 2}, [(0.0, 0), (0.0, 7)])
    finally:
        workers.stop()


def test_a_dead_workers_calls_are_dropped_and_it_is_replaced_once(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        victim = ray_local.get(workers.remote_workers[0].pid.remote())
        os.kill(victim, signal.SIGKILL)
        workers.call(1, "sample")
        workers.call(1, "sample")
        workers.call(2, "sample")

        results = []
        wait_until(
            lambda: results.extend(workers.completed(timeout=1)) or workers.in_flight(1) == 0,
            timeout=90,
            what="the dead worker's calls to be dropped",
        )
        wait_until(lambda: results.extend(workers.completed(timeout=1)) or results, timeout=90)
        assert [index for index, _ in results] == [2]
        assert workers.restarts == 1  # one worker lost, however many calls it had

        wait_until(lambda: 1 in workers.healthy_indices, timeout=60, what="the replacement")
        workers.call(1, "sample")
        replacement = []
        wait_until(
            lambda: replacement.extend(workers.completed(timeout=1)) or replacement, timeout=90
        )
        assert replacement[0].worker == 1
        assert victim not in ray_local.get([w.pid.remote() for w in workers.remote_workers])
    finally:
        workers.stop()


class GatedWorker(MockWorker):
    """A remote worker that says it is starting (gate/started-<index>) and then starts only
    once the test lets it (gate/go-<index>): a start-up as slow as the test wants."""

    def __init__(self, gate: str, index: int, cpus=None):
        super().__init__(cpus)
        if index:  # 0 is the driver's local worker
            (Path(gate) / f"started-{index}").touch()
            wait_until(lambda: (Path(gate) / f"go-{index}").exists(), timeout=300)


@pytest.fixture
def launched(monkeypatch) -> list[int]:
    """The order in which the worker pool starts remote workers' actors."""
    order: list[int] = []
    init = WorkerPool.__init__

    def recording(pool: WorkerPool, start_actor, *args, **kwargs) -> None:
        def start(index: int):
            order.append(index)
            return start_actor(index)

        init(pool, start, *args, **kwargs)

    monkeypatch.setattr(WorkerPool, "__init__", recording)
    return order


def test_workers_start_one_at_a_time_where_the_learner_shares_two_cpus(
    ray_local, tmp_path, launched
):
    # ray_local: the driver's node with 2 CPUs, one of them the learner's. So 1 of the 5 workers
    # starts, and each further one once the one before has started.
    workers = WorkerSet(GatedWorker, lambda index: {"gate": str(tmp_path), "index": index}, 5, 0.25)
    try:
        assert launched == [1]
        assert workers.num_remote == 5  # an iteration still counts on all 5
        assert workers.healthy_indices == [1]  # the first step waits for its batch
        wait_until(lambda: (tmp_path / "started-1").exists(), timeout=120)
        assert workers.healthy_indices == [1] and launched == [1]

        (tmp_path / "go-1").touch()
        wait_until(lambda: workers.healthy_indices == [1] and launched == [1, 2], 120)

        # Worker 2 took the weights as its first call; new ones follow it once it has started.
        workers.put_weights({"w": np.ones(3, np.float32)}, global_timesteps=5)
        (tmp_path / "go-2").touch()
        wait_until(lambda: workers.healthy_indices == [1, 2], timeout=120)
        assert launched == [1, 2, 3]  # the next starts as one joins
        assert workers.foreach_remote("report")[1][1] == [(0.0, 0), (1.0, 5)]

        for index in (3, 4, 5):
            (tmp_path / f"go-{index}").touch()
        wait_until(lambda: workers.healthy_indices == [1, 2, 3, 4, 5], timeout=120)
        # Those that started after the new weights took only them.
        reports = workers.foreach_remote("report")
        assert [calls.get("set_weights") for calls, _ in reports] == [None, 2, 1, 1, 1]
        assert {tuple(received) for _, received in reports[2:]} == {((1.0, 5),)}
        assert workers.num_remote == 5 and workers.restarts == 0
    finally:
        workers.stop()


def test_workers_start_in_the_order_given(ray_local, launched):
    workers = WorkerSet(MockWorker, lambda index: {}, 3, 0.25, start_order=[3, 1, 2])
    try:
        assert workers.healthy_indices == [3] and workers.num_remote == 3
        all_started(workers)
        assert launched == [3, 1, 2] and sorted(workers.healthy_indices) == [1, 2, 3]
    finally:
        workers.stop()


def test_as_many_workers_start_at_once_as_cpus_not_the_learners():
    assert startup_slots(cluster_cpus=2, driver_node_cpus=2) == 1  # a laptop's local Ray
    assert startup_slots(cluster_cpus=1, driver_node_cpus=1) == 1
    assert startup_slots(cluster_cpus=12, driver_node_cpus=0) == 12  # a head without CPUs
    assert startup_slots(cluster_cpus=16.5, driver_node_cpus=4) == 15
    assert startup_slots(cluster_cpus=0, driver_node_cpus=0) == 1
