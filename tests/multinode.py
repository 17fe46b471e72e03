"""A multi-node Ray on loopback, as a RayCluster of an RLJob with spot workers: a head and worker
nodes started with `ray start`, every port explicit, token authentication on every node and
client. The worker nodes advertise the custom resource `spot` (one unit each, as each spot pod of
an RLJob does); the head advertises none, so rollout workers that require `spot` run on the
worker nodes only.

A node can be preempted (`RayNode.kill`: SIGKILL its raylet, as when its VM vanishes) and a new
spot node started (`LoopbackCluster.add_spot_node`), as the spot pool's autoscaler would. Only this
cluster's own processes are ever killed, by PID: each carries the cluster's token in its
environment, and each node's processes a marker of that node.

Ray notices a dead node by health checks, every 3 s and 5 failures in a row by default; the nodes
here check every second and give up after 3, so a lost node is noticed in about 3 s.

    with loopback_cluster() as cluster:
        subprocess.Popen(["kuberl", "train", ...], env=cluster.client_env())
        cluster.spot_nodes[0].kill()
        cluster.add_spot_node()
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rayhead import (
    RAY,
    START_ATTEMPTS,
    kill_marked,
    marked_processes,
    node_ports,
    ray_node_command,
    ray_start_command,
    stop_process_group,
    unused_port,
)

from kuberl_contract.capacity import RAY_CAPACITY_ENV, Capacity, NodeGroup

TESTS = Path(__file__).parent
SPOT = "spot"  # the custom resource of an RLJob's spot worker pods (SPOT_RAY_RESOURCE)
NODE_MARKER_ENV = "KUBERL_TEST_RAY_NODE"  # set on each node: its processes inherit it
OBJECT_STORE_BYTES = 150 * 1024**2  # small nodes: CartPole batches and weights are tiny
START_TIMEOUT_S = 300  # a node joining, on a loaded 2-core machine (load 25: over 120 s)
HEALTH_CHECKS = {  # how fast Ray's control service notices a dead node (see the docstring)
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


@dataclass
class RayNode:
    """One `ray start --block` process (a session of its own) and the Ray processes it started."""

    name: str
    process: subprocess.Popen
    marker: str
    """NODE_MARKER_ENV's value on this node; every process of the node inherits it."""
    log_path: Path
    joined: bool = False  # Ray has listed it alive
    killed: bool = False

    @property
    def raylet_pid(self) -> int:
        for pid in marked_processes(None, self._marker_entry):
            try:
                executable = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if executable.endswith(b"/raylet"):
                return pid
        raise LookupError(f"node {self.name} has no raylet running:\n{self.log()}")

    def kill(self) -> None:
        """Preempt the node: SIGKILL its raylet. Its `ray start` then ends the node's other
        processes (its workers end when they lose their raylet); whatever of the node is still
        there 10 s later is killed too."""
        os.kill(self.raylet_pid, signal.SIGKILL)
        self.killed = True
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_process_group(self.process)
        kill_marked(None, self._marker_entry)

    def stop(self) -> None:
        stop_process_group(self.process)
        kill_marked(None, self._marker_entry)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    @property
    def _marker_entry(self) -> bytes:
        return f"{NODE_MARKER_ENV}={self.marker}".encode()


