"""A cluster job's driver output, read through the operator's log relay
(kuberl_operator.log_relay).

Ray keeps a driver's output in a file inside the job's head pod, which `kubectl logs` does not
show, and serves it on the Jobs API behind the job's Ray auth token. That token would let its
holder run anything on the job's Ray cluster, so the API holds none: it asks the operator, which
holds them all, presenting the relay's own token (KUBERL_LOG_RELAY_TOKEN) at the relay's address
(KUBERL_LOG_RELAY_URL), both set by the chart. The relay answers with the driver's status and
output, and with nothing else of a head; the API's pods reach no Ray head at all.

Neither side holds a log whole: a snapshot is streamed through in pieces (its last lines cut on
the driver's node), and a follower reads, a bounded piece at a time, from the one reader of the
driver that the relay shares between all its followers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kuberl_api.backend import ApiError
from kuberl_operator.log_relay import DriverOutput, LogRelay, RelayError
from kuberl_operator.spec import Phase, RLJob
from kuberl_operator.status.phases import ACTIVE

RELAY_URL_ENV = "KUBERL_LOG_RELAY_URL"
RELAY_TOKEN_ENV = "KUBERL_LOG_RELAY_TOKEN"


@dataclass(frozen=True)
class Driver:
    """A job's current driver: its job's identity and the attempt it runs."""

    namespace: str
    name: str
    uid: str
    attempt: int


MAX_POLL_S = 10.0
"""The longest wait between two looks for a driver that is not there yet (the wait doubles from
poll_s while it is not)."""
FOLLOW_WAIT_S = 10
"""How long one read of a follower waits at the relay for something new."""


def skipped(count: int) -> str:
    """What a follower is told in place of output it fell too far behind to get."""
    return (
        f"[kuberl: {count} characters of the driver's output skipped: a follow starts at most "
        "the relay's window back, and a follower that falls further behind goes on from there; "
        "GET .../logs without follow streams the whole log]\n"
    )


class DriverLogs:
    """Reads the drivers' output of every job through the operator's log relay (`close` ends
    its session)."""

    def __init__(self, environ: Mapping[str, str], poll_s: float = 1.0) -> None:
        """The relay's address and token from `environ` (KUBERL_LOG_RELAY_URL and
        KUBERL_LOG_RELAY_TOKEN), read once."""
        url, token = environ.get(RELAY_URL_ENV), environ.get(RELAY_TOKEN_ENV)
        self.poll_s = poll_s
        self.relay = LogRelay(url, token) if url and token else None
        self.unavailable: str | None = None
        """Why no driver's output can be read (answered as 501), or None."""
        if self.relay is None:
            self.unavailable = (
                f"the API has no log relay ({RELAY_URL_ENV} and {RELAY_TOKEN_ENV}: the "
                "operator's, which the chart sets) to read the driver's output from the job's "
                "Ray head through; read it in the head pod, where Ray writes it to a file "
                "(`kubectl logs` does not show it): "
                "kubectl exec <head pod> -- ray job logs <job>-<attempt>"
            )

    async def close(self) -> None:
        if self.relay is not None:
            await self.relay.close()

    def driver(self, job: dict[str, Any]) -> Driver | None:
        """The job's current driver, or None before its first attempt. Raises ApiError 501 when
        the API has no relay to read drivers through."""
        if self.unavailable:
            raise ApiError(501, "NotImplemented", self.unavailable)
        try:
            model = RLJob.model_validate(job)
        except ValidationError:
            return None  # the operator fails such a job without submitting a driver
        namespace, uid = model.metadata.namespace or "default", job["metadata"].get("uid")
        if model.status.attempt == 0 or not uid:
            return None
        return Driver(namespace, model.name, uid, model.status.attempt)

    @property
    def _relay(self) -> LogRelay:
        assert self.relay is not None  # driver() said so
        return self.relay

    async def _read(
        self, driver: Driver, after: int, tail_lines: int | None = None, wait_s: int = 0
    ) -> DriverOutput:
        return await self._relay.read(
            driver.namespace, driver.name, driver.uid, driver.attempt, after, tail_lines, wait_s
        )

    async def snapshot(self, job: dict[str, Any], tail_lines: int | None) -> AsyncIterator[str]:
        """The driver's output so far, in pieces (none before there is a driver). Raises ApiError
        before the first piece when the job's head cannot be read."""
        driver = self.driver(job)
        if driver is None or tail_lines == 0:
            return _nothing()
        try:
            return await self._relay.snapshot(
                driver.namespace, driver.name, driver.uid, driver.attempt, tail_lines
            )
        except RelayError as exc:
            raise _unreachable(job, exc) from None

    async def follow(
        self,
        job: dict[str, Any],
        read_job: Callable[[], Awaitable[dict[str, Any]]],
        tail_lines: int | None,
    ) -> AsyncIterator[str]:
        """The driver's output as it is written, until the Ray job ends. Before there is a driver
        (the job is Pending, or its head is coming up) the job is read again (`read_job`) after a
        wait that doubles from poll_s up to MAX_POLL_S; the stream ends at once when the job is
        not active (finished or suspended: its Ray cluster is gone or going) or no longer
        exists."""
        wait = self.poll_s
        while True:
            driver = self.driver(job)
            if driver is not None:
                try:
                    # With tail_lines, the relay answers once its reader has caught up.
                    output = await self._read(driver, 0, tail_lines, FOLLOW_WAIT_S)
                except RelayError:
                    output = None  # the head is not up (yet, or any more)
                if output is not None and output.found:
                    async for chunk in self._written_from(driver, output, tail_lines):
                        yield chunk
                    return
            if not _active(job):
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_POLL_S)
            try:
                job = await read_job()
            except ApiError:
                return  # deleted meanwhile

    async def _written_from(
        self, driver: Driver, output: DriverOutput, tail_lines: int | None
    ) -> AsyncIterator[str]:
        """`output` and what the driver writes after it, a read at a time, until it has exited (or
        its head goes away: a deleted cluster takes its drivers with it). Each read waits at the
        relay until there is something new. The last `tail_lines` lines are asked for again until
        the relay's reader has caught up with the log and answers them (length 0 until then)."""
        expected = 0
        while True:
            if tail_lines is None and output.start > expected:
                yield skipped(output.start - expected)
            if output.text:
                yield output.text
            if output.ended or not output.found:
                return
            if output.length > 0:
                tail_lines = None  # answered: from now on, what comes after
            expected = output.length
            try:
                output = await self._read(driver, expected, tail_lines, FOLLOW_WAIT_S)
            except RelayError:
                return


async def _nothing() -> AsyncIterator[str]:
    return
    yield


def _active(job: dict[str, Any]) -> bool:
    """Whether the job has, or will get by itself, a running driver (a job the operator has not
    seen yet has no phase: it is about to be Pending)."""
    return ((job.get("status") or {}).get("phase") or Phase.PENDING) in ACTIVE


def _unreachable(job: dict[str, Any], exc: RelayError) -> ApiError:
    name = job["metadata"]["name"]
    if _active(job):
        return ApiError(
            503,
            "ServiceUnavailable",
            f"the driver's output of job {name} is on its Ray head, which cannot be read now "
            f"(it may be starting): {exc}",
        )
    return ApiError(
        404,
        "NotFound",
        f"job {name} has no driver output any more: it was on the job's Ray head, which the "
        f"operator deletes when the job finishes or is suspended ({exc})",
    )
