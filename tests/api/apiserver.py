"""Helpers of the API tests: `kuberl serve` as a real process on a free loopback port, an HTTP
client for it, small CartPole jobs, and cleanup of every trainer a test's server started.
(A module of its own: `conftest` names clash between test directories.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml

from testkit import ROOT, free_port, rljob, wait_until, without_export

EXAMPLE = ROOT / "deploy" / "examples" / "cartpole-ppo.yaml"
TOKEN = "test-token-0123456789"


def small_job(
    name: str, timesteps: int = 1024, iterations: int | None = None, **labels: str
) -> dict[str, Any]:
    """The CartPole example, cut down to train in about a second (4 envs x 32 steps = 128 env
    steps per iteration), without Ray. `iterations` stops it after that many instead."""
    job = rljob(name, labels=labels, **yaml.safe_load(EXAMPLE.read_text())["spec"])
    trainer = job["spec"]["trainer"]
    trainer["stop"] = {"iterations": iterations} if iterations else {"timesteps": timesteps}
    trainer["hyperparameters"] |= {"num_epochs": 4, "minibatch_size": 128}
    if iterations:
        del trainer["hyperparameters"]["schedule"]  # a linear schedule needs stop.timesteps
    trainer["checkpoint"] = without_export({"everyIterations": 5, "keep": 2})  # rljob's is replaced
    job["spec"]["rolloutWorkers"] = {"replicas": 0, "envsPerWorker": 4}
    return job


class ApiClient:
    """requests against one server, with its base URL and (optionally) a token."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self.http = url, requests.Session()
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.http.request(method, self.url + path, timeout=30, **kwargs)

    def jobs(self, namespace: str = "default", name: str = "", action: str = "") -> str:
        path = f"/v1/namespaces/{namespace}/jobs" + (f"/{name}" if name else "")
        return path + (f"/{action}" if action else "")

    def submit(self, job: dict[str, Any], namespace: str = "default") -> requests.Response:
        return self.request("POST", self.jobs(namespace), json=job)

    def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        response = self.request("GET", self.jobs(namespace, name))
        assert response.status_code == 200, response.text
        return response.json()

    def phase(self, name: str) -> str | None:
        return self.job(name)["status"]["phase"]

    def wait_phase(self, name: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
        return wait_until(
            lambda: (job := self.job(name))["status"]["phase"] in phases and job,
            timeout,
            f"{name} to reach {'/'.join(phases)}",
        )


class ApiServer:
    """`kuberl serve` in a subprocess; `stop()` ends it (the trainers it started keep running,
    as they would across a restart), `kill_trainers()` ends those by PID."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir, self.args, self.port = data_dir, args, free_port()
        self.env = {**os.environ, **(env or {})}
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = data_dir.parent / f"{data_dir.name}-server-{self.port}.log"

    def start(self, ready_timeout: float = 30) -> ApiServer:
        command = [sys.executable, "-m", "kuberl_cli.main", "serve", "--port", str(self.port)]
        command += ["--data-dir", str(self.data_dir), *self.args]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT
            )
        wait_until(self._ready, ready_timeout, f"the API on {self.url} (log: {self.log})")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the API exited with {self.process.returncode}: {self.output()}")
        with contextlib.suppress(requests.RequestException):
            return requests.get(self.url + "/readyz", timeout=2).status_code == 200
        return False

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def trainer_pids(self) -> list[int]:
        """Process-group leaders of the trainers this server's data directory runs."""
        marker, pids = str(self.data_dir), []
        for process in psutil.process_iter(["pid", "cmdline"]):
            cmdline = process.info["cmdline"] or []
            if cmdline[:2] == ["sh", "-c"] and any(marker in part for part in cmdline):
                pids.append(process.info["pid"])
        # The wrapper forks to run the trainer: until the child execs, it is an `sh -c` with the
        # same command line (seen on a loaded machine). Only the leader of its group is the
        # wrapper itself.
        return [pid for pid in pids if _leads_its_group(pid)]

    def kill_trainers(self) -> None:
        for pid in self.trainer_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
        self.kill_trainers()


def _leads_its_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


@contextlib.contextmanager
def serving(data_dir: Path, *args: str, **kwargs: Any) -> Iterator[ApiServer]:
    with ApiServer(data_dir, *args, **kwargs) as server:
        yield server
