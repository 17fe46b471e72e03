"""The operator's HTTP to the Ray heads: the Ray Jobs API, through which it submits a job's driver
(and the jobs that drain the Ray nodes of pods about to go), and the driver's metrics, from which
it reads the job's progress. No other module of the operator talks to a Ray head; the log relay
(log_relay.py) reads drivers' output for the API through it.

The operator never imports ray, so it speaks the Jobs API's REST endpoints (the same ones
`ray job submit` uses) with aiohttp, kopf's own HTTP client. Every request carries the cluster's
token (`Authorization: Bearer`), as Ray's token authentication requires. The clients of all jobs
share the operator's one `aiohttp.ClientSession` (its connection pool), which `RayHeads` opens and
the operator closes at cleanup; a client holds only a head's address and token.

Exactly once per attempt: the submission id is fixed per attempt (`builders.submission_id`), a
submission first looks the id up and only submits when it is unknown, and the Jobs API's refusal
of a duplicate id (an operator restarted between the two calls) also counts as "already there".

A driver's log is read in pieces, never whole into memory: `tail` follows it over the Jobs API's
websocket (`/api/jobs/{id}/logs/tail`, which sends what the driver writes as it writes it and ends
once it has exited), and `log_file` streams it, or only its last lines, as the head's log API
(`/api/v0/logs/file`) cuts it on the driver's node. `logs` reads it whole, in one piece (the
reconciler's reading of an ended driver's final record).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from kuberl_contract.drain import DRAIN_SUBMISSION_PREFIX
from kuberl_operator.status.observed import DriverState

JOBS_PATH = "/api/jobs/"
LOG_FILE_PATH = "/api/v0/logs/file"
DRIVER_LOG_FILE = "job-driver-{submission_id}.log"
"""The driver's log file on its node, as Ray names it (JOB_LOGS_PATH_TEMPLATE)."""
LOG_CHUNK_BYTES = 64 * 1024
"""The most `log_file` holds at once."""
TAIL_MESSAGE_BYTES = 4 * 1024 * 1024
"""The largest message of the Jobs API's log stream taken (a longer one breaks the stream off): Ray
sends ten lines or 20,000 characters at a time, so only a longer single line comes near it."""
TAIL_HEARTBEAT_S = 30.0
"""How often a quiet log stream is pinged, so that a head gone without a word is noticed."""
ENDED = frozenset({DriverState.SUCCEEDED, DriverState.FAILED, DriverState.STOPPED})
"""The Jobs API's statuses of a driver that has exited: its log is complete."""


class RayJobsError(RuntimeError):
    """The Jobs API could not be reached or refused a request; the message says which."""


@dataclass(frozen=True)
class DriverStatus:
    """A submission as the Jobs API reports it."""

    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED
    message: str
    exit_code: int | None = None
    """The driver's exit status once it has exited (Ray's driver_exit_code)."""
    node_id: str | None = None
    """The Ray node the driver runs on, whose log API holds its log (None before it starts)."""

    @property
    def ended(self) -> bool:
        return self.status in ENDED


