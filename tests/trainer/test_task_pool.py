"""The WorkerSet's task pool with real Ray actors: calls in flight per worker, results as they
finish, and a dead worker's calls dropped with the worker replaced and counted."""

import os
import signal

from test_sync_samples import ROWS, MockWorker

from kuberl_trainer.worker_set import WorkerSet
from testkit import wait_until


def test_results_come_back_with_their_worker_and_leave_the_pool(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
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
        ref = workers.put_weights(workers.local_worker.get_weights(), global_timesteps=7)
        workers.send_weights(2, ref)
        (calls_1, received_1), (calls_2, received_2) = workers.foreach_remote("report")
        assert (calls_1, received_1) == ({}, [])
        assert (calls_2, received_2) == ({"set_weights": 1}, [(0.0, 7)])
    finally:
        workers.stop()


def test_a_dead_workers_calls_are_dropped_and_it_is_replaced_once(ray_local):
    workers = WorkerSet(MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5)
    try:
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
        assert replacement[0][0] == 1
        assert victim not in ray_local.get([w.pid.remote() for w in workers.remote_workers])
    finally:
        workers.stop()
