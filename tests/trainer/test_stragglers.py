"""Stragglers in the synchronous optimizers, with real Ray actors: a rollout worker held back by a
gate the test opens (never a timer) is left behind once the step's sample timeout has passed, is
counted, sits out while it is busy, takes calls again once free, and its late batch is never
learned on."""

import asyncio
import threading

import numpy as np
import ray
from test_sync_samples import MockWorker

from kuberl_trainer.optimizers.sync_replay import SyncReplayOptimizer
from kuberl_trainer.optimizers.sync_samples import SyncSamplesOptimizer
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config, wait_until

TIMEOUT = 0.3  # seconds; the fast worker is always waited for, so nothing races this
STARTUP = 300  # seconds allowed for actors to start (import torch) on a loaded machine


@ray.remote(num_cpus=0)
class Gate:
    """Held shut by the test: the gated workers' sample calls wait in it until it opens."""

    def __init__(self):
        self.opened = asyncio.Event()
        self.waiting = 0

    async def wait(self) -> None:
        self.waiting += 1
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()

    def waiters(self) -> int:
        return self.waiting


class TaggingPolicy:
    """Remembers which (worker, call) batches it learned on: each batch's one row says."""

    def exploration_stats(self) -> dict[str, float]:  # SyncReplay reports them
        return {}

    def __init__(self):
        self.learned: list[set[tuple[int, int]]] = []
        self.weights = {"w": np.zeros(1, np.float32)}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        self.learned.append(tags(batch["obs"]))
        return {}

    def set_global_timesteps(self, timesteps: int) -> None:
        pass


class GatedWorker(MockWorker):
    """Samples one row tagged (worker index, call number); with a gate, each sample waits for
    the gate to open."""

    def __init__(self, index: int, gate=None, cpus=None):
        super().__init__(cpus)
        self.policy = TaggingPolicy()
        self.index, self.gate, self.samples = index, gate, 0

    def sample(self, steps: int | None = None) -> SampleBatch:
        self.samples += 1
        if self.gate is not None:
            ray.get(self.gate.wait.remote())
        return SampleBatch({"obs": np.array([[self.index, self.samples]], np.float32)})


def tags(obs: np.ndarray) -> set[tuple[int, int]]:
    return {(int(index), int(call)) for index, call in obs}


def gated_workers(gate, gated: set[int], replicas: int = 3) -> WorkerSet:
    def kwargs(index: int) -> dict:
        return {"index": index, "gate": gate if index in gated else None}

    return WorkerSet(GatedWorker, kwargs, num_remote=replicas, cpus_per_worker=0.5)


def timeout_config(algorithm: str = "PPO", **hyperparameters):
    return trainer_config(
        algorithm=algorithm,
        optimizerConfig={"sampleTimeoutSeconds": TIMEOUT},
        hyperparameters=hyperparameters,
    )


def test_a_step_learns_without_the_stragglers_and_never_on_their_late_batches(ray_local):
    gate = Gate.remote()
    workers = gated_workers(gate, gated={2, 3})
    try:
        all_started(workers)
        optimizer = SyncSamplesOptimizer(workers, timeout_config())
        learned = workers.local_worker.policy.learned

        first = optimizer.step()  # returns once the timeout has passed, with worker 1's batch
        assert learned == [{(1, 1)}] and first.steps_sampled == 1
        assert workers.stragglers_dropped == 2

        # Still busy: the stragglers sit out (not called, not counted again).
        optimizer.step()
        assert learned[-1] == {(1, 2)} and workers.stragglers_dropped == 2
        wait_until(lambda: ray_local.get(gate.waiters.remote()) == 2, STARTUP)  # held

        ray_local.get(gate.open.remote())
        # Once free they are called again; their late first batches are thrown away.
        wait_until(lambda: optimizer.step() and {2, 3} <= {i for i, _ in learned[-1]}, STARTUP)
        seen = set().union(*learned)
        assert (2, 1) not in seen and (3, 1) not in seen
        assert optimizer.counters.steps_trained == sum(len(batch) for batch in learned)
    finally:
        workers.stop()
        ray_local.kill(gate)


def test_without_a_timeout_every_worker_is_waited_for(ray_local):
    gate = Gate.remote()
    workers = gated_workers(gate, gated={2})
    try:
        all_started(workers)
        optimizer = SyncSamplesOptimizer(workers, trainer_config(algorithm="PPO"))
        results = []
        stepping = threading.Thread(target=lambda: results.append(optimizer.step()))
        stepping.start()
        wait_until(lambda: ray_local.get(gate.waiters.remote()) == 1, STARTUP, "worker 2 to sample")
        assert stepping.is_alive()  # worker 2's batch is held in the gate: the step cannot end

        ray_local.get(gate.open.remote())
        stepping.join(timeout=60)
        assert not stepping.is_alive()
        assert workers.local_worker.policy.learned == [{(1, 1), (2, 1), (3, 1)}]
        assert results[0].steps_sampled == 3 and workers.stragglers_dropped == 0
    finally:
        ray_local.kill(gate)
        workers.stop()


def test_sync_replay_keeps_the_stragglers_batches_out_of_its_buffer(ray_local):
    gate = Gate.remote()
    workers = gated_workers(gate, gated={2}, replicas=2)
    try:
        all_started(workers)
        config = timeout_config("DQN", learning_starts=1_000_000)  # fill only, never learn
        optimizer = SyncReplayOptimizer(workers, config)
        optimizer.step()
        assert workers.stragglers_dropped == 1

        ray_local.get(gate.open.remote())
        wait_until(
            lambda: optimizer.step() and 2 in {i for i, _ in tags(buffered(optimizer))}, STARTUP
        )
        assert (2, 1) not in tags(buffered(optimizer))
    finally:
        workers.stop()
        ray_local.kill(gate)


def buffered(optimizer: SyncReplayOptimizer) -> np.ndarray:
    return optimizer.buffer.columns["obs"][: len(optimizer.buffer)]
