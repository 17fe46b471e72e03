"""What following a driver's log costs the operator, measured: ten followers of a 4 MiB log on a
real Ray head, read through the operator's log relay (in a process of its own: relay_process.py)
as the API reads it (ray_logs.DriverLogs), with every byte the head sends the relay counted by a
proxy in between. The relay fetches the log once for all of them, not once per follower and poll,
and holds a bounded part of it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from kubeapi import running_kube_api
from rayhead import running_ray_head
from test_ray_logs import KEY, NAMESPACE, RELAY_TOKEN

from kuberl_api.ray_logs import DriverLogs
from kuberl_operator.builders import ray_auth_token
from kuberl_operator.ray_jobs import RayJobsClient
from kuberl_operator.settings import OperatorSettings
from testkit import ROOT, rljob

pytestmark = pytest.mark.timeout(300)

LINE_CHARS = 128
LOG_LINES = 32 * 1024  # of LINE_CHARS each: a 4 MiB log
LOG_BYTES = LINE_CHARS * LOG_LINES
FOLLOWERS = 10
TAIL_LINES = 10


def line(number: int) -> str:
    head = f"line {number:06d} "
    return head + "x" * (LINE_CHARS - len(head) - 1) + "\n"


LAST_LINE = line(LOG_LINES - 1)


def big_driver(release: Path) -> str:
    """A driver that writes a 4 MiB log, waits until the test creates `release`, writes its last
    words and exits."""
    code = (
        "import pathlib, sys, time\n"
        f"for i in range({LOG_LINES}):\n"
        f"    head = f'line {{i:06d}} '\n"
        f"    sys.stdout.write(head + 'x' * ({LINE_CHARS} - len(head) - 1) + '\\n')\n"
        "sys.stdout.flush()\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        "print('last words', flush=True)\n"
    )
    return f"{sys.executable} -c {shlex.quote(code)}"


@contextlib.contextmanager
def counting_proxy(target: str) -> Iterator[tuple[str, Callable[[], int]]]:
    """A TCP proxy on loopback to the server at the URL `target`, on a thread of its own: yields
    its URL and a function saying how many bytes the server has sent through it."""
    host, port = urlsplit(target).hostname, urlsplit(target).port
    received = [0]
    loop = asyncio.new_event_loop()

    async def pipe(reader, writer, counted: bool) -> None:
        try:
            while data := await reader.read(64 * 1024):
                if counted:
                    received[0] += len(data)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def connect(client_reader, client_writer) -> None:
        server_reader, server_writer = await asyncio.open_connection(host, port)
        await asyncio.gather(
            pipe(client_reader, server_writer, False), pipe(server_reader, client_writer, True)
        )

    server = loop.run_until_complete(asyncio.start_server(connect, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, name="counting-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", lambda: received[0]
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def relay_process(kubeconfig: Path, dashboard_url: str) -> Iterator[tuple[str, Callable[[], dict]]]:
    """The relay in a process of its own (relay_process.py), reaching the heads at
    `dashboard_url`: yields its URL and a function that ends it with its report of what it held
    at most."""
    env = {**os.environ, "KUBERL_RAY_AUTH_KEY": KEY, "KUBERL_RAY_DASHBOARD_URL": dashboard_url}
    script = Path(__file__).with_name("relay_process.py")
    process = subprocess.Popen(
        [sys.executable, str(script), str(kubeconfig), RELAY_TOKEN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def report() -> dict:
        stdin.write("report\n")
        stdin.flush()
        return json.loads(stdout.readline())

    try:
        port = stdout.readline().strip()
        assert port.isdigit(), f"the relay did not start (exit status {process.poll()})"
        yield f"http://127.0.0.1:{port}", report
    finally:
        process.kill()
        process.wait()


async def written(head_url: str, token: str, submission: str, last: str) -> None:
    """Until the driver's log ends with `last`, read from the head directly (not counted)."""
    async with aiohttp.ClientSession() as session:
        client = RayJobsClient(head_url, token, session)
        deadline = time.monotonic() + 120
        while True:
            status = await client.status(submission)
            if status is not None and status.node_id is not None:
                with contextlib.suppress(RuntimeError):
                    chunks = [c async for c in client.log_file(submission, status.node_id, 1)]
                    if b"".join(chunks).decode() == last:
                        return
            assert time.monotonic() < deadline, "the driver did not write its log"
            await asyncio.sleep(0.2)


KEPT = 4 * 1024
"""What the test keeps of each follower's output: its start and its end."""


