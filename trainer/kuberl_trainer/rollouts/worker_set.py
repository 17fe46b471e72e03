"""WorkerSet: the driver's local worker plus the remote rollout workers (Ray actors), whose slots
the worker pool owns (worker_pool.py) and whose weights one broadcaster sends (broadcaster.py).

A remote worker that dies (killed, OOM, its node preempted) is replaced by a new actor in the
background; sampling continues on the healthy ones meanwhile, and the restart is counted. With no
healthy remote worker at all, the local worker samples so training never stalls. A replacement that
cannot be placed yet (its node is gone and no other node has room for it) waits in Ray's queue
without holding anything up: it joins once its first call returns, when a node has rejoined. The
time each worker slot went without a working worker is measured (`downtime_s`).

Observation and reward normalization (spec.trainer.normalization, `GlobalNormalization`): each
remote worker's batch carries the statistics of what it sampled since its previous one, merged as
the batch arrives (the pool hands every result it fetches to `merge_from`), and the global
statistics travel with the weights: each put puts a copy beside them, and every weight call
(`send_weights`, `offer_weights`, a replacement's first) hands both to the worker.

Start-up: at most as many remote workers start at once as the Ray cluster has CPUs to spare
(`startup_slots`: its CPUs, less the one the learner takes where it shares a node with them),
the others as those have started. Starting one takes a CPU for half a second (Python, Ray, kuberl
and its envs; 1.4-1.6 CPU-seconds where its policy needs torch, see policy/acting.py), so
workers started all at once on a laptop share its CPUs and all come late; one at a time,
training starts with the first and the others join as replacements do, in the order the policy
gives (`Policy.worker_start_order`: Ape-X's span its exploration rates).

Calls on remote workers go through the pool (`call`, `call_tagged`; results from `completed`, or
as events from `events`): the synchronous `sample()` and the asynchronous optimizers alike, so a
dead worker's calls are dropped, the worker replaced and the loss counted in one place.

Waits on the workers return to Python at least every WAIT_SLICE_S to look for the driver's stop
request, so a preempted driver never waits out an iteration to checkpoint (see interrupt.py).

Elastic fleets (rolloutWorkers.minReplicas, maxReplicas): there is a slot for each of the most
workers (`num_remote`), training starts once the fewest (`fewest`) can be placed, and the other
slots wait in Ray's queue and join as nodes come (see worker_pool.py). `batch_replicas` (the
manifest's replicas) sizes the synchronous optimizers' batches, which `sample(fragments=...)`
splits over the workers that are there.

Placement: remote workers are created with Ray's SPREAD strategy and the job's custom Ray resources
(rolloutWorkers.rayResources). What the Ray cluster could never place fails at once with the
manifest field to change (`check_resources`, in kuberl_trainer.rollouts.resources), where Ray
itself would wait forever.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from kuberl_trainer.envs.normalization import GlobalNormalization
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.broadcaster import WeightsBroadcaster
from kuberl_trainer.rollouts.interrupt import StopRequest
from kuberl_trainer.rollouts.node_drain import DrainWatch
from kuberl_trainer.rollouts.pool_events import Completed, Event
from kuberl_trainer.rollouts.resources import (
    ResourceRequest,
    check_resources,
    rollout_workers_request,
)
from kuberl_trainer.rollouts.worker_pool import WorkerPool

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
        fewest: int | None = None,
        batch_replicas: int | None = None,
    ):
        """`worker_kwargs(index)` gives the constructor arguments of worker `index` (0 is the
        local worker, 1.. the remote ones), so every worker gets its own seed. `ray_resources`
        are custom Ray resources each remote worker requires (`{"spot": 1}` pins them to the
        nodes that advertise `spot`). `start_order` is the order in which the remote workers
        start where not all can start at once (`Policy.worker_start_order`; by index if not
        given). `num_remote` is the number of slots, the most workers (maxReplicas); `fewest`
        (minReplicas; all of them if None) must fit the live Ray nodes now, the others join as
        nodes come. `batch_replicas` (replicas; `num_remote` if None) is the number of workers
        whose batches a synchronous iteration learns on, whatever the number there."""
        self.local_worker = worker_class(**worker_kwargs(0))
        self.normalization = GlobalNormalization(self.local_worker)
        self.broadcaster = WeightsBroadcaster(self.normalization, self.local_worker.get_weights)
        self.local_copy = False  # the local worker acts with a CPU copy of the learner's policy
        self.stragglers_dropped = 0
        # Set by the driver: checked wherever an iteration waits on its workers.
        self.stop_request = StopRequest()
        self.pool: WorkerPool | None = None
        # What the remote workers ask of the Ray cluster: an optimizer that places actors of
        # its own checks them together with these (`check_resources`).
        self.resource_requests: list[ResourceRequest] = []
        self.batch_replicas = num_remote if batch_replicas is None else batch_replicas
        if not num_remote:
            return
        resources = dict(ray_resources or {})
        placeable = num_remote if fewest is None else min(fewest, num_remote)
        # Only the fewest must fit now: the other slots wait in Ray's queue for their nodes.
        self.resource_requests.append(
            rollout_workers_request(placeable, cpus_per_worker, resources)
        )
        check_resources(self.resource_requests)
        # SPREAD: one worker per node while there are free nodes. Ray's default policy may
        # fill a node first, and with cpusPerWorker 0.5 put two workers on one pod's CPU.
        remote_class = worker_class.as_remote(num_cpus=cpus_per_worker).options(
            scheduling_strategy="SPREAD", resources=resources
        )
        cpus = max(1, int(cpus_per_worker))
        order = list(start_order or range(1, num_remote + 1))
        assert sorted(order) == list(range(1, num_remote + 1)), start_order
        self.pool = WorkerPool(
            lambda index: remote_class.remote(**worker_kwargs(index), cpus=cpus),
            self.broadcaster,
            self.normalization.merge_from,
            lambda: self.stop_request.check(),  # the driver may replace the request
            order,
            _startup_slots(),
            placeable,
            DrainWatch(),
        )

    @property
    def restarts(self) -> int:
        """Remote workers lost and replaced (a replacement that fails to start is retried, not
        counted again)."""
        return 0 if self.pool is None else self.pool.restarts

    @property
    def num_remote(self) -> int:
        return 0 if self.pool is None else self.pool.num_slots

    @property
    def remote_workers(self) -> list:
        return list(self._handles.values())

    @property
    def _handles(self) -> dict[int, Any]:
        """Index → handle of the remote workers taking calls, as last promoted."""
        return {} if self.pool is None else self.pool.handles

    @property
    def healthy_indices(self) -> list[int]:
        """Indices of the remote workers ready for calls (replacements join once started). Every
        optimizer asks this before it waits or samples, so it is also a safe point for a stop
        request (IterationAbandoned)."""
        self.stop_request.check()
        return [] if self.pool is None else list(self.pool.healthy)

    def takes_calls(self, index: int) -> bool:
        """Whether remote worker `index` takes calls now (not lost, starting or draining)."""
        return self.pool is not None and index in self.pool.handles

    @property
    def num_ready(self) -> int:
        """Remote workers ready for calls now; replacements still starting or waiting for a node
        to be placed on are not."""
        return 0 if self.pool is None else len(self.pool.healthy)

    @property
    def downtime_s(self) -> float:
        """Seconds the remote worker slots have gone without a working worker, summed over slots
        (see `WorkerPool.downtime_s`)."""
        return 0.0 if self.pool is None else self.pool.downtime_s

    # -- weights ------------------------------------------------------------------------------

    def sync_weights(self, global_timesteps: int) -> None:
        """Broadcast the local policy's weights: one object-store put, one call per worker; the
        local worker's CPU copy, if it has one, takes the same arrays."""
        self.broadcaster.global_timesteps = global_timesteps
        self.local_worker.policy.set_global_timesteps(global_timesteps)
        if not self.num_remote and not self.local_copy:
            return
        weights = self.local_worker.get_weights()
        self.refresh_local_copy(weights)
        if not self.num_remote:
            return
        ref = self.put_weights(weights, global_timesteps)
        for index in list(self._handles):
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
        return self.broadcaster.put(weights, global_timesteps)

    def send_weights(self, index: int, weights_ref) -> None:
        """Weights to one worker (with the normalization statistics put with the newest ones);
        queued behind its calls in flight, so its next call uses them."""
        self.broadcaster.send(self._handles[index], weights_ref)

    def offer_weights(
        self, index: int, version: int, weights: Callable[[], Weights], global_timesteps: int
    ) -> None:
        """Weights `version` to worker `index`, put once for every worker it goes to:
        `weights()` is read only when that version is not the one put last. None to a worker
        that no longer takes calls (its node drains: its last result came after)."""
        if not self.takes_calls(index):
            return
        if not self.broadcaster.is_put(version):
            # Through put_weights and send_weights, as every broadcast: one path to watch.
            self.put_weights(weights(), global_timesteps)
            self.broadcaster.version = version
        self.send_weights(index, self.broadcaster.ref)
        self.broadcaster.held[index] = version

    # -- the task pool ------------------------------------------------------------------------

    def call(self, index: int, method: str, *args):
        """Start `method(*args)` on remote worker `index`; its result comes from `completed()`
        and `events()`."""
        return self.pool.call(index, method, *args)

    def call_tagged(self, index: int, tag: Any, method: str, *args):
        """`call`, with `tag` (a weights version, say) on the call's `Completed` or `Lost`."""
        ref = self.call(index, method, *args)
        self.pool.tag(ref, tag)
        return ref

    @property
    def calls_in_flight(self) -> list:
        """The object refs of the calls in flight whose results are wanted, to wait on together
        with other actors' calls."""
        return [] if self.pool is None else self.pool.pending

    def in_flight(self, index: int) -> int:
        """Calls started on worker `index` whose results have not been taken yet."""
        return 0 if self.pool is None else self.pool.in_flight(index)

    def completed(self, timeout: float | None = None, refs: list | None = None) -> list[Completed]:
        """Every call in flight (or of `refs`) that has finished, each unpacking as (worker
        index, result), waiting up to `timeout` seconds for the first (None: as long as it
        takes). A dead worker's calls are dropped, and the worker replaced and counted."""
        return [] if self.pool is None else self.pool.collect(timeout, refs)

    def events(self, timeout: float | None = None) -> list[Event]:
        """What happened since the last look, in order: workers that joined or were lost, then
        the calls completed (waiting up to `timeout` for the first unless there is news), then
        the losses found while fetching them. The asynchronous optimizers' loops read these."""
        if self.pool is None:
            return []
        news = self.pool.take_news()
        completed = self.completed(0.0 if news else timeout)
        return [*news, *completed, *self.pool.take_news()]

    def sample(
        self, timeout: float | None = None, fragments: Callable[[int], list[int]] | None = None
    ) -> list[SampleBatch]:
        """One batch per healthy remote worker, or from the local worker when there are none.

        With `fragments`, `fragments(n)` gives the env steps of each of the `n` workers sampling
        (the local worker's too, as `n` = 1), so that the batch's size does not depend on how
        many there are (see `optimizers.sync_samples.fragment_lengths`); a worker given none
        sits the step out. Without, each samples its rollout_length.

        With `timeout`, the step learns on what arrived by then (at least one batch): workers
        still sampling are stragglers, counted in `stragglers_dropped`; their batches are thrown
        away when they come, and they sit out the steps until then."""
        if self.pool is not None:
            self.pool.reap_abandoned()  # a straggler that has finished takes calls from this step
            self.pool.take_news()  # a synchronous step has nothing to keep of joins and losses
        free = [index for index in self.healthy_indices if not self.in_flight(index)]
        if not free and self.pool is not None and self.pool.has_abandoned:
            # every worker is still on a straggling call
            self.pool.wait_for_an_abandoned_call(timeout)
            free = [index for index in self.healthy_indices if not self.in_flight(index)]
        if not free:  # none healthy, or none free in time: the local worker keeps training going
            return [self._sample_locally(fragments)]
        steps: list[int | None] = [None] * len(free) if fragments is None else fragments(len(free))
        refs = [
            self.call(index, "sample") if n is None else self.call(index, "sample", n)
            for index, n in zip(free, steps, strict=True)
            if n is None or n > 0
        ]
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
            refs = [ref for ref in refs if self.pool.is_in_flight(ref)]
        if refs:
            self.stragglers_dropped += len(refs)
            self.pool.abandon(refs)
            log.info("learning without %d straggling rollout worker(s)", len(refs))
        if not batches:  # every worker died on the way: the local worker keeps training going
            return [self._sample_locally(fragments)]
        return batches

    def _sample_locally(self, fragments: Callable[[int], list[int]] | None) -> SampleBatch:
        """A batch from the local worker (the whole iteration's, with `fragments`); a stop
        request may cut it short (it only reads the policy)."""
        with self.stop_request.abandonable():
            if fragments is None:
                return self.local_worker.sample()
            return self.local_worker.sample(fragments(1)[0])

    def foreach_remote(self, method: str, *args) -> list:
        import ray

        return ray.get([getattr(h, method).remote(*args) for h in self.remote_workers])

    def stop(self) -> None:
        self.local_worker.close()
        if self.pool is not None:
            self.pool.stop()


def _startup_slots() -> int:
    """How many remote workers may start at once: the Ray cluster's CPUs, less one where the
    driver's own node has CPUs in Ray (a local Ray: its learner needs one), and at least 1."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    own = sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["NodeID"] == node)
    return startup_slots(ray.cluster_resources().get("CPU", 0), own)


def startup_slots(cluster_cpus: float, driver_node_cpus: float) -> int:
    """Remote workers that may start at once (see WorkerPool._launch_queued): 1 on a 2-CPU
    laptop, 12 on a cluster of 12 one-CPU worker pods beside a head that offers Ray no CPUs."""
    return max(1, int(cluster_cpus) - (1 if driver_node_cpus >= 1 else 0))
