"""The operator's Ray Jobs client against a real Ray head started on loopback, with token
authentication on, as KubeRay runs it."""

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kuberl_operator.ray_jobs import RayJobsClient, RayJobsError
from testkit import free_port

RAY = Path(sys.executable).with_name("ray")
WORKER_PORTS = 40  # size of the port range Ray's worker processes take theirs from


def ray_start_command(temp_dir: str, dashboard_port: int) -> list[str]:
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
        "--num-cpus=1",
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


def stop_own_processes(head: subprocess.Popen, temp_dir: str) -> None:
    """End exactly what this test started: the `ray start` process group, then any Ray process
    whose command line names this test's temp dir (Ray starts some in sessions of their own)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
            head.wait(timeout=wait)
            break
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


@pytest.fixture(scope="module")
def ray_head():
    token = secrets.token_hex(16)
    # Short: Ray's socket paths under the temp dir must fit in 107 characters.
    temp_dir = tempfile.mkdtemp(prefix="krl-", dir="/tmp")
    dashboard_port = free_port()
    url = f"http://127.0.0.1:{dashboard_port}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 (closed below)
    head = subprocess.Popen(
        ray_start_command(temp_dir, dashboard_port),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not jobs_api_ready(url, token):
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the Ray head did not start:\n" + Path(log.name).read_text()[-3000:])
            time.sleep(0.5)
        yield url, token
    finally:
        stop_own_processes(head, temp_dir)
        log.close()


def run(coroutine):
    return asyncio.run(coroutine)


async def wait_for(client: RayJobsClient, submission_id: str, wanted: set[str], timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        driver = await client.status(submission_id)
        if driver is not None and driver.status in wanted:
            return driver
        assert time.monotonic() < deadline, f"{submission_id} stayed {driver}"
        await asyncio.sleep(0.5)


def test_submission_happens_once_per_id_and_reports_the_outcome(ray_head):
    client = RayJobsClient(*ray_head)

    async def scenario():
        assert await client.status("job-1") is None
        assert await client.submit("job-1", "python -c 'print(42)'") is True
        assert await client.submit("job-1", "python -c 'print(42)'") is False  # idempotent
        done = await wait_for(client, "job-1", {"SUCCEEDED", "FAILED"})
        assert done.status == "SUCCEEDED", done
        await client.submit("job-2", "python -c 'import sys; sys.exit(3)'")
        failed = await wait_for(client, "job-2", {"SUCCEEDED", "FAILED"})
        assert failed.status == "FAILED" and "3" in failed.message

    run(scenario())


def test_stop_ends_a_running_driver(ray_head):
    client = RayJobsClient(*ray_head)

    async def scenario():
        await client.submit("sleeper", "sleep 120")
        await wait_for(client, "sleeper", {"RUNNING"})
        assert await client.stop("sleeper") is True
        assert (await wait_for(client, "sleeper", {"STOPPED", "FAILED"})).status == "STOPPED"
        assert await client.stop("no-such-job") is False

    run(scenario())


@pytest.mark.parametrize("token, code", [("wrong", "403"), (None, "401")])
def test_requests_without_the_right_token_are_refused(ray_head, token, code):
    client = RayJobsClient(ray_head[0], token)
    with pytest.raises(RayJobsError, match=f"HTTP {code}"):
        run(client.status("job-1"))


def test_an_unreachable_head_is_a_clear_error():
    client = RayJobsClient(f"http://127.0.0.1:{free_port()}", "token", timeout_s=2)
    with pytest.raises(RayJobsError, match="unreachable"):
        run(client.submit("job", "true"))
