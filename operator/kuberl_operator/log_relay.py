"""The log relay: how the kuberl API reads a cluster job's driver output without a Ray token.

A driver's output is on its job's Ray head, behind the Jobs API and the job's Ray auth token. That
token lets its holder do anything on the job's Ray cluster (submit a driver, stop one, run code on
every pod), and the API, which serves `GET .../logs` to anyone allowed to get the job, has no
business holding it. The operator holds every job's token anyway: it serves each driver's status
and output over HTTP, and nothing else of a head, to a caller presenting the relay's own token (a
Secret of the chart's, given to the operator and the API only).

The operator serves the webhook of the whole cluster, so nobody may make it hold a log whole, nor
fetch one over and over. Two requests, for the driver of an attempt of a job (`?uid=U` names the
job's incarnation):
- `GET /v1/namespaces/{namespace}/rljobs/{name}/drivers/{attempt}/log[?tailLines=N]`, the log as it
  stands (or its last N lines, cut by the head's log API on the driver's node), streamed through
  in pieces as the head sends them;
- `GET /v1/namespaces/{namespace}/rljobs/{name}/drivers/{attempt}?after=K[&tailLines=N][&wait=S]`,
  a follower's next piece (`DriverOutput`): read from the one reader of that driver that all its
  followers share (driver_tails), which fetches the log from the head once, as it is written, and
  holds only its newest part. It waits up to S seconds for something new, so a follower asks again
  at once and nobody polls a quiet log.

The server (`serve`) runs in the operator's event loop beside kopf; the client (`LogRelay`) is the
API's.
"""

from __future__ import annotations

import codecs
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict

import aiohttp
from aiohttp import web

from kuberl_operator.builders import submission_id_of
from kuberl_operator.driver_tails import DriverOutput, DriverTails, Source, not_found
from kuberl_operator.ray_jobs import DriverStatus, RayJobsClient, RayJobsError
from kuberl_operator.spec.formats import DNS_LABEL_PATTERN, JOB_NAME_PATTERN

__all__ = ["DriverOutput", "LogRelay", "RelayError", "relay_app", "serve"]

DRIVER_PATH = "/v1/namespaces/{namespace}/rljobs/{name}/drivers/{attempt}"
LOG_PATH = DRIVER_PATH + "/log"
MAX_WAIT_S = 10
"""The longest a follower's read waits for something new."""
CHUNK_BYTES = 64 * 1024
# What a request may name: a namespace and an RLJob's name as Kubernetes and the CRD allow them,
# so that nothing else of a request ends up in a head's URL (they make its host name).
_NAMESPACE = re.compile(DNS_LABEL_PATTERN)
_NAME = re.compile(JOB_NAME_PATTERN)
_UID = re.compile(r"^[A-Za-z0-9-]{1,128}$")

JobsClientFor = Callable[[str, str, str], Awaitable[RayJobsClient | None]]
"""(namespace, name, uid) -> the Jobs API of that job's head with its token, or None while there
is no token (JobObserver.jobs_client)."""


class RelayError(RuntimeError):
    """The relay (or, behind it, the job's head) could not answer; the message says why."""


class _Refused(Exception):
    """A request the relay answers with `status` and `message`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _refusal(status: int, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status)


def _whole_number(request: web.Request, name: str, default: int | None, most: int | None = None):
    """The query parameter `name` as a whole number (`default` when absent)."""
    value = request.query.get(name)
    if value is None:
        return default
    if not value.isdigit() or (most is not None and int(value) > most):
        upto = f" up to {most}" if most is not None else ""
        raise _Refused(400, f"{name}: a whole number from 0{upto} is required, got {value!r}")
    return int(value)


def _driver_of(request: web.Request) -> tuple[str, str, str, int]:
    """The job (namespace, name, uid) and attempt a request names, checked."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    uid, attempt = request.query.get("uid", ""), request.match_info["attempt"]
    if not (_NAMESPACE.match(namespace) and len(namespace) <= 63):
        raise _Refused(400, f"namespace {namespace!r} is no Kubernetes namespace name")
    if not (_NAME.match(name) and len(name) <= 253):
        raise _Refused(400, f"name {name!r} is no RLJob name")
    if not _UID.match(uid):
        raise _Refused(400, "uid: the job's UID is required")
    if not (attempt.isdigit() and int(attempt) >= 1):
        raise _Refused(400, "attempt: a whole number from 1 is required")
    return namespace, name, uid, int(attempt)


