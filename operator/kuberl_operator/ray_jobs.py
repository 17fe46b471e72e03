"""The operator's HTTP to the Ray heads: the Ray Jobs API, through which it submits a job's driver,
and the driver's metrics, from which it reads the job's progress. No other module of the operator
talks to a Ray head; the log relay (log_relay.py) reads drivers' output for the API through it.

The operator never imports ray, so it speaks the Jobs API's REST endpoints (the same ones
`ray job submit` uses) with aiohttp, kopf's own HTTP client. Every request carries the cluster's
token (`Authorization: Bearer`), as Ray's token authentication requires. The clients of all jobs
share the operator's one `aiohttp.ClientSession` (its connection pool), which `RayHeads` opens and
the operator closes at cleanup; a client holds only a head's address and token.

Exactly once per attempt: the submission id is fixed per attempt (`builders.submission_id`), a
submission first looks the id up and only submits when it is unknown, and the Jobs API's refusal
of a duplicate id (an operator restarted between the two calls) also counts as "already there".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from kuberl_operator.status.observed import DriverState

JOBS_PATH = "/api/jobs/"
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
        self, submission_id: str, entrypoint: str, metadata: dict[str, str] | None = None
    ) -> bool:
        """Submit the driver unless this id already exists; True when this call submitted it."""
        if await self.status(submission_id) is not None:
            return False
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id,
            "metadata": metadata or {},
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
        info = json.loads(text)
        exit_code = info.get("driver_exit_code")
        return DriverStatus(
            info["status"], info.get("message") or "", None if exit_code is None else int(exit_code)
        )

    async def logs(self, submission_id: str) -> str:
        """The driver's whole log so far ("" when the id is unknown)."""
        status, text = await self._request("GET", f"{JOBS_PATH}{submission_id}/logs")
        if status == 404:
            return ""
        if status != 200:
            raise RayJobsError(f"reading the logs of {submission_id}: HTTP {status}: {text}")
        return json.loads(text).get("logs") or ""

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
