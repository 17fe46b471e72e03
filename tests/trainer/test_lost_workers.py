"""The WorkerSet after its remote workers are lost (their nodes preempted): the local worker samples
while none is ready, replacements that cannot be placed yet hold nothing up and join once a node
has room, the time without them is measured, and a stop request ends any wait on them. Every
optimizer keeps stepping while no remote worker is ready."""

import os
import signal
import threading
import time

import pytest
import ray
from test_metrics import row
from test_placement import ray_spot  # noqa: F401 (a fixture: Ray advertising two units of spot)
from test_sync_samples import MockWorker

from kuberl_contract.progress_row import (
    METRIC_WORKER_DOWNTIME,
    METRIC_WORKERS_READY,
    WORKER_DOWNTIME_S,
    WORKERS_READY,
)
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.metrics import TrainerMetrics
from kuberl_trainer.rollouts.interrupt import IterationAbandoned
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config, wait_until


@ray.remote(num_cpus=0, resources={"spot": 1})
class SpotHolder:
    """Holds a unit of `spot`, as another job's pod would hold a spot node's room."""

    def ready(self) -> bool:
        return True


def hold_freed_spot() -> ray.actor.ActorHandle:
    """Take the unit of spot a killed worker frees, once Ray has freed it."""
    holder = SpotHolder.remote()
    ray.get(holder.ready.remote(), timeout=60)
    return holder


def test_local_worker_samples_while_replacements_wait_for_room_then_they_join(ray_spot):  # noqa: F811
    workers = WorkerSet(
        MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5, ray_resources={"spot": 1}
    )
    local = workers.local_worker
    holders = []
    try:
        all_started(workers)
        assert len(workers.sample()) == 2 and local.calls["sample"] == 0
        assert workers.downtime_s == 0
        for pid in workers.foreach_remote("pid"):  # both "nodes" lost, their room taken
            os.kill(pid, signal.SIGKILL)
            holders.append(hold_freed_spot())

        # Both calls fail, both replacements wait for room: the local worker samples instead.
        assert len(workers.sample()) == 1 and local.calls["sample"] == 1
        assert workers.restarts == 2 and workers.num_remote == 2 and workers.num_ready == 0
        assert workers.healthy_indices == []
        for expected in (2, 3):  # never waiting on the replacements
            assert len(workers.sample()) == 1 and local.calls["sample"] == expected
        down = workers.downtime_s
        assert down > 0
        wait_until(lambda: workers.downtime_s > down, what="downtime to grow while none is back")

        ray.kill(holders.pop())  # room for one replacement
        wait_until(lambda: workers.num_ready == 1, timeout=60, what="a replacement to join")
        assert len(workers.sample()) == 1 and local.calls["sample"] == 3  # a remote batch
        ray.kill(holders.pop())
        wait_until(lambda: workers.num_ready == 2, timeout=60, what="the other to join")
        assert len(workers.sample()) == 2 and local.calls["sample"] == 3
        assert workers.restarts == 2  # replacements are not new losses
        down = workers.downtime_s
        assert workers.sample() and workers.downtime_s == down  # no outage goes on
    finally:
        for holder in holders:
            ray.kill(holder)
        workers.stop()


class SlowMockWorker(MockWorker):
    def sample(self):
        time.sleep(600)  # a slow env, or a node that died without Ray having noticed yet


def test_a_stop_request_ends_a_wait_on_remote_workers(ray_local):
    workers = WorkerSet(SlowMockWorker, lambda index: {}, num_remote=1, cpus_per_worker=0.5)
    try:
        requested = threading.Timer(1.0, workers.stop_request.request)
        requested.start()
        began = time.monotonic()
        with pytest.raises(IterationAbandoned):
            workers.sample()
        assert time.monotonic() - began < 60  # not the 600 s the batch would take
    finally:
        requested.cancel()
        workers.stop()


class NoneReady(WorkerSet):
    """Two remote workers asked for and none ready, as after losing every spot node while no new
    one has joined (built with none, so that no actor starts)."""

    @property
    def num_remote(self) -> int:
        return 2

    @property
    def healthy_indices(self) -> list[int]:
        self.stop_request.check()
        return []


ROLLOUT, ENVS = 8, 2


@pytest.mark.parametrize(
    "algorithm, hyperparameters",
    [
        ("PPO", {}),  # SyncSamples
        ("DQN", {"learning_starts": 0, "batch_size": 8, "hidden_sizes": [8]}),  # SyncReplay
        ("IMPALA", {}),  # AsyncSamples
        ("A3C", {}),  # AsyncGradients
        ("APEX", {"learning_starts": 0, "batch_size": 8, "hidden_sizes": [8]}),  # AsyncReplay
    ],
)
def test_every_optimizer_steps_on_the_local_worker_while_none_is_ready(
    ray_local, algorithm, hyperparameters
):
    config = trainer_config(
        algorithm=algorithm, hyperparameters={"rollout_length": ROLLOUT, **hyperparameters}
    )

    def kwargs(index):
        policy = algorithms.policy_class(config)
        return {"policy_class": policy, "config": config, "num_envs": ENVS, "seed": index}

    workers = NoneReady(RolloutWorker, kwargs, num_remote=0)
    optimizer = algorithms.optimizer_class(config)(workers, config)
    try:
        for _ in range(2):
            result = optimizer.step()
            assert result.steps_sampled > 0
        # a batch a step at least (a batch: ROLLOUT x ENVS steps, less the envs' reset steps)
        assert optimizer.counters.steps_sampled > ROLLOUT * ENVS
    finally:
        optimizer.stop()
        workers.stop()


def test_worker_downtime_and_ready_workers_reach_the_metrics():
    labels = {"namespace": "team", "rljob": "spot", "algorithm": "PPO"}
    metrics = TrainerMetrics(**labels)

    def value(name: str) -> float:
        return metrics.registry.get_sample_value(name, labels)

    # A row holds the run's total downtime; the counter goes up by what is new in each row, and
    # keeps counting when a new driver's rows start again from 0.
    for iteration, (downtime, ready) in enumerate([(0, 2), (1.5, 1), (4.0, 2), (0.5, 2)], 1):
        metrics.record(row(iteration, **{WORKER_DOWNTIME_S: downtime, WORKERS_READY: ready}), {}, 0)
        assert value(METRIC_WORKERS_READY) == ready
    assert value(METRIC_WORKER_DOWNTIME) == 4.5