async def decoded(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """UTF-8 `chunks` as text (a character cut between two is completed by the next)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async for chunk in chunks:
        if text := decoder.decode(chunk):
            yield text
    if text := decoder.decode(b"", final=True):
        yield text


def tail_source(client: RayJobsClient, submission: str, status: DriverStatus) -> Source:
    """What a driver's reader reads: an exited driver's log file as it stands (no more comes);
    a running one's through the Jobs API's stream, which ends when the driver has exited."""
    if status.ended and status.node_id:
        node = status.node_id
        return lambda: (decoded(client.log_file(submission, node)), None)

    async def ended() -> bool:
        found = await client.status(submission)
        return found is not None and found.ended

    return lambda: (client.tail(submission), ended)


def _guard(token: str):
    """The middleware that lets only the relay's token holder in, and answers refusals."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guarded(request: web.Request, handler):
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return _refusal(401, "the log relay's token is missing or wrong")
        try:
            return await handler(request)
        except _Refused as refused:
            return _refusal(refused.status, refused.message)
        except RayJobsError as exc:  # the head cannot be read (before anything was sent)
            return _refusal(503, str(exc))

    return guarded


class _Relay:
    """The relay's two routes over the operator's Jobs API clients and the drivers' readers."""

    def __init__(self, jobs_client: JobsClientFor, tails: DriverTails) -> None:
        self.jobs_client, self.tails = jobs_client, tails

    async def client_of(self, namespace: str, name: str, uid: str) -> RayJobsClient:
        client = await self.jobs_client(namespace, name, uid)
        if client is None:
            raise RayJobsError("the job's Ray auth token does not exist yet")
        return client

    async def follow(self, request: web.Request) -> web.Response:
        """A follower's next piece, from the driver's shared reader (started on first need)."""
        namespace, name, uid, attempt = _driver_of(request)
        after = _whole_number(request, "after", 0)
        tail_lines = _whole_number(request, "tailLines", None)
        wait_s = _whole_number(request, "wait", 0, most=MAX_WAIT_S)
        key, submission = (namespace, name, uid, attempt), submission_id_of(name, attempt)
        tail = self.tails.get(key)
        if tail is None:
            client = await self.client_of(namespace, name, uid)
            status = await client.status(submission)
            if status is None:
                return web.json_response(asdict(not_found(after)))
            tail = self.tails.start(key, tail_source(client, submission, status))
        return web.json_response(asdict(await tail.read(after, tail_lines, wait_s)))

    async def log(self, request: web.Request) -> web.StreamResponse:
        """The driver's log as it stands (or its last lines), streamed through as the head's log
        API sends it."""
        namespace, name, uid, attempt = _driver_of(request)
        tail_lines = _whole_number(request, "tailLines", None)
        submission = submission_id_of(name, attempt)
        client = await self.client_of(namespace, name, uid)
        status = await client.status(submission)
        if status is None or status.node_id is None or tail_lines == 0:
            return web.Response(text="")
        chunks = client.log_file(submission, status.node_id, tail_lines)
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            return web.Response(text="")
        except RayJobsError:
            if status.status == "PENDING":  # its log file is not there yet
                return web.Response(text="")
            raise
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        await response.write(first)
        try:
            async for chunk in chunks:  # written as the caller takes them: a piece at a time
                await response.write(chunk)
        except RayJobsError:
            # The answer has begun: the caller learns of the break from a body cut short.
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
        return response


def relay_app(
    token: str, jobs_client: JobsClientFor, tails: DriverTails | None = None
) -> web.Application:
    """The relay's routes, behind its bearer token; `tails` holds the followed drivers' readers
    (stopped at the app's cleanup)."""
    relay = _Relay(jobs_client, tails or DriverTails())

    async def stop_readers(_: web.Application) -> None:
        await relay.tails.close()

    app = web.Application(middlewares=[_guard(token)])
    app.router.add_get(DRIVER_PATH, relay.follow)
    app.router.add_get(LOG_PATH, relay.log)
    app.on_cleanup.append(stop_readers)
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
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def read(
        self,
        namespace: str,
        name: str,
        uid: str,
        attempt: int,
        after: int = 0,
        tail_lines: int | None = None,
        wait_s: int = 0,
    ) -> DriverOutput:
        """A follower's next piece of the attempt's driver log: from character `after` on (or
        its last `tail_lines` lines), waiting up to `wait_s` seconds for it. Raises RelayError
        when the relay or the job's head cannot answer."""
        url = self.url + DRIVER_PATH.format(namespace=namespace, name=name, attempt=attempt)
        params = {"uid": uid, "after": str(after), "wait": str(min(wait_s, MAX_WAIT_S))}
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        try:
            async with self.session.get(
                url,
                params=params,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s + wait_s),
            ) as response:
                if response.status != 200:
                    raise RelayError(f"HTTP {response.status}: {_message(await response.text())}")
                return DriverOutput(**await response.json())
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
            raise self._unreachable(exc) from exc

    async def snapshot(
        self, namespace: str, name: str, uid: str, attempt: int, tail_lines: int | None = None
    ) -> AsyncIterator[str]:
        """The attempt's driver log as it stands (or its last `tail_lines` lines), as text in
        pieces. Raises RelayError before the first piece when the relay or the job's head cannot
        answer, and from the pieces when the stream breaks off."""
        url = self.url + LOG_PATH.format(namespace=namespace, name=name, attempt=attempt)
        params = {"uid": uid} | ({} if tail_lines is None else {"tailLines": str(tail_lines)})
        # No limit on the whole read, which takes as long as the log is long: on each wait.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout_s, sock_read=self.timeout_s
        )
        try:
            response = await self.session.get(
                url, params=params, headers=self._headers, timeout=timeout
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc) from exc
        if response.status != 200:
            try:
                message = _message((await response.content.read(CHUNK_BYTES)).decode())
            finally:
                response.release()
            raise RelayError(f"HTTP {response.status}: {message}")
        return self._pieces(response)

    async def _pieces(self, response: aiohttp.ClientResponse) -> AsyncIterator[str]:
        try:
            async for text in decoded(response.content.iter_chunked(CHUNK_BYTES)):
                yield text
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc) from exc
        finally:
            response.release()

    def _unreachable(self, exc: Exception) -> RelayError:
        return RelayError(f"the operator's log relay at {self.url} is unreachable: {exc}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _message(body: str) -> str:
    """A refusal's message: the relay's JSON one, else the start of whatever answered."""
    try:
        return str(json.loads(body)["message"])
    except (ValueError, TypeError, KeyError):
        return body[:200]