@dataclass
class LoopbackCluster:
    token: str
    temp_root: Path
    env: dict[str, str]
    """The environment of every node and client: PATH, PYTHONPATH, auth, health checks."""
    head_port: int = 0
    dashboard_port: int = 0
    head: RayNode | None = None
    spot_nodes: list[RayNode] = field(default_factory=list)
    _taken_ports: set[int] = field(default_factory=set)

    @property
    def address(self) -> str:
        """The head's GCS address, what RAY_ADDRESS and `ray start --address` take."""
        return f"127.0.0.1:{self.head_port}"

    def client_env(
        self, capacity_wait_s: float = START_TIMEOUT_S, spot_nodes_at_most: int = 2
    ) -> dict[str, str]:
        """The environment of a driver joining this cluster, as the operator sets it on the
        head's container: RAY_ADDRESS, the token, and the cluster's capacity (the spot group at
        `spot_nodes_at_most` nodes), with which a driver starting while a spot node is missing
        waits up to `capacity_wait_s` for it instead of failing."""
        spot_group = NodeGroup({"CPU": 1.0, SPOT: 1.0}, spot_nodes_at_most)
        capacity = Capacity((NodeGroup({"CPU": 1.0}, 1), spot_group), capacity_wait_s)
        return {**self.env, "RAY_ADDRESS": self.address, RAY_CAPACITY_ENV: capacity.to_json()}

    def start_head(self) -> None:
        def command(temp_dir: str) -> list[str]:
            ports = node_ports(head=True, taken=self._taken_ports)
            self.head_port, self.dashboard_port = ports["port"], unused_port(self._taken_ports)
            options = (f"--object-store-memory={OBJECT_STORE_BYTES}",)
            return ray_start_command(temp_dir, self.dashboard_port, 1, ports, options)

        def joined() -> bool:
            return any(n.get("is_head_node") for n in self.alive_nodes())

        started: list[RayNode] = []
        try:
            self._start_joined("head", command, joined, started)
        finally:  # a head still running after a failed start is stopped with the cluster too
            self.head = started[-1] if started else None

    def add_spot_node(self, ip: str = "127.0.0.1") -> RayNode:
        """Start a worker node advertising one unit of `spot`; returns once Ray lists it alive.
        `ip` is the node's address in Ray (any of 127.0.0.0/8 is this machine's loopback: a node
        of its own address, as each pod has)."""
        name = f"spot-{len(self.spot_nodes) + 1}"
        options = (
            f"--address={self.address}",
            f"--node-ip-address={ip}",
            f"--node-name={name}",
            f"--resources={json.dumps({SPOT: 1})}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
        )

        def command(temp_dir: str) -> list[str]:
            return ray_node_command(
                temp_dir, 1, node_ports(head=False, taken=self._taken_ports), options
            )

        def joined() -> bool:
            return any(n.get("node_name") == name for n in self.alive_nodes())

        node = self._start_joined(name, command, joined, self.spot_nodes)
        node.joined = True
        return node

    def _start_joined(
        self,
        name: str,
        command: Callable[[str], list[str]],
        joined: Callable[[], bool],
        started: list[RayNode],
    ) -> RayNode:
        """Start node `name` (`command(temp_dir)`, on fresh ports each time) until `joined()`.

        `ray start` gives up when its raylet has not registered within a fixed 30 s, which an
        overloaded machine can take: a node that exits so is started again, up to
        START_ATTEMPTS times in all. Each node started is appended to `started`, so that
        `stop` ends it whatever happens."""
        for attempt in range(1, START_ATTEMPTS + 1):
            node = self._start(
                name, command(self._temp_dir(name if attempt == 1 else f"{name}-{attempt}"))
            )
            started.append(node)
            try:
                self._wait(joined, node)
                return node
            except RuntimeError:
                if node.process.poll() is None or attempt == START_ATTEMPTS:
                    raise
                node.stop()  # whatever it started before giving up
                started.remove(node)
        raise AssertionError("unreachable")

    def live_spot_nodes(self) -> list[RayNode]:
        """The spot nodes that have joined and were not killed, oldest first."""
        return [node for node in self.spot_nodes if node.joined and not node.killed]

    def ensure_spot_nodes(self, count: int) -> None:
        """Start spot nodes until `count` are alive (counting none still starting elsewhere)."""
        while len(self.live_spot_nodes()) < count:
            self.add_spot_node()

    def keep_spot_nodes(self, count: int) -> None:
        """Preempt the newest live spot nodes until `count` are left; returns once Ray lists
        only those (a spot pool scaled down)."""
        for node in self.live_spot_nodes()[count:]:
            node.kill()
        deadline = time.monotonic() + START_TIMEOUT_S
        while len([n for n in self.alive_nodes() if not n.get("is_head_node")]) > count:
            assert time.monotonic() < deadline, "Ray still lists the preempted spot nodes"
            time.sleep(0.5)

    def alive_nodes(self) -> list[dict]:
        """The nodes Ray lists as alive (its state API on the head's dashboard); none while the
        head does not answer. A node killed moments ago is listed until Ray notices."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.dashboard_port}/api/v0/nodes?limit=1000",
            headers={"Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                nodes = json.load(response)["data"]["result"]["result"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return []
        return [node for node in nodes if node.get("state") == "ALIVE"]

    def stop(self) -> None:
        """End every process of the cluster, and every process holding its token (drivers)."""
        for node in [*self.spot_nodes, *([self.head] if self.head else [])]:
            stop_process_group(node.process)
        kill_marked(str(self.temp_root).encode(), f"RAY_AUTH_TOKEN={self.token}".encode())
        shutil.rmtree(self.temp_root, ignore_errors=True)

    def _temp_dir(self, name: str) -> str:
        # Short: Ray's socket paths under the temp dir must fit in 107 characters.
        path = self.temp_root / name
        path.mkdir()
        return str(path)

    def _start(self, name: str, command: list[str]) -> RayNode:
        marker = f"{self.token[:12]}-{name}"
        log_path = self.temp_root / f"{name}.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                command,
                env={**self.env, NODE_MARKER_ENV: marker},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return RayNode(name, process, marker, log_path)

    @staticmethod
    def _wait(joined: Callable[[], bool], node: RayNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not joined():
            if node.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ray node {node.name} did not join:\n{node.log()}")
            time.sleep(0.5)


@contextlib.contextmanager
def loopback_cluster(
    spot_nodes: int = 2, pythonpath: Sequence[Path] = ()
) -> Iterator[LoopbackCluster]:
    """A head and `spot_nodes` spot worker nodes of 1 CPU each; ends every process it started.
    `pythonpath` is added to every Ray process's (for envs given as module:Class)."""
    token = secrets.token_hex(16)
    temp_root = Path(tempfile.mkdtemp(prefix="krl-", dir="/tmp"))
    path = os.pathsep.join([str(RAY.parent), os.environ.get("PATH", "")])
    paths = [*map(str, pythonpath), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        **HEALTH_CHECKS,
        "PATH": path,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        # A loaded machine's raylet may take longer to register than Ray's default 30 s.
        "RAY_raylet_start_wait_time_s": str(START_TIMEOUT_S),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
    }
    env.pop("RAY_ADDRESS", None)
    cluster = LoopbackCluster(token, temp_root, env)
    try:
        cluster.start_head()
        cluster.ensure_spot_nodes(spot_nodes)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def loopback_ray():
    """One loopback cluster for a test module (starting one takes a while)."""
    with loopback_cluster(pythonpath=[TESTS / "trainer"]) as cluster:
        yield cluster


@pytest.fixture
def ray_cluster(loopback_ray):
    """The module's loopback cluster with two live spot nodes, whatever a test before killed."""
    loopback_ray.ensure_spot_nodes(2)
    return loopback_ray
