"""A real Ray head on loopback for the operator's tests, with every port explicit (so it never
collides with another Ray on this machine) and token authentication on."""

import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")
WORKER_PORTS = 40  # size of the port range Ray's worker processes take theirs from
START_ATTEMPTS = 3
"""Starts of a node that Ray gave up on: `ray start` exits when its node has not registered
within a fixed 30 s ("The current node timed out during startup"), which an overloaded machine
can take; the node is started again on fresh ports and a fresh temp dir."""


# The ports every Ray node opens; a head also opens its GCS `port` and the Ray client server's.
NODE_PORTS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
)
HEAD_PORTS = ("port", "ray-client-server-port")


def node_ports(head: bool, taken: set[int] | None = None) -> dict[str, int]:
    """Explicit ports for one Ray node (so it never collides with another Ray on this machine and
    never falls back to a shared default), and a worker-port range clear of them and of `taken`,
    the ports of the cluster's other nodes on this machine, to which all of these are added."""
    taken = set() if taken is None else taken
    ports = {name: unused_port(taken) for name in (*NODE_PORTS, *(HEAD_PORTS if head else ()))}
    # The worker range must not hold any port in use: Ray refuses overlapping components.
    while True:
        low = random.randrange(RAY_PORTS.start, RAY_PORTS.stop - WORKER_PORTS)
        span = range(low, low + WORKER_PORTS + 1)
        if taken.isdisjoint(span) and all(bindable(port) for port in span):
            break
    taken |= set(span)
    return ports | {"min-worker-port": low, "max-worker-port": low + WORKER_PORTS}


def ephemeral_ports() -> range:
    """The ports the kernel hands out for bind(0), which every other server of the tests takes
    (testkit.free_port) and every outgoing connection too."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


# Ray's ports come from below the ephemeral range. A node opens its ports seconds after they are
# chosen (its agents last), and an ephemeral port that is free when chosen can be given meanwhile
# to any other test's server or connection: the agent then cannot bind, and the raylet, which
# shares its fate, takes the whole node down (every test of a module on that head failed).
RAY_PORTS = range(max(10000, ephemeral_ports().start - 12000), ephemeral_ports().start)


def bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def unused_port(taken: set[int]) -> int:
    """A port of RAY_PORTS free on loopback and not in `taken`, to which it is added (Ray
    refuses a node whose components share a port)."""
    while (port := random.randrange(RAY_PORTS.start, RAY_PORTS.stop)) in taken or not bindable(
        port
    ):
        pass
    taken.add(port)
    return port


def ray_start_command(
    temp_dir: str,
    dashboard_port: int,
    num_cpus: int = 1,
    ports: dict[str, int] | None = None,
    options: tuple[str, ...] = (),
) -> list[str]:
    """`ray start --head` on loopback with its dashboard, every port explicit (`ports`: from
    `node_ports(head=True)`); `options` are further `ray start` flags."""
    return [
        *ray_node_command(temp_dir, num_cpus, ports or node_ports(head=True), options),
        "--head",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        f"--dashboard-port={dashboard_port}",
    ]


def ray_node_command(
    temp_dir: str, num_cpus: int, ports: dict[str, int], options: tuple[str, ...] = ()
) -> list[str]:
    """`ray start --block` of one node on loopback: a worker node as it is (add
    `--address=HEAD` and `options` such as `--resources`), a head with `ray_start_command`."""
    return [
        str(RAY),
        "start",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={num_cpus}",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *options,
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


def agent_ready(port: int) -> bool:
    """The node's dashboard agent serves HTTP: it records its address for the head right after
    (the Jobs API submits through it, and answers 500 "No available agent" when it has waited
    10 s without one, which a loaded machine's agent can take after the head's API is up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/healthz", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_own_processes(head: subprocess.Popen, temp_dir: str, token: str) -> None:
    """End exactly what this test started: the `ray start` process group, then any process whose
    command line names this test's temp dir (Ray starts some in sessions of their own) or whose
    environment holds this head's token (the drivers its Jobs API started, each in a session of
    its own, which would otherwise outlive the head and go on training)."""
    stop_process_group(head)
    kill_marked(temp_dir.encode(), f"RAY_AUTH_TOKEN={token}".encode())


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group `process` leads (started with start_new_session) and reap it.
    Not SIGTERM first: `ray start --block` was still running 10 s after one, which cost every
    test module with a Ray of its own 10 s per node, and nothing of a test's own Ray needs a clean
    exit."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def kill_marked(cmdline_marker: bytes | None, environ_entry: bytes | None) -> list[int]:
    """SIGKILL every process whose command line contains `cmdline_marker` or whose environment
    holds the entry `environ_entry` (NAME=value): markers only this test's processes carry.
    Returns the PIDs killed."""
    killed = []
    for pid in marked_processes(cmdline_marker, environ_entry):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def marked_processes(cmdline_marker: bytes | None, environ_entry: bytes | None) -> list[int]:
    """PIDs of the processes `kill_marked` would kill, other than this one."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if (cmdline_marker is not None and cmdline_marker in cmdline) or (
            environ_entry is not None and environ_entry in environ
        ):
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def running_ray_head(
    num_cpus: int = 1, token: str | None = None, **env: str
) -> Iterator[tuple[str, str]]:
    """A Ray head on loopback with token authentication on, as KubeRay starts one: yields its
    Jobs API URL and its token (`token`, else a random one: the operator derives each job's);
    ends every process it started. Its jobs find this environment's executables (`kuberl`) on
    PATH; `env` adds environment variables to every Ray process."""
    token = token or secrets.token_hex(16)
    path = os.pathsep.join([str(RAY.parent), os.environ.get("PATH", "")])
    env = {**os.environ, **env, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    for attempt in range(1, START_ATTEMPTS + 1):
        # Short: Ray's socket paths under the temp dir must fit in 107 characters.
        temp_dir = tempfile.mkdtemp(prefix="krl-", dir="/tmp")
        taken: set[int] = set()
        ports = node_ports(head=True, taken=taken)
        dashboard_port = unused_port(taken)
        url = f"http://127.0.0.1:{dashboard_port}"
        log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 (closed below)
        head = subprocess.Popen(
            ray_start_command(temp_dir, dashboard_port, num_cpus, ports),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until_serving(head, url, token, ports["dashboard-agent-listen-port"], log.name)
            break
        except BaseException as error:  # a test's timeout too: nothing of this start is left
            # `ray start` that exited by itself gave up on its node: it may be started again
            gave_up = isinstance(error, RuntimeError) and head.poll() is not None
            stop_own_processes(head, temp_dir, token)
            log.close()
            if not gave_up or attempt == START_ATTEMPTS:
                raise
    try:
        yield url, token
    finally:
        stop_own_processes(head, temp_dir, token)
        log.close()


def wait_until_serving(
    head: subprocess.Popen, url: str, token: str, agent_port: int, log: str
) -> None:
    """Until the head's Jobs API answers and its dashboard agent serves; RuntimeError with the
    end of its log when `ray start` exits first or 120 s pass."""
    deadline = time.monotonic() + 120
    while not (jobs_api_ready(url, token) and agent_ready(agent_port)):
        if head.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the Ray head did not start:\n" + Path(log).read_text()[-3000:])
        time.sleep(0.5)
