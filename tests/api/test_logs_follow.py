"""`GET …/logs?follow=true` and `kuberl logs -f` on the local backend, over real HTTP: a running
trainer's lines arrive as it writes them, and the stream ends when the job does. (The kubernetes
backend's, from a real Ray head: tests/operator/test_ray_logs.py.)"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
import requests
from apiserver import TOKEN, ApiClient, small_job

from testkit import ROOT

pytestmark = pytest.mark.timeout(300)

ITERATION_LINE = "iter "  # the trainer's console line, printed every few seconds on a pipe


def follow(client: ApiClient, name: str, **params: str) -> requests.Response:
    """The streamed answer of GET …/logs?follow=true (read it with `iter_lines`)."""
    url = client.url + client.jobs(name=name, action="logs")
    # The read timeout bounds each wait for the next chunk, not the stream.
    return client.http.get(url, params={"follow": "true", **params}, stream=True, timeout=(10, 120))


def read_until(lines: Iterator[str], wanted: Callable[[str], bool]) -> list[str]:
    """Lines up to and including the first `wanted` one (the stream's end fails the test)."""
    seen = []
    for line in lines:
        seen.append(line)
        if wanted(line):
            return seen
    raise AssertionError(f"the stream ended without the line wanted: {seen[-5:]}")


class LineReader:
    """A child process's stdout, a line at a time, each waited for at most `timeout` seconds."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def pump() -> None:
            for line in stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout: float = 120) -> str | None:
        """The next line, or None at the end of the output."""
        return self.lines.get(timeout=timeout)


def kuberl_logs(server_url: str, *args: str) -> subprocess.Popen:
    """`kuberl logs` as a terminal starts it: with Ctrl-C's SIGINT at its default. (A process
    whose parent ignores SIGINT, as pytest-xdist's workers do, inherits that, and Python then
    never turns SIGINT into KeyboardInterrupt.)"""
    env = {**os.environ, "KUBERL_SERVER": server_url, "KUBERL_API_TOKEN": TOKEN}
    return subprocess.Popen(
        [sys.executable, "-m", "kuberl_cli.main", "logs", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_follow_streams_a_running_trainers_lines_as_written_and_ends_with_the_job(
    client, local_api
):
    name = "followed"
    job = small_job(name, iterations=1_000_000)  # runs until the test suspends it
    assert client.submit(job).status_code == 201

    with follow(client, name) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        lines = response.iter_lines(decode_unicode=True)
        streamed = read_until(lines, lambda line: line.startswith(ITERATION_LINE))
        # The line came while the trainer was still at work: streamed, not read at the end.
        assert client.phase(name) == "Running"

        # The CLI follows too: `--tail 1` prints one line at once, and a later one only because
        # it streams. Ctrl-C ends it with 130 and no traceback.
        cli = kuberl_logs(local_api.url, name, "-f", "--tail", "1")
        try:
            reader = LineReader(cli)
            first = reader.next()
            assert first is not None, cli.stderr.read() if cli.stderr else ""
            later = reader.next()
            while later is not None and not later.startswith(ITERATION_LINE):
                later = reader.next()
            assert later is not None and later != first
            cli.send_signal(signal.SIGINT)
            assert cli.wait(30) == 130
            assert cli.stderr is not None and "Traceback" not in cli.stderr.read()
        finally:
            cli.kill()
            cli.wait()

        # Suspending stops the trainer (it checkpoints and exits): the stream ends with it.
        assert client.request("POST", client.jobs(name=name, action="suspend")).ok
        streamed += list(lines)

    assert client.phase(name) == "Suspended"
    whole = client.request("GET", client.jobs(name=name, action="logs")).text
    assert streamed == whole.splitlines()  # every line, once, in order
    assert len([line for line in streamed if line.startswith(ITERATION_LINE)]) >= 2


def test_following_an_ended_job_ends_at_once_and_tail_lines_starts_from_the_last_lines(
    client, local_api
):
    name = "ended"
    assert client.submit(small_job(name, iterations=1)).status_code == 201
    client.wait_phase(name, "Succeeded", "Failed")
    whole = client.request("GET", client.jobs(name=name, action="logs")).text
    assert len(whole.splitlines()) > 2

    with follow(client, name, tailLines="2") as response:
        assert response.status_code == 200
        assert response.text == "".join(whole.splitlines(keepends=True)[-2:])
    with follow(client, name) as response:
        assert response.text == whole

    done = kuberl_logs(local_api.url, name, "--follow")
    stdout, stderr = done.communicate(timeout=60)
    assert (done.returncode, stdout) == (0, whole), stderr


def test_follow_refuses_what_it_cannot_serve_before_streaming(client):
    response = follow(client, "nobody")
    assert response.status_code == 404 and response.json()["reason"] == "NotFound"

    response = follow(client, "nobody", tailLines="-1")
    assert response.status_code == 400
    assert "tailLines" in response.text

    response = follow(client, "nobody", follow="maybe")
    assert response.status_code == 400 and "follow" in response.text


def test_a_job_waiting_in_a_paused_queue_ends_a_follow_at_once(queue_client):
    """--max-running 0 starts no trainer: nothing would ever end the stream."""
    assert queue_client.submit(small_job("paused")).status_code == 201
    assert queue_client.phase("paused") == "Pending"
    with follow(queue_client, "paused") as response:
        assert (response.status_code, response.text) == (200, "")
