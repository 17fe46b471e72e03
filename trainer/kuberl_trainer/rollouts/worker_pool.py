"""The worker pool: the one owner of the remote rollout worker slots, and of the calls on them.

A slot (a worker index, 1..N) is queued, starting, healthy or draining (its node is about to go:
its calls finish, it gets none new). The pool knows which actor holds
it, its calls in flight, when it last answered and, while it has no working worker, since when.
Whoever drives the pool (the WorkerSet's synchronous `sample()`, the asynchronous optimizers)
makes calls on healthy workers, each with a `tag` of its own (the weights version it was made
with, say), and reads what happened as events (`WorkerSet.events`: `take_news()`, then
`collect()`; the events are in pool_events.py):

- `Completed(worker, result, tag, ref)`: a call's result arrived;
- `Joined(worker)`: a worker, started first or replacing a lost one, takes calls from now on;
- `Lost(worker, calls)`: a worker died, or its node went; the tags of its calls in flight, which
  are dropped.

One place decides what a lost call means (`_lose`: the worker is killed, its calls dropped, the
restart counted, a replacement started) and one place replaces workers (`_start`).

A worker whose node drains (Ray was told the node will go: see node_drain.py) gets no more
calls; once its calls in flight are done it is ended and reported `Lost` with none, not counted
as a restart, and its replacement waits for a place on a node that stays.

A replacement joins once its first call, the weight sync, returns; until then sampling never
waits for it, and one that cannot be placed yet (its node gone, no room elsewhere) waits in Ray's
queue. At most `max_starting` workers start at once (see `WorkerSet`); the first `placeable` of
them are healthy at once, so the first step waits for their batches as for any.

The fleet is elastic: the slots are the most workers the job may have (maxReplicas), and only the
fewest it trains with (minReplicas) are known to fit the Ray cluster when the pool starts. The
others start as replacements do, wait in Ray's queue until a node has room (a spot pod scaled up)
and join then; a worker whose node goes is lost and its slot waits again. So the healthy workers
follow what Ray can place, and nothing waits for a slot that has no node.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kuberl_trainer.rollouts.broadcaster import WeightsBroadcaster
from kuberl_trainer.rollouts.interrupt import WAIT_SLICE_S
from kuberl_trainer.rollouts.node_drain import DrainWatch
from kuberl_trainer.rollouts.pool_events import Completed, Joined, Lost

log = logging.getLogger(__name__)


@dataclass
class _Starting:
    """A slot's actor that is not taking calls yet: `ready` is its first call's ref (the weight
    sync, which carried `sent`), or for one started first its constructor's."""

    handle: Any
    ready: Any
    sent: Any = None


