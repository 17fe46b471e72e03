"""The log relay: how the kuberl API reads a cluster job's driver output without a Ray token.

A driver's output is on its job's Ray head, behind the Jobs API and the job's Ray auth token. That
token lets its holder do anything on the job's Ray cluster (submit a driver, stop one, run code on
every pod), and the API, which serves `GET .../logs` to anyone allowed to get the job, has no
business holding it. The operator holds every job's token anyway: it serves each driver's status
and output over HTTP, and nothing else of a head, to a caller presenting the relay's own token (a
Secret of the chart's, given to the operator and the API only).

One request, `GET /v1/namespaces/{namespace}/rljobs/{name}/drivers/{attempt}?uid=U&after=N`,
answers with the attempt's driver as the Jobs API knows it: whether it exists, whether it has
exited, and its log from character N on (`DriverOutput`), so a follower sends only what is new.
The status is read before the log, so the read that sees the exit holds the last words.

The server (`serve`) runs in the operator's event loop beside kopf; the client (`LogRelay`) is the
API's.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import aiohttp
from aiohttp import web

from kuberl_operator.builders import submission_id_of
from kuberl_operator.ray_jobs import RayJobsClient, RayJobsError
from kuberl_operator.spec.formats import DNS_LABEL_PATTERN, JOB_NAME_PATTERN

DRIVER_PATH = "/v1/namespaces/{namespace}/rljobs/{name}/drivers/{attempt}"
# What a request may name: a namespace and an RLJob's name as Kubernetes and the CRD allow them,
# so that nothing else of a request ends up in a head's URL (they make its host name).
_NAMESPACE = re.compile(DNS_LABEL_PATTERN)
_NAME = re.compile(JOB_NAME_PATTERN)
_UID = re.compile(r"^[A-Za-z0-9-]{1,128}$")

JobsClientFor = Callable[[str, str, str], Awaitable[RayJobsClient | None]]
"""(namespace, name, uid) -> the Jobs API of that job's head with its token, or None while there
is no token (Reconciler.jobs_client)."""


class RelayError(RuntimeError):
    """The relay (or, behind it, the job's head) could not answer; the message says why."""


@dataclass(frozen=True)
class DriverOutput:
    """An attempt's driver as the relay reads it from the job's head."""

    found: bool
    """The Jobs API knows the driver (false before its submission)."""
    ended: bool
    """It has exited: its log is complete."""
    text: str
    """Its log from the requested character on."""
    length: int
    """The length of its whole log so far: where the next read goes on from."""


async def read_driver(client: RayJobsClient, name: str, attempt: int, after: int) -> DriverOutput:
    """The attempt's driver, read from its head's Jobs API: status first, then the log."""
    submission = submission_id_of(name, attempt)
    status = await client.status(submission)
    if status is None:
        return DriverOutput(found=False, ended=False, text="", length=0)
    log = await client.logs(submission)
    return DriverOutput(found=True, ended=status.ended, text=log[after:], length=len(log))


def _refusal(status: int, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status)


def relay_app(token: str, jobs_client: JobsClientFor) -> web.Application:
    """The relay's one route, behind its bearer token."""
    expected = f"Bearer {token}".encode()

    async def driver(request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return _refusal(401, "the log relay's token is missing or wrong")
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        uid, attempt = request.query.get("uid", ""), request.match_info["attempt"]
        after = request.query.get("after", "0")
        if not (_NAMESPACE.match(namespace) and len(namespace) <= 63):
            return _refusal(400, f"namespace {namespace!r} is no Kubernetes namespace name")
        if not (_NAME.match(name) and len(name) <= 253):
            return _refusal(400, f"name {name!r} is no RLJob name")
        if not _UID.match(uid):
            return _refusal(400, "uid: the job's UID is required")
        if not (attempt.isdigit() and int(attempt) >= 1 and after.isdigit()):
            return _refusal(400, "attempt (from 1) and after (from 0) are whole numbers")
        try:
            client = await jobs_client(namespace, name, uid)
            if client is None:
                raise RayJobsError("the job's Ray auth token does not exist yet")
            output = await read_driver(client, name, int(attempt), int(after))
        except RayJobsError as exc:
            return _refusal(503, str(exc))
        return web.json_response(asdict(output))

    app = web.Application()
    app.router.add_get(DRIVER_PATH, driver)
    return app


async def serve(
    port: int, token: str | None, jobs_client: JobsClientFor, host: str = "0.0.0.0"
) -> web.AppRunner:
    """Serve the relay on `port` (0: any free one, which `runner.addresses` says) until the
    returned runner's `cleanup()`. Refuses to start without a token: the relay would then hand
    any caller every job's output."""
    if not token:
        raise ValueError("KUBERL_LOG_RELAY_PORT is set without KUBERL_LOG_RELAY_TOKEN")
    runner = web.AppRunner(relay_app(token, jobs_client), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


class LogRelay:
    """The API's side: reads drivers from the operator's relay at `url`, over one session (opened
    in the event loop that first needs it; `close` ends it)."""

    def __init__(self, url: str, token: str, timeout_s: float = 15.0):
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def read(
        self, namespace: str, name: str, uid: str, attempt: int, after: int = 0
    ) -> DriverOutput:
        """The attempt's driver, its log from character `after` on. Raises RelayError when the
        relay or the job's head cannot answer."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = self.url + DRIVER_PATH.format(namespace=namespace, name=name, attempt=attempt)
        try:
            async with self._session.get(
                url,
                params={"uid": uid, "after": str(after)},
                headers=self._headers,
                timeout=self._timeout,
            ) as response:
                if response.status != 200:
                    raise RelayError(f"HTTP {response.status}: {_message(await response.text())}")
                return DriverOutput(**await response.json())
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
            raise RelayError(
                f"the operator's log relay at {self.url} is unreachable: {exc}"
            ) from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _message(body: str) -> str:
    """A refusal's message: the relay's JSON one, else the start of whatever answered."""
    try:
        return str(json.loads(body)["message"])
    except (ValueError, TypeError, KeyError):
        return body[:200]
