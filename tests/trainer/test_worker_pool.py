"""The worker pool's events through real Ray actors: a worker joins, its calls complete with the
tags they were made with, a killed worker is lost with the tags of its calls dropped, and its
replacement joins holding the newest weights. Every wait is on a condition."""

import os
import signal
import time

import numpy as np
from test_sync_samples import MockWorker

from kuberl_trainer.rollouts.pool_events import Completed, Joined, Lost
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import wait_until


class NappingWorker(MockWorker):
    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def gather_events(workers: WorkerSet, until, what: str) -> list:
    """Events read until `until(events)` holds, in order."""
    events: list = []

    def seen():
        _ = workers.healthy_indices  # where joins are noticed, as in an optimizer's loop
        events.extend(workers.events(timeout=0.1))
        return until(events)

    wait_until(seen, timeout=120, what=what)
    return events


def test_events_report_a_join_tagged_completions_and_a_loss_with_its_dropped_calls(ray_local):
    workers = WorkerSet(NappingWorker, lambda index: {}, num_remote=1, cpus_per_worker=0.5)
    try:
        assert workers.events() == [Joined(1)]  # started first: it takes calls at once
        workers.call_tagged(1, "first", "nap", 0.0)
        workers.call_tagged(1, "second", "nap", 0.0)
        done = gather_events(workers, lambda e: len(e) == 2, "both calls")
        assert [(e.worker, e.tag) for e in done] == [(1, "first"), (1, "second")]
        assert all(isinstance(e, Completed) and e.result == 0.0 for e in done)
        assert workers.in_flight(1) == 0

        pid = ray_local.get(workers.remote_workers[0].pid.remote())
        workers.call_tagged(1, "lost", "nap", 600.0)
        os.kill(pid, signal.SIGKILL)
        lost = gather_events(workers, lambda e: any(isinstance(x, Lost) for x in e), "the loss")
        assert lost == [Lost(1, ("lost",))]
        assert workers.restarts == 1 and workers.in_flight(1) == 0 and workers.num_ready == 0

        joined = gather_events(workers, lambda e: Joined(1) in e, "the replacement")
        assert joined == [Joined(1)] and workers.num_ready == 1 and workers.downtime_s > 0
    finally:
        workers.stop()


def test_a_replacement_joins_with_the_weights_put_last_and_the_broadcaster_knows_it(ray_local):
    workers = WorkerSet(NappingWorker, lambda index: {}, num_remote=1, cpus_per_worker=0.5)
    try:
        assert workers.events() == [Joined(1)]
        workers.offer_weights(1, 3, lambda: {"w": np.full(1, 3.0, np.float32)}, 100)
        assert workers.broadcaster.held == {1: 3}
        assert workers.broadcaster.is_put(3)
        os.kill(ray_local.get(workers.remote_workers[0].pid.remote()), signal.SIGKILL)
        workers.call(1, "nap", 0.0)  # the call that finds it dead
        gather_events(workers, lambda e: Joined(1) in e, "the replacement")
        assert workers.broadcaster.held == {1: 3}  # what its first call set
        (_, received), *_ = workers.foreach_remote("report")
        assert received == [(3.0, 100)]
    finally:
        workers.stop()
