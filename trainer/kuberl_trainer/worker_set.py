"""WorkerSet: the driver's local worker plus the remote rollout workers (Ray actors).

A remote worker that dies (killed, OOM, its node preempted) is replaced by a new actor in the
background; sampling continues on the healthy ones meanwhile, and the restart is counted. With no
healthy remote worker at all, the local worker samples so training never stalls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kuberl_trainer.errors import TrainingError
from kuberl_trainer.sample_batch import SampleBatch

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

    def sync_weights(self, global_timesteps: int) -> None:
        """Broadcast the local policy's weights: one object-store put, one call per worker."""
        self._global_timesteps = global_timesteps
        self.local_worker.policy.set_global_timesteps(global_timesteps)
        if not self.num_remote:
            return
        import ray

        self._weights_ref = ray.put(self.local_worker.get_weights())
        for handle in self._healthy.values():
            handle.set_weights.remote(self._weights_ref, global_timesteps)

    def sample(self) -> list[SampleBatch]:
        """One batch per healthy remote worker, or from the local worker when there are none."""
        self._promote_started_workers()
        if not self._healthy:
            return [self.local_worker.sample()]
        import ray

        refs = {index: handle.sample.remote() for index, handle in self._healthy.items()}
        batches = []
        for index, ref in refs.items():
            try:
                batches.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                self._lose(index)
        if not batches:
            return [self.local_worker.sample()]
        return batches

    def foreach_remote(self, method: str, *args) -> list:
        import ray

        return ray.get([getattr(h, method).remote(*args) for h in self._healthy.values()])

    def _lose(self, index: int) -> None:
        """A healthy worker died: count the restart and start its replacement."""
        del self._healthy[index]
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