class RayJobsClient:
    """One Ray head's Jobs API (`http://<head service>:8265`), spoken over `session`, which the
    caller owns (and shares between clients)."""

    def __init__(
        self,
        address: str,
        token: str | None,
        session: aiohttp.ClientSession,
        timeout_s: float = 10.0,
    ):
        self.address = address.rstrip("/")
        self.session = session
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def submit(
        self,
        submission_id: str,
        entrypoint: str,
        metadata: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> bool:
        """Submit the driver, with `env` added to its environment, unless this id already exists;
        True when this call submitted it."""
        if await self.status(submission_id) is not None:
            return False
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id,
            "metadata": metadata or {},
            "runtime_env": {"env_vars": env or {}},
        }
        status, text = await self._request("POST", JOBS_PATH, body)
        if status == 200:
            return True
        if status == 400 and "already exists" in text:  # submitted by a concurrent call
            return False
        raise RayJobsError(f"submitting {submission_id} to {self.address}: HTTP {status}: {text}")

    async def status(self, submission_id: str) -> DriverStatus | None:
        """The submission's status, or None when the Jobs API does not know the id."""
        status, text = await self._request("GET", f"{JOBS_PATH}{submission_id}")
        if status == 404:
            return None
        if status != 200:
            raise RayJobsError(
                f"reading {submission_id} from {self.address}: HTTP {status}: {text}"
            )
        return _driver_status(json.loads(text))

    async def statuses(self) -> dict[str, DriverStatus]:
        """Every driver submission the head knows, by id, in one request. Drivers started
        otherwise than through the Jobs API have no id, and drain jobs (DRAIN_SUBMISSION_PREFIX)
        are no driver: both are left out."""
        status, text = await self._request("GET", JOBS_PATH)
        if status != 200:
            raise RayJobsError(f"listing the jobs of {self.address}: HTTP {status}: {text}")
        return {
            submission: _driver_status(info)
            for info in json.loads(text)
            if (submission := info.get("submission_id"))
            and not submission.startswith(DRAIN_SUBMISSION_PREFIX)
        }

    async def tail(self, submission_id: str) -> AsyncIterator[str]:
        """The driver's log as the Jobs API streams it: from its start, then what the driver
        writes as it writes it (Ray reads the file each second), ending once the driver has exited
        and all of it has been sent. Raises RayJobsError when the head cannot be reached, refuses
        (an unknown id is its 404), or the stream breaks off before its end."""
        url = f"{self.address}{JOBS_PATH}{submission_id}/logs/tail"
        try:
            async with asyncio.timeout(self._timeout.total):
                ws = await self.session.ws_connect(
                    url,
                    headers=self._headers,
                    heartbeat=TAIL_HEARTBEAT_S,
                    max_msg_size=TAIL_MESSAGE_BYTES,
                )
            async with ws:
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.TEXT:
                        yield message.data
                    elif message.type == aiohttp.WSMsgType.ERROR:
                        raise RayJobsError(
                            f"the log stream of {submission_id} broke off: {ws.exception()}"
                        )
            if ws.close_code != aiohttp.WSCloseCode.OK:
                raise RayJobsError(
                    f"the log stream of {submission_id} broke off (close code {ws.close_code})"
                )
        except aiohttp.WSServerHandshakeError as exc:
            raise RayJobsError(
                f"following the log of {submission_id} on {self.address}: HTTP {exc.status}"
            ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RayJobsError(f"the Ray Jobs API at {self.address} is unreachable: {exc}") from exc

    async def log_file(
        self, submission_id: str, node_id: str, lines: int | None = None
    ) -> AsyncIterator[bytes]:
        """The driver's log as it stands, or its last `lines` lines (cut on the driver's node, so
        only those cross the network), in pieces of at most LOG_CHUNK_BYTES. Raises RayJobsError
        before the first piece when the head refuses (no such file yet, among others), after it
        when the stream breaks off."""
        if lines == 0:
            return  # Ray's log API would read 0 as its default, 1,000 lines
        params = {
            "node_id": node_id,
            "filename": DRIVER_LOG_FILE.format(submission_id=submission_id),
            "lines": str(-1 if lines is None else lines),
        }
        # No limit on the whole read, which takes as long as the log is long: on each wait.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeout.total, sock_read=self._timeout.total
        )
        try:
            async with self.session.get(
                self.address + LOG_FILE_PATH, params=params, headers=self._headers, timeout=timeout
            ) as response:
                if response.status != 200:
                    text = (await response.content.read(LOG_CHUNK_BYTES)).decode(errors="replace")
                    raise RayJobsError(
                        f"reading the log of {submission_id}: HTTP {response.status}: {text}"
                    )
                async for chunk in response.content.iter_chunked(LOG_CHUNK_BYTES):
                    yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RayJobsError(f"the Ray log API at {self.address} is unreachable: {exc}") from exc

    async def stop(self, submission_id: str) -> bool:
        """Ask the driver to stop (SIGTERM, then SIGKILL after Ray's grace period); True when it
        was running."""
        status, text = await self._request("POST", f"{JOBS_PATH}{submission_id}/stop")
        if status == 404:
            return False
        if status != 200:
            raise RayJobsError(f"stopping {submission_id} on {self.address}: HTTP {status}: {text}")
        return bool(json.loads(text).get("stopped"))

    async def _request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        try:
            async with self.session.request(
                method,
                self.address + path,
                json=body,
                headers=self._headers,
                timeout=self._timeout,
            ) as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RayJobsError(f"the Ray Jobs API at {self.address} is unreachable: {exc}") from exc


def _driver_status(info: dict[str, Any]) -> DriverStatus:
    """A submission's status from the Jobs API's JSON of it."""
    exit_code = info.get("driver_exit_code")
    return DriverStatus(
        info["status"],
        info.get("message") or "",
        None if exit_code is None else int(exit_code),
        info.get("driver_node_id") or None,
    )


class RayHeads:
    """Every Ray head the operator talks to, over one HTTP session: opened in the event loop that
    first needs it, closed by `close`."""

    def __init__(self, metrics_timeout_s: float = 5.0):
        self._session: aiohttp.ClientSession | None = None
        self._metrics_timeout = aiohttp.ClientTimeout(total=metrics_timeout_s)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def jobs(self, address: str, token: str | None) -> RayJobsClient:
        """The Jobs API of the head at `address`, over the shared session."""
        return RayJobsClient(address, token, self.session)

    async def driver_metrics(self, url: str) -> str:
        """The running driver's metrics (Prometheus text), served on its head at `url`; none ("")
        when `url` answers with anything but 200 (the driver does not serve them yet)."""
        try:
            async with self.session.get(url, timeout=self._metrics_timeout) as response:
                return await response.text() if response.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RayJobsError(f"the driver's metrics are unreachable: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
