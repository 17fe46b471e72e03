"""A real Ray head on loopback for the operator's tests, with every port explicit (so it never
collides with another Ray on this machine) and token authentication on."""

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from testkit import free_port

RAY = Path(sys.executable).with_name("ray")
WORKER_PORTS = 40  # size of the port range Ray's worker processes take theirs from


def ray_start_command(temp_dir: str, dashboard_port: int, num_cpus: int = 1) -> list[str]:
    """`ray start --head` with every port explicit, so it never collides with another Ray on this
    machine and never falls back to a shared default."""
    ports = {
        "port": free_port(),
        "dashboard-port": dashboard_port,
        "node-manager-port": free_port(),
        "object-manager-port": free_port(),
        "dashboard-agent-listen-port": free_port(),
        "dashboard-agent-grpc-port": free_port(),
        "metrics-export-port": free_port(),
        "runtime-env-agent-port": free_port(),
        "ray-client-server-port": free_port(),
    }
    # The worker range must not hold any of the ports above: Ray refuses overlapping components.
    taken = set(ports.values())
    low = free_port()
    while any(low <= port <= low + WORKER_PORTS for port in taken) or low + WORKER_PORTS > 65535:
        low = free_port()
    ports |= {"min-worker-port": low, "max-worker-port": low + WORKER_PORTS}
    return [
        str(RAY),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        f"--num-cpus={num_cpus}",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *(f"--{name}={value}" for name, value in ports.items()),
    ]


def jobs_api_ready(url: str, token: str) -> bool:
    request = urllib.request.Request(
        f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_own_processes(head: subprocess.Popen, temp_dir: str, token: str) -> None:
    """End exactly what this test started: the `ray start` process group, then any process whose
    command line names this test's temp dir (Ray starts some in sessions of their own) or whose
    environment holds this head's token (the drivers its Jobs API started, each in a session of
    its own, which would otherwise outlive the head and go on training)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
            head.wait(timeout=wait)
            break
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    markers = (temp_dir.encode(), f"RAY_AUTH_TOKEN={token}".encode())
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline, environ = (
                    (entry / "cmdline").read_bytes(),
                    (entry / "environ").read_bytes(),
                )
                if markers[0] in cmdline or markers[1] in environ.split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


@contextlib.contextmanager
def running_ray_head(num_cpus: int = 1, **env: str) -> Iterator[tuple[str, str]]:
    """A Ray head on loopback with token authentication on, as KubeRay starts one: yields its
    Jobs API URL and its token; ends every process it started. Its jobs find this environment's
    executables (`kuberl`) on PATH; `env` adds environment variables to every Ray process."""
    token = secrets.token_hex(16)
    # Short: Ray's socket paths under the temp dir must fit in 107 characters.
    temp_dir = tempfile.mkdtemp(prefix="krl-", dir="/tmp")
    dashboard_port = free_port()
    url = f"http://127.0.0.1:{dashboard_port}"
    path = os.pathsep.join([str(RAY.parent), os.environ.get("PATH", "")])
    env = {**os.environ, **env, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 (closed below)
    head = subprocess.Popen(
        ray_start_command(temp_dir, dashboard_port, num_cpus),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not jobs_api_ready(url, token):
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the Ray head did not start:\n" + Path(log.name).read_text()[-3000:]
                )
            time.sleep(0.5)
        yield url, token
    finally:
        stop_own_processes(head, temp_dir, token)
        log.close()
