"""How many `GET .../logs?follow=true` streams may be open at once, per job and per caller.

A follow holds a connection, a task and, on a cluster, reads at the operator's log relay for as long
as the job runs, and anyone allowed to get a job may open one. So the API keeps at most
`per_job` follows of one job and `per_caller` follows of one caller (one bearer token; everyone
shares one without tokens) open at once, and refuses more with 429 Too Many Requests and a
Retry-After. A follow's place is given back when its stream ends, the client's going away
included. The limits hold per API process (KUBERL_LOG_FOLLOWS_PER_JOB and
KUBERL_LOG_FOLLOWS_PER_CALLER set them).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from fastapi import Request

from kuberl_api.backend import ApiError

PER_JOB_ENV = "KUBERL_LOG_FOLLOWS_PER_JOB"
PER_CALLER_ENV = "KUBERL_LOG_FOLLOWS_PER_CALLER"
RETRY_AFTER_S = 10
"""What a refused caller is told to wait: follows last as long as their jobs run."""


@dataclass(frozen=True)
class FollowLimits:
    """The most follows open at once."""

    per_job: int = 8
    """Of one job, whoever follows it."""
    per_caller: int = 4
    """Of one caller (bearer token), whichever jobs."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> FollowLimits:
        """The limits from KUBERL_LOG_FOLLOWS_PER_JOB and KUBERL_LOG_FOLLOWS_PER_CALLER (the
        defaults where unset). Raises ValueError naming the variable of a value that is not a
        whole number from 1."""
        return cls(
            per_job=_limit(environ, PER_JOB_ENV, cls.per_job),
            per_caller=_limit(environ, PER_CALLER_ENV, cls.per_caller),
        )


def _limit(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}: a whole number from 1 is required, got {value!r}")
    return int(value)


class TooManyFollows(ApiError):
    """A follow refused for its limit: 429, with the seconds to wait before trying again."""

    def __init__(self, message: str) -> None:
        super().__init__(429, "TooManyRequests", message)
        self.retry_after_s = RETRY_AFTER_S


def caller_of(token: str | None) -> str:
    """Who follows, for the per-caller limit: a digest of the bearer token (the token itself is
    not kept), or "" for everyone without one."""
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


class Follows:
    """The follows open now, counted per job and per caller."""

    def __init__(self, limits: FollowLimits) -> None:
        self.limits = limits
        self._by_job: Counter[tuple[str, str]] = Counter()
        self._by_caller: Counter[str] = Counter()

    def open(self, caller: str, job: tuple[str, str]) -> Callable[[], None]:
        """Counts a follow of `job` (namespace, name) by `caller`; returns what gives its place
        back (once, however often called). Raises TooManyFollows past a limit."""
        if self._by_job[job] >= self.limits.per_job:
            raise TooManyFollows(
                f'job "{job[1]}" in namespace "{job[0]}" is followed {self._by_job[job]} times '
                f"already, the most at once ({PER_JOB_ENV}): retry when a follow has ended"
            )
        if self._by_caller[caller] >= self.limits.per_caller:
            raise TooManyFollows(
                f"this caller follows {self._by_caller[caller]} logs already, the most at once "
                f"({PER_CALLER_ENV}): end one, or retry later"
            )
        self._by_job[job] += 1
        self._by_caller[caller] += 1
        closed = False

        def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                _take_one(self._by_job, job)
                _take_one(self._by_caller, caller)

        return close

    def open_now(self) -> int:
        """Follows open now, all jobs together."""
        return sum(self._by_job.values())


def _take_one(counts: Counter, key) -> None:
    """One less of `key`; none left drops its entry, so the counters hold only open follows."""
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]


def follows_of(request: Request) -> Follows:
    """The app's follows (create_app keeps them on app.state)."""
    return request.app.state.follows


async def aclose(chunks: AsyncIterator[str]) -> None:
    """Closes `chunks` (an async generator lets go of what it holds), where it can be closed."""
    if (close := getattr(chunks, "aclose", None)) is not None:
        await close()


async def closing(chunks: AsyncIterator[str], close: Callable[[], None]) -> AsyncIterator[str]:
    """`chunks`, then `close()` once they end, fail, or are given up (the stream is closed when
    the client goes away)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        close()
        await aclose(chunks)