async def follow_all(relay_url: str, job: dict, release: Path) -> list[tuple[str, str]]:
    """FOLLOWERS follows of the job's driver through the relay, half from the last TAIL_LINES
    lines and half from the start, as the API follows: once each has the whole log, the driver
    is released, and each follow ends with it. Returns the start and the end of what each
    follower got (the test holds no more than that of it)."""
    logs = DriverLogs({"KUBERL_LOG_RELAY_URL": relay_url, "KUBERL_LOG_RELAY_TOKEN": RELAY_TOKEN})
    got = [("", "")] * FOLLOWERS
    caught_up = [asyncio.Event() for _ in range(FOLLOWERS)]

    async def read_job() -> dict:
        return job

    async def follower(index: int) -> None:
        tail = TAIL_LINES if index % 2 == 0 else None
        async for text in logs.follow(job, read_job, tail):
            start, end = got[index]
            got[index] = (start or text[:KEPT], (end + text)[-KEPT:])
            if LAST_LINE in got[index][1][-2 * LINE_CHARS :]:
                caught_up[index].set()

    async def releaser() -> None:
        for event in caught_up:
            await event.wait()
        release.touch()

    try:
        await asyncio.gather(releaser(), *(follower(index) for index in range(FOLLOWERS)))
    finally:
        await logs.close()
    return got


@contextlib.contextmanager
def relayed_head(tmp_path: Path) -> Iterator[tuple[dict, str, str, str, Callable, Callable]]:
    """The RLJob `walker` (its first attempt running), a real Ray head with its token, and the
    operator's log relay reaching that head through a counting proxy: yields the job, the head's
    URL, its token, the relay's URL, the relay's report and the proxy's count of the bytes the
    head sent."""
    with running_kube_api() as kube:
        kube.register_crd()
        job = kube.create(kube.rljobs(NAMESPACE), rljob("walker", namespace=NAMESPACE))
        token = ray_auth_token(
            OperatorSettings(ray_auth_key=KEY), NAMESPACE, "walker", job["metadata"]["uid"]
        )
        job["status"] = {"phase": "Running", "attempt": 1}
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
        with (
            running_ray_head(token=token) as (head_url, _),
            counting_proxy(head_url) as (proxy_url, head_bytes),
            relay_process(kubeconfig, proxy_url) as (relay_url, report),
        ):
            yield job, head_url, token, relay_url, report, head_bytes


def test_ten_followers_of_a_4_mib_log_cost_the_operator_one_read_of_it(tmp_path):
    release = tmp_path / "release"
    with relayed_head(tmp_path) as (job, head_url, token, relay_url, report, head_bytes):

        async def scenario() -> list[tuple[str, str]]:
            async with aiohttp.ClientSession() as session:
                client = RayJobsClient(head_url, token, session)
                assert await client.submit("walker-1", big_driver(release))
            await written(head_url, token, "walker-1", LAST_LINE)
            return await follow_all(relay_url, job, release)

        got = asyncio.run(scenario())
        fetched, held = head_bytes(), report()

    print(
        f"\n{FOLLOWERS} followers of a {LOG_BYTES / 2**20:.1f} MiB log: "
        f"{fetched / 2**20:.2f} MiB fetched from the head; the relay held at most "
        f"{held['traced_peak'] / 2**20:.1f} MiB (traced), its peak RSS grew "
        f"{held['peak_rss_growth'] / 2**20:.1f} MiB"
    )
    lines = "".join(line(i) for i in range(LOG_LINES)) + "last words\n"
    tail = "".join(line(i) for i in range(LOG_LINES - TAIL_LINES, LOG_LINES))
    for index, (start, end) in enumerate(got):
        assert end.endswith(LAST_LINE + "last words\n"), (index, end[-300:])
        if index % 2 == 0:  # from the last lines, then the rest, no line missed (a busy head's
            # stream may pause before the reader has caught up: a few lines more, never fewer)
            assert end.endswith(tail + "last words\n"), (index, end[:300])
            assert end.startswith("line ") and lines.endswith(end), (index, end[:300])
        else:  # from the start: from the log's first line, or told what was skipped
            assert start.startswith(("[kuberl: ", "20")), (index, start[:300])
    # The log crossed once (and a little: headers, status reads), whatever the followers.
    assert fetched < 1.25 * LOG_BYTES
    # At its peak the relay held its window and a read's piece per follower, not the log.
    assert held["traced_peak"] < 2 * LOG_BYTES
