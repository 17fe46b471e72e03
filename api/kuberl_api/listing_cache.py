"""A listing kept for a few seconds: the kubernetes backend's list of every RLJob, which each
scrape of /metrics shows, filtered, to whoever may see it.

Why the listing and never an authorization: the listing is the API's own view (its
ServiceAccount's), the same whoever scrapes, so one entry serves every caller; each caller is
still authenticated and reviewed anew at every scrape and sees only the namespaces its own reviews
allow, so a token without rights never reads cached jobs and a revoked RoleBinding counts at once.
A burst of scrapes (several Prometheus replicas) then costs Kubernetes one list per few seconds
instead of one each. A failed load is not kept: the next caller tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ListingCache(Generic[T]):
    """One value, loaded again once it is `ttl_seconds` old (by `clock`, in seconds)."""

    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds, self.clock = ttl_seconds, clock
        self._value: T | None = None
        self._loaded_at = 0.0
        # One load at a time: callers arriving while it runs wait for it and share its value.
        self._lock = asyncio.Lock()

    async def get(self, load: Callable[[], Awaitable[T]]) -> T:
        """The kept value while it is younger than the TTL, else a new one from `load` (whose
        exception, if any, reaches the caller and keeps nothing)."""
        async with self._lock:
            if self._value is None or self.clock() - self._loaded_at >= self.ttl_seconds:
                started = self.clock()  # the value's age counts from when it was asked for
                self._value = await load()
                self._loaded_at = started
            return self._value
