"""The asynchronous optimizers' flow control, as pure functions: how many calls to keep in flight
on a worker, which worker gets the next call, when a batch is too stale to learn on and when a
worker is due fresh weights. No Ray, no clocks, no state: the optimizers (async_gradients.py,
async_replay.py, async_samples.py) pass in what they observed, so each rule is tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# A worker that has kept its latest call for this many times a call's sampling time (and at least
# MIN_PATIENCE_S) is left out of the calls counted in flight, so that another worker samples.
STRAGGLER_PATIENCE = 10
MIN_PATIENCE_S = 1.0


def calls_to_top_up(in_flight: int, limit: int) -> int:
    """Calls to start on a worker that has `in_flight` calls, to keep `limit` in flight."""
    return max(0, limit - in_flight)


def calls_to_keep_in_flight(
    sample_s: float, learn_s: float, calls_per_step: float, capacity: int
) -> int:
    """Sample calls to keep in flight, of the `capacity` the workers take, when a call samples
    for `sample_s` seconds (not counting its waits for a CPU), a learn call takes `learn_s` and a
    train batch holds `calls_per_step` calls: the calls the learner takes while one samples, plus
    one train batch's. With 12 workers of 64 CartPole envs on 2 cores (a call samples in about
    half a learn call), 2: batches lag about 3 learner steps where, every worker sampling, they
    lagged 10-16, and the learner is as busy."""
    steps_while_sampling = math.ceil(sample_s / learn_s) if learn_s > 0 else capacity
    return max(1, min(capacity, math.ceil(calls_per_step * (steps_while_sampling + 1))))


def in_call_order(workers: Iterable[int], last_return: Mapping[int, float]) -> list[int]:
    """The order in which workers get calls: those that have not returned a batch yet (started
    or replaced), then those that returned one, the latest first, so that where the learner
    takes fewer calls than the workers could make, the same few workers sample on."""

    def key(index: int) -> tuple[bool, float]:
        returned = last_return.get(index)
        return (returned is not None, -(returned or 0.0))

    return sorted(workers, key=key)


def straggler_patience_s(sample_s: float | None) -> float:
    """How long a worker may keep its latest call before it counts as straggling."""
    return max(MIN_PATIENCE_S, STRAGGLER_PATIENCE * (sample_s or 0.0))


def counts_in_flight(
    returned_before: bool, since_last_call_s: float, sample_s: float | None
) -> bool:
    """Whether a worker's calls count against `calls_to_keep_in_flight`: not while it starts
    (it has returned nothing: the actor may take many seconds to start), nor once it has kept its
    latest call past `straggler_patience_s` (a hung env, a process held up)."""
    return returned_before and since_last_call_s < straggler_patience_s(sample_s)


def is_stale(lag: int, max_policy_lag: int | None) -> bool:
    """A batch sampled `lag` learner steps ago is too stale to learn on (no bound: never)."""
    return max_policy_lag is not None and lag > max_policy_lag


def weights_due(held: int | None, newest: int, interval: int) -> bool:
    """Whether a worker holding weights version `held` (None: unknown, as a worker that has just
    started) gets version `newest` before its next call: once `interval` versions have passed."""
    return held is None or newest - held >= interval


def replay_behind(replayed: int, added: int, intensity: float | None) -> bool:
    """Replay has not reached `intensity` transitions replayed per transition sampled (no
    intensity: replay is never held back, nor sampling)."""
    return intensity is not None and replayed < intensity * added
