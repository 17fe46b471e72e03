"""WorkerSet: the driver's local worker plus the remote rollout workers (Ray actors).

A remote worker that dies (killed, OOM, its node preempted) is replaced by a new actor in the
background; sampling continues on the healthy ones meanwhile, and the restart is counted. With no
healthy remote worker at all, the local worker samples so training never stalls.

Calls on remote workers go through one task pool (`call`, `completed`): the synchronous
`sample()` and the asynchronous optimizers alike, so a dead worker's calls are dropped, the worker
replaced and the loss counted in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kuberl_trainer.errors import TrainingError
from kuberl_trainer.sample_batch import SampleBatch

if TYPE_CHECKING:
    from kuberl_trainer.policy.base import Weights

log = logging.getLogger(__name__)


class ResourceError(TrainingError):
    """The requested workers can never be scheduled on this Ray cluster."""


class WorkerSet:
    def __init__(
        self,
        worker_class: type,
        worker_kwargs: Callable[[int], dict[str, Any]],
        num_remote: int,
        cpus_per_worker: float = 1.0,
    ):
        """`worker_kwargs(index)` gives the constructor arguments of worker `index` (0 is the
        local worker, 1.. the remote ones), so every worker gets its own seed."""
        self.local_worker = worker_class(**worker_kwargs(0))
        self.restarts = 0
        self._worker_kwargs = worker_kwargs
        self._remote_class = None
        self._healthy: dict[int, Any] = {}  # index → actor handle ready to sample
        self._starting: dict[int, tuple[Any, Any]] = {}  # index → (handle, ready ref)
        self._in_flight: dict[Any, int] = {}  # object ref of a call → index of its worker
        self._abandoned: set[Any] = set()  # calls whose results nobody wants (stragglers)
        self.stragglers_dropped = 0
        self._weights_ref = None
        self._global_timesteps = 0
        self._torch_threads = max(1, int(cpus_per_worker))
        if num_remote:
            check_resources(num_remote, cpus_per_worker)
            self._remote_class = worker_class.as_remote(num_cpus=cpus_per_worker)
            for index in range(1, num_remote + 1):
                self._healthy[index] = self._start_remote(index)

    @property
    def num_remote(self) -> int:
        return len(self._healthy) + len(self._starting)

    @property
    def remote_workers(self) -> list:
        return list(self._healthy.values())

    @property
    def healthy_indices(self) -> list[int]:
        """Indices of the remote workers ready for calls (replacements join once started)."""
        self._promote_started_workers()
        return list(self._healthy)

    # -- weights ------------------------------------------------------------------------------

    def sync_weights(self, global_timesteps: int) -> None:
        """Broadcast the local policy's weights: one object-store put, one call per worker."""
        self._global_timesteps = global_timesteps
        self.local_worker.policy.set_global_timesteps(global_timesteps)
        if not self.num_remote:
            return
        ref = self.put_weights(self.local_worker.get_weights(), global_timesteps)
        for index in self._healthy:
            self.send_weights(index, ref)

    def put_weights(self, weights: Weights, global_timesteps: int):
        """Weights into the object store once, for any number of `send_weights` calls; they are
        also what a replacement worker starts with."""
        import ray

        self._global_timesteps = global_timesteps
        self._weights_ref = ray.put(weights)
        return self._weights_ref

    def send_weights(self, index: int, weights_ref) -> None:
        """Weights to one worker; queued behind its calls in flight, so its next call uses them."""
        self._healthy[index].set_weights.remote(weights_ref, self._global_timesteps)

    # -- the task pool ------------------------------------------------------------------------

    def call(self, index: int, method: str, *args):
        """Start `method(*args)` on remote worker `index`; its result comes from `completed()`."""
        ref = getattr(self._healthy[index], method).remote(*args)
        self._in_flight[ref] = index
        return ref

    def in_flight(self, index: int) -> int:
        """Calls started on worker `index` whose results have not been taken yet."""
        return sum(1 for owner in self._in_flight.values() if owner == index)

    def completed(self, timeout: float | None = None, refs: list | None = None) -> list[tuple]:
        """(worker index, result) of every call in flight (or of `refs`) that has finished,
        waiting up to `timeout` seconds for the first (None: as long as it takes). A dead
        worker's calls are dropped, and the worker replaced and counted."""
        self._reap_abandoned()
        wanted = self._in_flight if refs is None else refs
        pending = [r for r in wanted if r in self._in_flight and r not in self._abandoned]
        if not pending:
            return []
        import ray

        ready, _ = ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:  # take every result already there, not just the first
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        results = []
        for ref in ready:
            index = self._in_flight.pop(ref, None)
            if index is None:  # dropped with its worker, which died earlier in this loop
                continue
            try:
                results.append((index, ray.get(ref)))
            except ray.exceptions.RayActorError as exc:
                log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                self._lose(index)
        return results

    def sample(self, timeout: float | None = None) -> list[SampleBatch]:
        """One batch per healthy remote worker, or from the local worker when there are none.

        With `timeout`, the step learns on what arrived by then (at least one batch): workers
        still sampling are stragglers, counted in `stragglers_dropped`; their batches are thrown
        away when they come, and they sit out the steps until then."""
        indices = self.healthy_indices
        if not indices:
            return [self.local_worker.sample()]
        free = [index for index in indices if not self.in_flight(index)]
        if not free:  # every worker is a straggler from earlier steps: wait for one to be free
            self._wait_for_a_free_worker()
            return self.sample(timeout)
        refs = [self.call(index, "sample") for index in free]
        deadline = None if timeout is None else time.monotonic() + timeout
        batches: list[SampleBatch] = []
        while refs:
            wait = None
            if deadline is not None and batches:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    break
            for _, batch in self.completed(wait, refs):
                batches.append(batch)
            refs = [ref for ref in refs if ref in self._in_flight]
        if refs:
            self.stragglers_dropped += len(refs)
            self._abandoned.update(refs)
            log.info("learning without %d straggling rollout worker(s)", len(refs))
        if not batches:  # every worker died on the way: the local worker keeps training going
            return [self.local_worker.sample()]
        return batches

    def _wait_for_a_free_worker(self) -> None:
        import ray

        ray.wait(list(self._abandoned), num_returns=1)
        self._reap_abandoned()

    def _reap_abandoned(self) -> None:
        """Forget abandoned calls that have finished, so their workers take calls again."""
        if not self._abandoned:
            return
        import ray

        done, _ = ray.wait(list(self._abandoned), num_returns=len(self._abandoned), timeout=0)
        for ref in done:
            self._abandoned.discard(ref)
            index = self._in_flight.pop(ref, None)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                if index in self._healthy:
                    log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                    self._lose(index)

    def foreach_remote(self, method: str, *args) -> list:
        import ray

        return ray.get([getattr(h, method).remote(*args) for h in self._healthy.values()])

    def _lose(self, index: int) -> None:
        """A healthy worker died: drop its calls, count the restart and start its replacement."""
        del self._healthy[index]
        for ref in [ref for ref, owner in self._in_flight.items() if owner == index]:
            del self._in_flight[ref]
            self._abandoned.discard(ref)
        self.restarts += 1
        self._start_replacement(index)

    def _start_replacement(self, index: int) -> None:
        """A new actor for slot `index`; it joins the healthy ones once its first call (the
        weight sync) has returned, so sampling never waits for it."""
        import ray

        handle = self._start_remote(index)
        weights = self._weights_ref or ray.put(self.local_worker.get_weights())
        self._starting[index] = (handle, handle.set_weights.remote(weights, self._global_timesteps))

    def _start_remote(self, index: int):
        return self._remote_class.remote(
            **self._worker_kwargs(index), torch_threads=self._torch_threads
        )

    def _promote_started_workers(self) -> None:
        """Move replacements whose first call (the weight sync) finished into the healthy set."""
        if not self._starting:
            return
        import ray

        for index, (handle, ready) in list(self._starting.items()):
            done, _ = ray.wait([ready], timeout=0)
            if not done:
                continue
            del self._starting[index]
            try:
                ray.get(ready)
            except ray.exceptions.RayActorError as exc:
                # The same loss, retried: not a new restart.
                log.warning("replacement rollout worker %d failed (%s); retrying", index, exc)
                self._start_replacement(index)
                continue
            # Weights may have moved on while it started.
            handle.set_weights.remote(self._weights_ref, self._global_timesteps)
            self._healthy[index] = handle

    def stop(self) -> None:
        self.local_worker.close()
        if self._remote_class is None:
            return
        import ray

        for handle in [*self._healthy.values(), *(h for h, _ in self._starting.values())]:
            ray.kill(handle)
        self._healthy.clear()
        self._starting.clear()
        self._in_flight.clear()
        self._abandoned.clear()


def check_resources(num_workers: int, cpus_per_worker: float) -> None:
    """Fail fast instead of waiting forever for CPUs the cluster will never have."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    largest = max((n["Resources"].get("CPU", 0.0) for n in nodes), default=0.0)
    total = sum(n["Resources"].get("CPU", 0.0) for n in nodes)
    wanted = num_workers * cpus_per_worker
    if cpus_per_worker > largest:
        raise ResourceError(
            f"rolloutWorkers.cpusPerWorker={cpus_per_worker:g} but the largest Ray node has "
            f"{largest:g} CPUs: no worker could ever be placed; lower cpusPerWorker"
        )
    if wanted > total:
        raise ResourceError(
            f"rolloutWorkers: {num_workers} replicas x {cpus_per_worker:g} CPUs = {wanted:g} CPUs "
            f"requested but the Ray cluster has {total:g}; lower replicas or cpusPerWorker "
            "(fractions such as 0.5 are allowed)"
        )
