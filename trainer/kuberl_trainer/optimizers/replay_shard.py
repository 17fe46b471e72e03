"""Ape-X's replay memory in shards: prioritized buffers in Ray actors of their own, which the
rollout workers' batches reach through the object store and the learner samples from.

`ReplayShards` is the optimizer's handle on them, as the WorkerSet is on the workers: batches go
round-robin, calls are tracked until they finish, and a shard that dies is logged, counted and
replaced by an empty one, so the run goes on with the memory the other shards hold."""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Any

from kuberl_trainer.optimizers.replay_buffer import Columns, PrioritizedReplayBuffer
from kuberl_trainer.policies.sample_batch import SampleBatch

log = logging.getLogger(__name__)

_REPLAY_STREAM = 1  # mixed into the shards' seeds, apart from the policies' exploration draws


class ReplayShard:
    def __init__(self, capacity: int, alpha: float, eps: float, seed: int | list[int] | None):
        self.buffer = PrioritizedReplayBuffer(capacity, alpha, eps, seed)

    @classmethod
    def as_remote(cls, num_cpus: float, node_id: str):
        """This class as a Ray actor on the node `node_id` (the driver's) while it is alive: the
        replay memory outlives preemptible rollout nodes. Ray does not restart it: ReplayShards
        notices the loss and starts an empty one."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return ray.remote(num_cpus=num_cpus, max_restarts=0)(cls).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True)
        )

    def add(self, batch: SampleBatch) -> None:
        self.buffer.add(batch.columns)

    def sample(self, batch_size: int, beta: float, count: int = 1) -> Columns:
        """`count` prioritized minibatches, concatenated (minibatch i is rows i * batch_size to
        (i + 1) * batch_size), with their importance `weights` and the `indices` to pass back to
        update_priorities."""
        return self.buffer.sample(batch_size, beta, count)

    def update_priorities(self, indices, td_errors) -> None:
        self.buffer.update_priorities(indices, td_errors)

    def state(self) -> dict[str, Any]:
        return self.buffer.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state(state)

    def pid(self) -> int:
        return os.getpid()


class ReplayShards:
    def __init__(
        self,
        count: int,
        capacity: int,
        alpha: float,
        eps: float,
        cpus: float,
        seed: int | None,
        shard_class: type[ReplayShard] = ReplayShard,
    ):
        """`count` shards of `capacity` transitions each, placed beside the driver."""
        self._args = (capacity, alpha, eps)
        self._cpus = cpus
        self._seed = seed
        self._class = shard_class
        self.capacity = capacity
        self.generations = [0] * count  # bumped when a shard is replaced: old indices are void
        self.actors = [self._start(shard) for shard in range(count)]
        self.sizes = [0] * count  # transitions each holds (counted here, never asked)
        self.lost = 0
        self.replays: Counter = Counter()  # shard → replay calls in flight
        self._calls: dict[Any, tuple[int, int, str]] = {}  # ref → shard, generation, method
        self._next = 0  # the shard for the next batch

    @property
    def pending(self) -> list:
        """The calls in flight, to wait on."""
        return list(self._calls)

    def add(self, batch, rows: int) -> None:
        """A batch (or the object reference of one, resolved by the shard) into the next shard."""
        shard = self._next
        self._next = (shard + 1) % len(self.actors)
        self._call(shard, "add", batch)
        self.sizes[shard] = min(self.capacity, self.sizes[shard] + rows)

    def replay(self, shard: int, batch_size: int, beta: float, count: int) -> None:
        """Ask `shard` for `count` minibatches in one call; they come from `completed()`."""
        self._call(shard, "sample", batch_size, beta, count)
        self.replays[shard] += 1

    def update_priorities(self, shard: int, generation: int, indices, td_errors) -> None:
        if generation == self.generations[shard]:  # a replacement holds other transitions
            self._call(shard, "update_priorities", indices, td_errors)

    def completed(self) -> list[tuple[int, int, Columns]]:
        """(shard, generation, minibatch) of every replay call that has finished. Every finished
        call is checked: a shard that died is replaced, empty, and counted in `lost`."""
        import ray

        done, _ = ray.wait(self.pending, num_returns=len(self._calls), timeout=0)
        minibatches = []
        for ref in done:
            if ref not in self._calls:  # dropped with its shard earlier in this loop
                continue
            shard, generation, method = self._calls.pop(ref)
            if method == "sample":
                self.replays[shard] -= 1
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                self._replace(shard, exc)
                continue
            if method == "sample":
                minibatches.append((shard, generation, result))
        return minibatches

    def state(self) -> list[dict[str, Any]]:
        import ray

        return ray.get([actor.state.remote() for actor in self.actors])

    def load_state(self, states: list[dict[str, Any]]) -> None:
        import ray

        if len(states) != len(self.actors):
            log.warning(
                "the checkpoint holds %d replay shards and the job has %d: starting with empty "
                "replay (learning resumes after learning_starts transitions)",
                len(states),
                len(self.actors),
            )
            return
        ray.get([a.load_state.remote(s) for a, s in zip(self.actors, states, strict=True)])
        self.sizes = [state["size"] for state in states]

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)

    def _call(self, shard: int, method: str, *args) -> None:
        ref = getattr(self.actors[shard], method).remote(*args)
        self._calls[ref] = (shard, self.generations[shard], method)

    def _start(self, shard: int):
        import ray

        generation = self.generations[shard]
        seed = None if self._seed is None else [self._seed, _REPLAY_STREAM, shard, generation]
        node = ray.get_runtime_context().get_node_id()
        return self._class.as_remote(self._cpus, node).remote(*self._args, seed)

    def _replace(self, shard: int, error: BaseException) -> None:
        log.warning(
            "replay shard %d died (%s): its %d transitions are lost; starting an empty one",
            shard,
            error,
            self.sizes[shard],
        )
        self.lost += 1
        self.generations[shard] += 1
        self.sizes[shard] = 0
        self.replays[shard] = 0
        for ref in [ref for ref, (owner, _, _) in self._calls.items() if owner == shard]:
            del self._calls[ref]
        self.actors[shard] = self._start(shard)
