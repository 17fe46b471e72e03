"""GET .../logs of a long log on the local backend: its last lines are found from its end, and the
whole log is streamed a block at a time, each read in a worker thread. So the server holds a block,
not the log (measured by its peak resident memory over real HTTP), and its event loop never waits
on the log's file."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from apiserver import TOKEN, ApiClient, serving, small_job

from kuberl_api.local import LocalBackend
from kuberl_api.local_lifecycle import initial_document, now
from kuberl_operator.spec import RLJob

pytestmark = pytest.mark.timeout(300)

LOG_LINES = 512 * 1024  # of 100 bytes: a 50 MiB log
HELD_AT_MOST = 16 * 2**20
"""What serving the log may add to the server's peak resident memory (reading it whole added
about 375 MiB)."""


def line(number: int) -> str:
    return f"line {number:08d} " + "y" * 85 + "\n"  # 100 bytes


def write_log(path: Path, lines: int = LOG_LINES) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as log:
        for first in range(0, lines, 10_000):
            log.write("".join(line(i) for i in range(first, min(first + 10_000, lines))))


def last_lines(count: int) -> str:
    return "".join(line(i) for i in range(LOG_LINES - count, LOG_LINES))


def resident_kib(pid: int, field: str) -> int:
    """VmRSS (resident now) or VmHWM (its peak) of process `pid`, in KiB."""
    for entry in Path(f"/proc/{pid}/status").read_text().splitlines():
        if entry.startswith(f"{field}:"):
            return int(entry.split()[1])
    raise KeyError(field)


class PeakGrowth:
    """How far a process's peak resident memory rises above where it was: the peak is reset to
    the resident memory now (/proc/PID/clear_refs), else measured from the peak so far."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            self.base = resident_kib(pid, "VmRSS")
        except OSError:
            self.base = resident_kib(pid, "VmHWM")

    def bytes(self) -> int:
        return max(resident_kib(self.pid, "VmHWM") - self.base, 0) * 1024


@pytest.fixture(scope="module")
def long_log(tmp_path_factory) -> Iterator[tuple[ApiClient, int]]:
    """A server whose job `long` (waiting in a paused queue) has a 50 MiB log: a client and the
    server's PID."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "0", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        client = ApiClient(server.url, TOKEN)
        assert client.submit(small_job("long")).status_code == 201
        write_log(data_dir / "jobs" / "default" / "long" / "trainer.log")
        assert server.process is not None
        yield client, server.process.pid


def test_the_last_lines_of_a_long_log_cost_the_server_a_block_not_the_log(long_log):
    client, pid = long_log
    growth = PeakGrowth(pid)
    response = client.request(
        "GET", client.jobs(name="long", action="logs"), params={"tailLines": 3}
    )
    assert (response.status_code, response.text) == (200, last_lines(3))
    assert growth.bytes() < HELD_AT_MOST, f"peak resident memory grew {growth.bytes() >> 20} MiB"


def test_a_long_log_whole_is_streamed_a_block_at_a_time(long_log):
    client, pid = long_log
    growth = PeakGrowth(pid)
    url = client.url + client.jobs(name="long", action="logs")
    with client.http.get(url, stream=True, timeout=(10, 120)) as response:
        assert response.status_code == 200
        received, end = 0, b""
        for block in response.iter_content(64 * 1024):
            received, end = received + len(block), (end + block)[-200:]
    assert received == LOG_LINES * 100 and end.decode().endswith(line(LOG_LINES - 1))
    assert growth.bytes() < HELD_AT_MOST, f"peak resident memory grew {growth.bytes() >> 20} MiB"
    # Meanwhile the server answered others at once; and it still does.
    assert requests.get(client.url + "/healthz", timeout=10).status_code == 200


def test_the_log_is_read_in_worker_threads_never_on_the_event_loop(tmp_path, monkeypatch):
    backend = LocalBackend(tmp_path, max_running=0)
    backend.open()
    job = RLJob.model_validate(small_job("long"))
    backend.store.insert("default", "long", initial_document(job, "default", now()))
    log = tmp_path / "jobs" / "default" / "long" / "trainer.log"
    write_log(log, lines=30_000)  # a few blocks

    opened_on: list[threading.Thread] = []
    real_open = Path.open

    def recording_open(path: Path, *args, **kwargs):
        if path == log:
            opened_on.append(threading.current_thread())
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", recording_open)

    async def read_all() -> list[str]:
        loop_thread = threading.current_thread()
        whole = "".join([piece async for piece in await backend.logs("default", "long", None)])
        tail = "".join([piece async for piece in await backend.logs("default", "long", 2)])
        # An ended follow (no trainer comes in a paused queue) reads the log and stops.
        followed = await backend.follow_logs("default", "long", 1)
        last = "".join([piece async for piece in followed])
        assert opened_on and loop_thread not in opened_on
        return [whole, tail, last]

    try:
        whole, tail, last = asyncio.run(read_all())
    finally:
        backend.store.close()
    assert whole == log.read_text()
    assert tail == line(29_998) + line(29_999) and last == line(29_999)
