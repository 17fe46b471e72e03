"""WorkerSet: the driver's local worker plus the remote rollout workers (Ray actors).

A remote worker that dies (killed, OOM, its node preempted) is replaced by a new actor in the
background; sampling continues on the healthy ones meanwhile, and the restart is counted. With no
healthy remote worker at all, the local worker samples so training never stalls. A replacement that
cannot be placed yet (its node is gone and no other node has room for it) waits in Ray's queue
without holding anything up: it joins once its first call returns, when a node has rejoined. The
time each worker slot went without a working worker is measured (`downtime_s`).

Observation and reward normalization (spec.trainer.normalization, `GlobalNormalization`): each
remote worker's batch carries the statistics of what it sampled since its previous one, merged as
the batch arrives (`completed`, which every remote call's result passes), and the global
statistics travel with the weights: each `put_weights` puts a copy beside them, and every weight
call (`send_weights`, a replacement's first) hands both to the worker.

Start-up: at most as many remote workers start at once as the Ray cluster has CPUs to spare
(`startup_slots`: its CPUs, less the one the learner takes where it shares a node with them),
the others as those have started. Starting one takes a CPU for half a second (Python, Ray, kuberl
and its envs; 1.4-1.6 CPU-seconds where its policy needs torch, see policy/acting.py), so
workers started all at once on a laptop share its CPUs and all come late; one at a time,
training starts with the first and the others join as replacements do, in the order the policy
gives (`Policy.worker_start_order`: Ape-X's span its exploration rates).

Calls on remote workers go through one task pool (`call`, `completed`): the synchronous
`sample()` and the asynchronous optimizers alike, so a dead worker's calls are dropped, the worker
replaced and the loss counted in one place.

Waits on the workers return to Python at least every WAIT_SLICE_S to look for the driver's stop
request, so a preempted driver never waits out an iteration to checkpoint (see interrupt.py).

Placement: remote workers are created with Ray's SPREAD strategy and the job's custom Ray resources
(rolloutWorkers.rayResources). What the Ray cluster could never place fails at once with the
manifest field to change (`check_resources`, in kuberl_trainer.rollouts.resources), where Ray
itself would wait forever.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from kuberl_trainer.envs.normalization import GlobalNormalization
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.interrupt import WAIT_SLICE_S, StopRequest
from kuberl_trainer.rollouts.resources import (
    ResourceRequest,
    check_resources,
    rollout_workers_request,
)

if TYPE_CHECKING:
    from kuberl_trainer.policies.interface import Weights

log = logging.getLogger(__name__)


class WorkerSet:
    def __init__(
        self,
        worker_class: type,
        worker_kwargs: Callable[[int], dict[str, Any]],
        num_remote: int,
        cpus_per_worker: float = 1.0,
        ray_resources: Mapping[str, float] | None = None,
        start_order: Sequence[int] | None = None,
    ):
        """`worker_kwargs(index)` gives the constructor arguments of worker `index` (0 is the
        local worker, 1.. the remote ones), so every worker gets its own seed. `ray_resources`
        are custom Ray resources each remote worker requires (`{"spot": 1}` pins them to the
        nodes that advertise `spot`). `start_order` is the order in which the remote workers
        start where not all can start at once (`Policy.worker_start_order`; by index if not
        given)."""
        self.local_worker = worker_class(**worker_kwargs(0))
        self.normalization = GlobalNormalization(self.local_worker)
        self.local_copy = False  # the local worker acts with a CPU copy of the learner's policy
        self.restarts = 0
        self._worker_kwargs = worker_kwargs
        self._remote_class = None
        self._healthy: dict[int, Any] = {}  # index → actor handle ready to sample
        # index → (handle, its first call's ref: the weight sync, the weights it sent)
        self._starting: dict[int, tuple[Any, Any, Any]] = {}
        self._in_flight: dict[Any, int] = {}  # object ref of a call → index of its worker
        self._calls: Counter[int] = Counter()  # worker index → its calls in flight
        self._abandoned: set[Any] = set()  # calls whose results nobody wants (stragglers)
        self.stragglers_dropped = 0
        # Set by the driver: checked wherever an iteration waits on its workers.
        self.stop_request = StopRequest()
        self._last_heard: dict[int, float] = {}  # index → when its worker last answered a call
        self._down_since: dict[int, float] = {}  # index → since when the slot has no worker
        self._downtime_ended_s = 0.0  # downtime of the outages already over
        self._weights_ref = None
        self._global_timesteps = 0
        self._cpus = max(1, int(cpus_per_worker))
        # Remote workers not started yet, and those started first (healthy at once) whose actor
        # is still being constructed, with its ready ref: at most _max_starting start at once.
        self._queued: list[int] = []
        self._first_starting: dict[int, Any] = {}
        self._max_starting = 1
        # What the remote workers ask of the Ray cluster: an optimizer that places actors of
        # its own checks them together with these (`check_resources`).
        self.resource_requests: list[ResourceRequest] = []
        if num_remote:
            resources = dict(ray_resources or {})
            self.resource_requests.append(
                rollout_workers_request(num_remote, cpus_per_worker, resources)
            )
            check_resources(self.resource_requests)
            # SPREAD: one worker per node while there are free nodes. Ray's default policy may
            # fill a node first, and with cpusPerWorker 0.5 put two workers on one pod's CPU.
            self._remote_class = worker_class.as_remote(num_cpus=cpus_per_worker).options(
                scheduling_strategy="SPREAD", resources=resources
            )
            self._max_starting = _startup_slots()
            self._queued = list(start_order or range(1, num_remote + 1))
            assert sorted(self._queued) == list(range(1, num_remote + 1)), start_order
            self._launch_queued(first=True)

    @property
    def num_remote(self) -> int:
        return len(self._healthy) + len(self._starting) + len(self._queued)

    @property
    def remote_workers(self) -> list:
        return list(self._healthy.values())

    @property
    def healthy_indices(self) -> list[int]:
        """Indices of the remote workers ready for calls (replacements join once started). Every
        optimizer asks this before it waits or samples, so it is also a safe point for a stop
        request (IterationAbandoned)."""
        self.stop_request.check()
        self._promote_started_workers()
        return list(self._healthy)

    @property
    def num_ready(self) -> int:
        """Remote workers ready for calls now; replacements still starting or waiting for a node
        to be placed on are not."""
        self._promote_started_workers()
        return len(self._healthy)

    @property
    def downtime_s(self) -> float:
        """Seconds the remote worker slots have gone without a working worker, summed over slots:
        for each worker lost, from the last call it answered to the first its replacement answered
        (so noticing the loss, waiting for a node and starting the actor all count); outages still
        going on count up to now."""
        now = time.monotonic()
        return self._downtime_ended_s + sum(now - since for since in self._down_since.values())

    # -- weights ------------------------------------------------------------------------------

    def sync_weights(self, global_timesteps: int) -> None:
        """Broadcast the local policy's weights: one object-store put, one call per worker; the
        local worker's CPU copy, if it has one, takes the same arrays."""
        self._global_timesteps = global_timesteps
        self.local_worker.policy.set_global_timesteps(global_timesteps)
        if not self.num_remote and not self.local_copy:
            return
        weights = self.local_worker.get_weights()
        self.refresh_local_copy(weights)
        if not self.num_remote:
            return
        ref = self.put_weights(weights, global_timesteps)
        for index in self._healthy:
            self.send_weights(index, ref)

    def act_locally_with_a_cpu_copy(self) -> None:
        """The local worker acts with a CPU copy of the learner's policy from now on (see
        `RolloutWorker.act_with_a_cpu_copy`); `sync_weights` and `refresh_local_copy` keep it
        up with the learner."""
        self.local_worker.act_with_a_cpu_copy()
        self.local_copy = True

    def refresh_local_copy(
        self, weights: Weights | None = None, lock: AbstractContextManager | None = None
    ) -> None:
        """The local worker's CPU copy takes the learner's newest weights (see
        `RolloutWorker.refresh_acting_policy`); nothing, and no cost, without a copy."""
        if self.local_copy:
            self.local_worker.refresh_acting_policy(weights, lock)

    def put_weights(self, weights: Weights, global_timesteps: int):
        """Weights into the object store once, for any number of `send_weights` calls; they are
        also what a replacement worker starts with."""
        import ray

        self._global_timesteps = global_timesteps
        self._weights_ref = ray.put(weights)
        self.normalization.put()
        return self._weights_ref

    def send_weights(self, index: int, weights_ref) -> None:
        """Weights to one worker (with the normalization statistics put with the newest ones);
        queued behind its calls in flight, so its next call uses them."""
        self._set_weights(self._healthy[index], weights_ref)

    def _set_weights(self, handle, weights_ref):
        """A worker's set_weights call, with the statistics put last when normalization is on."""
        extra = self.normalization.with_weights()
        return handle.set_weights.remote(weights_ref, self._global_timesteps, *extra)

    # -- the task pool ------------------------------------------------------------------------

    def call(self, index: int, method: str, *args):
        """Start `method(*args)` on remote worker `index`; its result comes from `completed()`."""
        ref = getattr(self._healthy[index], method).remote(*args)
        self._in_flight[ref] = index
        self._calls[index] += 1
        return ref

    def in_flight(self, index: int) -> int:
        """Calls started on worker `index` whose results have not been taken yet."""
        return self._calls[index]

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

        if not self._wait_for_one(pending, timeout):
            return []
        # Take every result already there, not just the first.
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        results = []
        for ref in ready:
            index = self._forget(ref)
            if index is None:  # dropped with its worker, which died earlier in this loop
                continue
            try:
                result = ray.get(ref)
                self.normalization.merge_from(result)
                results.append((index, result))
                self._last_heard[index] = time.monotonic()
            except _worker_lost() as exc:
                log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                self._lose(index)
        return results

    def sample(self, timeout: float | None = None) -> list[SampleBatch]:
        """One batch per healthy remote worker, or from the local worker when there are none.

        With `timeout`, the step learns on what arrived by then (at least one batch): workers
        still sampling are stragglers, counted in `stragglers_dropped`; their batches are thrown
        away when they come, and they sit out the steps until then."""
        self._reap_abandoned()  # a straggler that has finished takes calls again from this step
        free = [index for index in self.healthy_indices if not self.in_flight(index)]
        if not free and self._abandoned:  # every worker is still on a straggling call
            self._wait_for_a_free_worker(timeout)
            free = [index for index in self.healthy_indices if not self.in_flight(index)]
        if not free:  # none healthy, or none free in time: the local worker keeps training going
            return [self._sample_locally()]
        refs = [self.call(index, "sample") for index in free]
        deadline = None if timeout is None else time.monotonic() + timeout
        batches: list[SampleBatch] = []
        while refs:
            wait = None  # the first batch is waited for however long it takes
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
            return [self._sample_locally()]
        return batches

    def _sample_locally(self) -> SampleBatch:
        """A batch from the local worker; a stop request may cut it short (it only reads the
        policy)."""
        with self.stop_request.abandonable():
            return self.local_worker.sample()

    def _wait_for_one(self, refs: list, timeout: float | None) -> bool:
        """Until one of `refs` is ready (True) or `timeout` seconds passed (None: as long as it
        takes). Returns to Python every WAIT_SLICE_S to look for a stop request: a dead node's
        calls fail only once Ray has noticed, and a slow env's batch may take minutes."""
        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.stop_request.check()
            left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, min(left, WAIT_SLICE_S)))
            if ready:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _wait_for_a_free_worker(self, timeout: float | None) -> None:
        self._wait_for_one(list(self._abandoned), timeout)
        self._reap_abandoned()

    def _forget(self, ref) -> int | None:
        """Take a call out of the pool; the index of its worker, or None if it was not in it."""
        index = self._in_flight.pop(ref, None)
        if index is not None:
            self._calls[index] -= 1
        return index

    def _reap_abandoned(self) -> None:
        """Forget abandoned calls that have finished, so their workers take calls again."""
        if not self._abandoned:
            return
        import ray

        done, _ = ray.wait(list(self._abandoned), num_returns=len(self._abandoned), timeout=0)
        for ref in done:
            self._abandoned.discard(ref)
            index = self._forget(ref)
            try:
                # Fetched to learn whether the worker died on the way (a late batch costs one
                # transfer; an error left unread would be logged by Ray as unhandled), and for
                # the normalization statistics of what it sampled, which count all the same.
                self.normalization.merge_from(ray.get(ref))
                if index in self._healthy:
                    self._last_heard[index] = time.monotonic()
            except _worker_lost() as exc:
                if index in self._healthy:
                    log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                    self._lose(index)

    def foreach_remote(self, method: str, *args) -> list:
        import ray

        return ray.get([getattr(h, method).remote(*args) for h in self._healthy.values()])

    def _lose(self, index: int) -> None:
        """A healthy worker died: drop its calls, count the restart and start its replacement."""
        import ray

        # Dead already, or alive but unusable (a result lost): never two workers in one slot.
        ray.kill(self._healthy.pop(index))
        self._down_since[index] = self._last_heard.pop(index, time.monotonic())
        for ref in [ref for ref, owner in self._in_flight.items() if owner == index]:
            self._forget(ref)
            self._abandoned.discard(ref)
        self.restarts += 1
        self._start_replacement(index)

    def _launch_queued(self, first: bool = False) -> None:
        """Start queued workers while fewer than `_max_starting` are starting (`startup_slots`).
        Starting a worker is CPU-bound (Python and Ray, kuberl and its envs: 0.41 CPU-seconds on
        a 2-core VM, 1.4-1.6 with torch), and workers that start together share the CPUs: 12 at
        once on 2 cores, each importing torch, answered their first call after 12 s, beside a
        learner that had nothing to learn on.
        Those started `first` are healthy at once, so the first step waits for their batches as
        for any; the others join in the background (`_starting`) while training goes on with
        the workers already up."""
        import ray

        if self._first_starting:
            refs = list(self._first_starting.values())
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for index in [i for i, ref in self._first_starting.items() if ref in done]:
                del self._first_starting[index]
        while self._queued and len(self._starting) + len(self._first_starting) < self._max_starting:
            index = self._queued.pop(0)
            if first:
                handle = self._healthy[index] = self._start_remote(index)
                self._first_starting[index] = handle.__ray_ready__.remote()
                self._last_heard[index] = time.monotonic()
            else:
                self._start_replacement(index)

    def _start_replacement(self, index: int) -> None:
        """A new actor for slot `index`; it joins the healthy ones once its first call (the
        weight sync) has returned, so sampling never waits for it."""
        handle = self._start_remote(index)
        if self._weights_ref is None:
            self.put_weights(self.local_worker.get_weights(), self._global_timesteps)
        sent = self._weights_ref
        self._starting[index] = (handle, self._set_weights(handle, sent), sent)

    def _start_remote(self, index: int):
        return self._remote_class.remote(**self._worker_kwargs(index), cpus=self._cpus)

    def _promote_started_workers(self) -> None:
        """Move replacements and queued workers whose first call (the weight sync) finished into
        the healthy set, and start more queued ones in their place."""
        if not self._starting and not self._queued:
            return
        import ray

        for index, (handle, ready, sent) in list(self._starting.items()):
            done, _ = ray.wait([ready], timeout=0)
            if not done:
                continue
            del self._starting[index]
            try:
                ray.get(ready)
            except _worker_lost() as exc:
                # The same loss, retried: not a new restart.
                log.warning("starting rollout worker %d failed (%s); retrying", index, exc)
                self._start_replacement(index)
                continue
            if self._weights_ref is not sent:  # they moved on while it started
                self._set_weights(handle, self._weights_ref)
            self._healthy[index] = handle
            now = time.monotonic()
            self._downtime_ended_s += now - self._down_since.pop(index, now)
            self._last_heard[index] = now
        self._launch_queued()

    def stop(self) -> None:
        self.local_worker.close()
        if self._remote_class is None:
            return
        import ray

        for handle in [*self._healthy.values(), *(h for h, _, _ in self._starting.values())]:
            ray.kill(handle)
        self._healthy.clear()
        self._starting.clear()
        self._queued.clear()
        self._first_starting.clear()
        self._in_flight.clear()
        self._calls.clear()
        self._abandoned.clear()
        self._last_heard.clear()
        self._down_since.clear()


def _startup_slots() -> int:
    """How many remote workers may start at once: the Ray cluster's CPUs, less one where the
    driver's own node has CPUs in Ray (a local Ray: its learner needs one), and at least 1."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    own = sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["NodeID"] == node)
    return startup_slots(ray.cluster_resources().get("CPU", 0), own)


def startup_slots(cluster_cpus: float, driver_node_cpus: float) -> int:
    """Remote workers that may start at once (see WorkerSet._launch_queued): 1 on a 2-CPU
    laptop, 12 on a cluster of 12 one-CPU worker pods beside a head that offers Ray no CPUs."""
    return max(1, int(cluster_cpus) - (1 if driver_node_cpus >= 1 else 0))


def _worker_lost() -> tuple[type[Exception], ...]:
    """What a call on a lost worker raises: its actor died, or its result was lost with the
    worker's node (a batch still in that node's object store when it went)."""
    import ray

    return (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)