class WorkerPool:
    def __init__(
        self,
        start_actor: Callable[[int], Any],
        broadcaster: WeightsBroadcaster,
        on_result: Callable[[Any], None],
        check_stop: Callable[[], None],
        start_order: Sequence[int],
        max_starting: int,
        placeable: int | None = None,
        drains: DrainWatch | None = None,
    ):
        """`start_actor(index)` creates worker `index`'s actor; `on_result(result)` sees every
        result fetched (a straggler's too), for the statistics it carries; `check_stop()` raises
        where the driver asked to stop (IterationAbandoned), every WAIT_SLICE_S of a wait. The
        workers start in
        `start_order`, at most `max_starting` at once; of those, the first `placeable` (all, if
        None: the Ray cluster can place that many now) are healthy at once, and the others join
        once placed and started. `drains` says which workers' nodes drain (None: never looked
        at)."""
        self.broadcaster = broadcaster
        self.restarts = 0
        self.drained = 0  # workers ended because their node drained
        self._drains = drains
        self._draining: dict[int, Any] = {}  # index → handle: its calls finish, no new ones
        self._start_actor = start_actor
        self._on_result = on_result
        self._check_stop = check_stop
        self._max_starting = max_starting
        self._healthy: dict[int, Any] = {}  # index → actor handle taking calls
        self._starting: dict[int, _Starting] = {}  # replacements and queued workers starting
        self._constructing: dict[int, Any] = {}  # started first, healthy: index → ready ref
        self._queued: list[int] = list(start_order)
        self._calls: dict[Any, tuple[int, Any]] = {}  # object ref of a call → (index, tag)
        self._in_flight: Counter[int] = Counter()  # worker index → its calls in flight
        self._abandoned: set[Any] = set()  # calls whose results nobody wants (stragglers)
        self._last_heard: dict[int, float] = {}  # index → when its worker last answered
        self._down_since: dict[int, float] = {}  # index → since when the slot has no worker
        self._downtime_ended_s = 0.0  # downtime of the outages already over
        self._news: list[Joined | Lost] = []  # until the next `take_news()`
        self._launch_queued(healthy_at_once=len(start_order) if placeable is None else placeable)

    # -- slots --------------------------------------------------------------------------------

    @property
    def num_slots(self) -> int:
        """The slots, whatever their state: the remote workers asked for."""
        return len(self._healthy) + len(self._draining) + len(self._starting) + len(self._queued)

    @property
    def handles(self) -> dict[int, Any]:
        """Index → handle of the workers taking calls, as last promoted."""
        return self._healthy

    @property
    def healthy(self) -> dict[int, Any]:
        """Index → handle of the workers taking calls, after promoting those that have started
        and setting aside those whose node drains."""
        self._promote_started_workers()
        self._heed_drains()
        return self._healthy

    @property
    def downtime_s(self) -> float:
        """Seconds the slots have gone without a working worker, summed over slots: for each
        worker lost, from the last call it answered to the first its replacement answered;
        outages still going on count up to now."""
        now = time.monotonic()
        return self._downtime_ended_s + sum(now - since for since in self._down_since.values())

    # -- calls --------------------------------------------------------------------------------

    def call(self, index: int, method: str, *args: Any) -> Any:
        """Start `method(*args)` on healthy worker `index`; its result comes as an event."""
        ref = getattr(self._healthy[index], method).remote(*args)
        self._calls[ref] = (index, None)
        self._in_flight[index] += 1
        return ref

    def in_flight(self, index: int) -> int:
        """Calls started on worker `index` whose results have not been taken yet."""
        return self._in_flight[index]

    def is_in_flight(self, ref: Any) -> bool:
        """Whether the call `ref` is in flight: started, its result not taken, not dropped."""
        return ref in self._calls

    @property
    def pending(self) -> list[Any]:
        """The calls in flight whose results are wanted."""
        return [ref for ref in self._calls if ref not in self._abandoned]

    def collect(self, timeout: float | None = None, refs: list | None = None) -> list[Completed]:
        """Every call in flight (or of `refs`) that has finished, waiting up to `timeout` seconds
        for the first (None: as long as it takes). A lost worker's calls are dropped, and the
        loss reported by `take_news()`."""
        self.reap_abandoned()
        wanted = self._calls if refs is None else refs
        pending = [r for r in wanted if r in self._calls and r not in self._abandoned]
        if not pending or not self._wait_for_one(pending, timeout):
            return []
        import ray

        # Take every result already there, not just the first.
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        completed = []
        for ref in ready:
            call = self._forget(ref)
            if call is None:  # dropped with its worker, which died earlier in this loop
                continue
            index, tag = call
            try:
                result = ray.get(ref)
            except _worker_lost() as exc:
                log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                self._lose(index, dropped=(tag,))
                continue
            self._on_result(result)
            self._last_heard[index] = time.monotonic()
            completed.append(Completed(index, result, tag, ref))
        return completed

    def tag(self, ref: Any, tag: Any) -> None:
        """Attach `tag` to a call in flight: its `Completed` or `Lost` event carries it."""
        self._calls[ref] = (self._calls[ref][0], tag)

    @property
    def has_news(self) -> bool:
        """Whether a worker joined or was lost since the last `take_news()`."""
        return bool(self._news)

    def take_news(self) -> list[Joined | Lost]:
        """The workers that joined or were lost since the last look, in order."""
        news, self._news = self._news, []
        return news

    def abandon(self, refs: list) -> None:
        """Nobody wants these calls' results: their workers take calls again once they finish."""
        self._abandoned.update(refs)

    def wait_for_an_abandoned_call(self, timeout: float | None) -> None:
        """Until a straggling call finishes (its worker takes calls again), or `timeout`."""
        if self._abandoned:
            self._wait_for_one(list(self._abandoned), timeout)
        self.reap_abandoned()

    @property
    def has_abandoned(self) -> bool:
        return bool(self._abandoned)

    def _wait_for_one(self, refs: list, timeout: float | None) -> bool:
        """Until one of `refs` is ready (True) or `timeout` seconds passed (None: as long as it
        takes). Returns to Python every WAIT_SLICE_S to look for a stop request: a dead node's
        calls fail only once Ray has noticed, and a slow env's batch may take minutes."""
        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_stop()
            left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, min(left, WAIT_SLICE_S)))
            if ready:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _forget(self, ref: Any) -> tuple[int, Any] | None:
        """Take a call out of the pool: (its worker's index, its tag), or None if not in it."""
        call = self._calls.pop(ref, None)
        if call is not None:
            self._in_flight[call[0]] -= 1
        return call

    def reap_abandoned(self) -> None:
        """Forget abandoned calls that have finished, so their workers take calls again."""
        if not self._abandoned:
            return
        import ray

        done, _ = ray.wait(list(self._abandoned), num_returns=len(self._abandoned), timeout=0)
        for ref in done:
            self._abandoned.discard(ref)
            call = self._forget(ref)
            index = None if call is None else call[0]
            try:
                # Fetched to learn whether the worker died on the way (a late batch costs one
                # transfer; an error left unread would be logged by Ray as unhandled), and for
                # the normalization statistics of what it sampled, which count all the same.
                self._on_result(ray.get(ref))
                if index in self._healthy:
                    self._last_heard[index] = time.monotonic()
            except _worker_lost() as exc:
                if index in self._healthy:
                    log.warning("rollout worker %d died (%s); starting a replacement", index, exc)
                    self._lose(index)

    # -- losses and replacements --------------------------------------------------------------

    def _lose(self, index: int, dropped: tuple = (), restart: bool = True) -> None:
        """A worker died (or, not a `restart`, its node drains): drop its calls, count the
        restart, start its replacement. `dropped` are the tags of its calls already taken out of
        the pool."""
        import ray

        # Dead already, or alive but unusable (a result lost): never two workers in one slot.
        ray.kill(self._healthy.pop(index) if index in self._healthy else self._draining.pop(index))
        self._down_since[index] = self._last_heard.pop(index, time.monotonic())
        tags = list(dropped)
        for ref in [ref for ref, (owner, _) in self._calls.items() if owner == index]:
            tags.append(self._forget(ref)[1])
            self._abandoned.discard(ref)
        self.broadcaster.forget(index)
        if self._drains is not None:
            self._drains.forget(index)
        self.restarts += restart
        self._start(index)
        self._news.append(Lost(index, tuple(tags)))

    def _heed_drains(self) -> None:
        """Give the workers on draining nodes no more calls, and end those whose calls are done
        (their replacements wait for a place on a node that stays: Ray places nothing new on a
        draining node)."""
        if self._drains is None:
            return
        for index in self._drains.on_draining_nodes(list(self._healthy)):
            log.warning("rollout worker %d's node drains: it gets no more calls", index)
            self._draining[index] = self._healthy.pop(index)
        for index in [i for i in self._draining if not self._in_flight[i]]:
            self.drained += 1
            self._lose(index, restart=False)

    def _start(self, index: int) -> None:
        """A new actor for slot `index`; it joins the healthy ones once its first call (the
        weight sync) has returned, so sampling never waits for it."""
        handle = self._start_actor(index)
        ready, sent = self.broadcaster.to_joining(index, handle)
        self._starting[index] = _Starting(handle, ready, sent)

    def _launch_queued(self, healthy_at_once: int = 0) -> None:
        """Start queued workers while fewer than `max_starting` are starting (`startup_slots`).
        Starting a worker is CPU-bound (Python and Ray, kuberl and its envs: 0.41 CPU-seconds on
        a 2-core VM, 1.4-1.6 with torch), and workers that start together share the CPUs: 12 at
        once on 2 cores, each importing torch, answered their first call after 12 s, beside a
        learner that had nothing to learn on. The first `healthy_at_once` started are healthy
        at once, so the first step waits for their batches as for any (only workers the Ray
        cluster can place now: a call on one it cannot would wait for a node); the others join
        in the background while training goes on with the workers already up."""
        import ray

        if self._constructing:
            refs = list(self._constructing.values())
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for index in [i for i, ref in self._constructing.items() if ref in done]:
                del self._constructing[index]
        while self._queued and len(self._starting) + len(self._constructing) < self._max_starting:
            index = self._queued.pop(0)
            if healthy_at_once > 0:
                healthy_at_once -= 1
                handle = self._healthy[index] = self._start_actor(index)
                self._placed(index, handle)
                self._constructing[index] = handle.__ray_ready__.remote()
                self._last_heard[index] = time.monotonic()
                self._news.append(Joined(index))
            else:
                self._start(index)

    def _promote_started_workers(self) -> None:
        """Move replacements and queued workers whose first call (the weight sync) finished into
        the healthy set, and start more queued ones in their place."""
        if not self._starting and not self._queued:
            return
        import ray

        for index, starting in list(self._starting.items()):
            done, _ = ray.wait([starting.ready], timeout=0)
            if not done:
                continue
            del self._starting[index]
            try:
                ray.get(starting.ready)
            except _worker_lost() as exc:
                # The same loss, retried: not a new restart.
                log.warning("starting rollout worker %d failed (%s); retrying", index, exc)
                self._start(index)
                continue
            self.broadcaster.catch_up(index, starting.handle, starting.sent)
            self._healthy[index] = starting.handle
            self._placed(index, starting.handle)
            now = time.monotonic()
            self._downtime_ended_s += now - self._down_since.pop(index, now)
            self._last_heard[index] = now
            self._news.append(Joined(index))
        self._launch_queued()

    def _placed(self, index: int, handle: Any) -> None:
        if self._drains is not None:
            self._drains.placed(index, handle)

    def stop(self) -> None:
        """Kill every actor, started or starting; the pool is empty after."""
        import ray

        starting = [s.handle for s in self._starting.values()]
        for handle in [*self._healthy.values(), *self._draining.values(), *starting]:
            ray.kill(handle)
        for state in (self._healthy, self._draining, self._starting, self._constructing):
            state.clear()
        self._calls.clear()
        for state in (self._queued, self._news):
            state.clear()
        self._in_flight.clear()
        self._abandoned.clear()
        self._last_heard.clear()
        self._down_since.clear()


def _worker_lost() -> tuple[type[Exception], ...]:
    """What a call on a lost worker raises: its actor died, or its result was lost with the
    worker's node (a batch still in that node's object store when it went)."""
    import ray

    return (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)
