"""The operator end to end: kopf running for real (handlers.py) against the emulated Kubernetes API,
drivers submitted to a real Ray head on loopback and training for real.

Nothing here plays the operator's part. The tests play KubeRay's, the scheduler's and the
kubelet's (`KubeRay` below): they bring a RayCluster's pods up on labelled nodes and mark it
ready, mount the job's ConfigMap where the head reads it, refill worker groups, complete evictions,
and stop a deleted cluster's driver the way its head's preStop hook does. All clusters map to the
one real Ray head: the stand-in for the cluster's DNS (`HeadServices`) lets a request through to it
only with the token in the auth Secret the cluster names, as that cluster's own head would, and
hands the real head its own token.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import re
import shlex
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kopf
import pytest
import requests
from kubeapi import RAYCLUSTER_CRD
from rayhead import running_ray_head

from kuberl_operator import builders
from kuberl_operator.constants import RAY_DASHBOARD_PORT
from kuberl_operator.cost import capacity_type
from kuberl_operator.handlers import registry
from kuberl_operator.settings import OperatorSettings
from testkit import free_port, rljob, wait_until

pytestmark = pytest.mark.slow

RAYCLUSTERS = "/apis/ray.io/v1/namespaces/default/rayclusters"
PODS = "/api/v1/namespaces/default/pods"
SECRETS = "/api/v1/namespaces/default/secrets"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
EVENTS = "/api/v1/namespaces/default/events"
# Seconds any condition is waited for: a busy 2-core machine is slow, and a condition met ends
# the wait at once.
PATIENCE = 180
RELAY_TOKEN = "relay-token-" + "r" * 32  # the API's, to the operator's log relay


# The nodes the emulated scheduler places pods on: a spot node for pods whose template selects spot
# capacity, an on-demand node for every other (both m6i.xlarge-sized, as Karpenter labels them).
ALLOCATABLE = {"cpu": "4", "memory": "16Gi", "pods": "110"}
NODES = {
    capacity: {
        "metadata": {
            "name": f"node-{capacity}",
            "labels": {
                "node.kubernetes.io/instance-type": "m6i.xlarge",
                "karpenter.sh/capacity-type": capacity,
            },
        },
        "status": {"allocatable": ALLOCATABLE},
    }
    for capacity in ("spot", "on-demand")
}


def template(cluster: dict, group: str) -> dict:
    """The pod template of the cluster's group `group` (headgroup: the head's)."""
    if group == "headgroup":
        return cluster["spec"]["headGroupSpec"]["template"]
    groups = cluster["spec"].get("workerGroupSpecs") or []
    return next(g["template"] for g in groups if g["groupName"] == group)


def pod(name: str, cluster: dict, node_type: str, group: str) -> dict:
    """A pod of the group as KubeRay makes it (with its template's resource requests), scheduled
    on the node of the capacity its template selects."""
    meta = cluster["metadata"]
    owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": meta["name"]}
    spec = template(cluster, group)["spec"]
    resources = spec["containers"][0].get("resources") or {}
    node = NODES[capacity_type(spec.get("nodeSelector") or {})]
    return {
        "metadata": {
            "name": name,
            "labels": {
                "ray.io/cluster": meta["name"],
                "ray.io/node-type": node_type,
                "ray.io/group": group,
            },
            "ownerReferences": [owner | {"uid": meta["uid"], "controller": True}],
        },
        "spec": {
            "containers": [{"name": "ray", "image": "ray", "resources": resources}],
            "nodeName": node["metadata"]["name"],
        },
    }


# KubeRay (v1.4 and later) reconciles no RayCluster with a longer name (MaxRayClusterNameLength).
KUBERAY_MAX_CLUSTER_NAME = 53

RUNNING_READY = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
}


class KubeRay:
    """KubeRay and the kubelet, as far as the operator can tell, in a thread of their own."""

    def __init__(self, api_url: str, ray_url: str, ray_token: str, config_dir: Path):
        self.api, self.ray_url, self.config_dir = api_url, ray_url, config_dir
        self.http = requests.Session()
        self.ray = requests.Session()
        self.ray.headers["Authorization"] = f"Bearer {ray_token}"
        self.hold = threading.Event()  # set: new clusters are not brought up
        self.lock = threading.Lock()  # held: KubeRay and the kubelet do nothing
        self.up: dict[str, dict] = {}  # uid -> cluster, for clusters brought up
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kuberay", daemon=True)
        self._pods = 0

    def __enter__(self) -> KubeRay:
        for node in NODES.values():  # the cluster's nodes (a 409 when they exist already)
            self.http.post(f"{self.api}/api/v1/nodes", json=node, timeout=10)
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock, contextlib.suppress(requests.RequestException):
                self.step()

    def get(self, path: str, **params: str) -> Any:
        return self.http.get(self.api + path, params=params, timeout=10).json()

    def step(self) -> None:
        clusters = {c["metadata"]["uid"]: c for c in self.get(RAYCLUSTERS).get("items", [])}
        for uid, cluster in clusters.items():
            if len(cluster["metadata"]["name"]) > KUBERAY_MAX_CLUSTER_NAME:
                continue  # KubeRay only records an InvalidSpec event for it
            if uid not in self.up and not self.hold.is_set() and not cluster["spec"]["suspend"]:
                self.bring_up(cluster)
                self.up[uid] = cluster
        for uid in [uid for uid in self.up if uid not in clusters]:
            self.stop_drivers(self.up.pop(uid))  # the head's preStop hook
        for uid in self.up:  # each group as its spec stands now (the operator resizes them)
            self.evict_and_refill(clusters[uid])

    def bring_up(self, cluster: dict) -> None:
        name = cluster["metadata"]["name"]
        head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
        config_map = next(v["configMap"]["name"] for v in head["volumes"] if "configMap" in v)
        config = self.get(f"{CONFIGMAPS}/{config_map}")
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "job.yaml").write_text(config["data"]["job.yaml"])
        self.create_pod(cluster, "head", "headgroup")
        self.evict_and_refill(cluster)
        ready = {"state": "ready", "conditions": [{"type": "HeadPodReady", "status": "True"}]}
        self.patch(f"{RAYCLUSTERS}/{name}/status", {"status": ready})

    def create_pod(self, cluster: dict, node_type: str, group: str) -> None:
        self._pods += 1
        name = f"{cluster['metadata']['name']}-{group}-{self._pods}"
        self.http.post(self.api + PODS, json=pod(name, cluster, node_type, group), timeout=10)
        self.patch(f"{PODS}/{name}/status", {"status": RUNNING_READY})

    def evict_and_refill(self, cluster: dict) -> None:
        name = cluster["metadata"]["name"]
        pods = self.get(PODS, labelSelector=f"ray.io/cluster={name},ray.io/node-type=worker")
        for group in cluster["spec"].get("workerGroupSpecs") or []:
            members = [
                p
                for p in pods["items"]
                if p["metadata"]["labels"]["ray.io/group"] == group["groupName"]
            ]
            live = []
            for member in members:
                conditions = member.get("status", {}).get("conditions", [])
                if any(c["type"] == "DisruptionTarget" for c in conditions):
                    self.delete_pod(member)
                else:
                    live.append(member)
            for _ in range(group["replicas"] - len(live)):
                self.create_pod(cluster, "worker", group["groupName"])
            # A group scaled down loses its extra pods, those it names to delete first.
            named = set((group.get("scaleStrategy") or {}).get("workersToDelete") or [])
            live.sort(key=lambda pod: pod["metadata"]["name"] in named)
            for member in live[group["replicas"] :]:
                self.delete_pod(member)

    def delete_pod(self, pod: dict) -> None:
        self.http.delete(f"{self.api}{PODS}/{pod['metadata']['name']}", timeout=10)

    def stop_drivers(self, cluster: dict) -> None:
        """The head's preStop hook signals every driver on the head: the job's attempts that ran
        on this cluster (each is a submission of the job's)."""
        name = cluster["metadata"]["labels"]["kuberl.io/job"]
        for job in self.ray.get(f"{self.ray_url}/api/jobs/", timeout=10).json():
            ours = re.fullmatch(rf"{re.escape(name)}-\d+", job["submission_id"] or "")
            if ours and job["status"] == "RUNNING":
                self.ray.post(f"{self.ray_url}/api/jobs/{job['submission_id']}/stop", timeout=10)

    def patch(self, path: str, body: dict) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        self.http.patch(self.api + path, json=body, headers=headers, timeout=10)

    def submissions(self, name: str) -> list[str]:
        jobs = self.ray.get(f"{self.ray_url}/api/jobs/", timeout=10).json()
        return sorted(j["submission_id"] for j in jobs if j["submission_id"].startswith(f"{name}-"))

    def submission(self, submission_id: str) -> dict:
        """The Jobs API's details of one submission: status, start and end, runtime env."""
        return self.ray.get(f"{self.ray_url}/api/jobs/{submission_id}", timeout=10).json()


def kuberay_head_service(cluster: dict) -> str:
    """The head Service KubeRay (v1.7, utils.GenerateHeadServiceName) makes for a RayCluster: the
    name its headGroupSpec.headService gives, else <cluster>-head-svc."""
    head_service = cluster["spec"]["headGroupSpec"].get("headService") or {}
    return (head_service.get("metadata") or {}).get("name") or (
        f"{cluster['metadata']['name']}-head-svc"
    )


class HeadServices:
    """The cluster's DNS and the head Services KubeRay makes, on one loopback port:
    `http://127.0.0.1:<port>/<namespace>/<service>/<target port>/<path>` reaches <path> on the
    head only when KubeRay made that Service for a cluster it brought up (else 502, as a name
    nothing resolves). The Ray head's dashboard port is the one real Ray head, reached with the
    token of the cluster's auth Secret (else 401, as Ray answers); any other port is that port on
    loopback (the driver's metrics)."""

    def __init__(self, ray_url: str, ray_token: str):
        self.ray_url, self.ray_token = ray_url, ray_token
        self.kuberay: KubeRay | None = None  # set once KubeRay runs
        self.dialed: set[str] = set()  # the Services reached
        self.unknown: set[str] = set()  # names asked for that no Service has
        handler = functools.partial(_HeadServiceHandler, self)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HeadServices:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def urls(self) -> dict[str, str]:
        """The operator's settings that dial heads through these Services."""
        base = f"http://127.0.0.1:{self.port}/{{namespace}}/{{service}}"
        return {
            "ray_dashboard_url": f"{base}/{RAY_DASHBOARD_PORT}",
            "trainer_metrics_url": f"{base}/{{port}}/metrics",
        }

    def target(self, path: str) -> tuple[str, dict, bool] | None:
        """The URL behind a request's path, the cluster whose head it reaches, and whether it is
        the Ray head's (the dashboard's port); None when no such Service exists."""
        namespace, service, port, rest = (path.lstrip("/").split("/", 3) + [""] * 4)[:4]
        clusters = list(self.kuberay.up.values()) if self.kuberay else []
        heads = {kuberay_head_service(c): c for c in clusters}
        if namespace != "default" or service not in heads:
            self.unknown.add(service)
            return None
        self.dialed.add(service)
        ray_head = port == str(RAY_DASHBOARD_PORT)
        base = self.ray_url if ray_head else f"http://127.0.0.1:{port}"
        return f"{base}/{rest}", heads[service], ray_head

    def authorization(self, cluster: dict, presented: str | None) -> str | None:
        """The real head's Authorization for a request presenting `presented` to the cluster's
        head: only the token of the Secret the cluster names (KubeRay starts its Ray with it)."""
        secret_name = cluster["spec"]["authOptions"]["secretName"]
        assert self.kuberay is not None
        secret = requests.get(f"{self.kuberay.api}{SECRETS}/{secret_name}", timeout=10).json()
        token = base64.b64decode((secret.get("data") or {}).get("auth_token", "")).decode()
        return f"Bearer {self.ray_token}" if token and presented == f"Bearer {token}" else None


class _HeadServiceHandler(BaseHTTPRequestHandler):
    def __init__(self, services: HeadServices, *args: Any) -> None:
        self.services = services
        super().__init__(*args)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def _forward(self) -> None:
        found = self.services.target(self.path)
        if found is None:
            self.send_error(502, "no such Service")
            return
        url, cluster, ray_head = found
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k == "Content-Type"}
        if ray_head:
            authorization = self.services.authorization(cluster, self.headers.get("Authorization"))
            if authorization is None:
                self.send_error(401, "not the cluster's token")
                return
            headers["Authorization"] = authorization
        try:
            answer = requests.request(self.command, url, data=body, headers=headers, timeout=10)
        except requests.RequestException:
            self.send_error(503, "the head does not answer")
            return
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "text/plain"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *_: Any) -> None:  # quiet: the tests' output is the operator's
        pass


@pytest.fixture(scope="module")
def ray_head():
    # Ray's job stop waits this long between SIGTERM and SIGKILL: the driver's checkpoint time, as
    # the head pod's termination grace period gives it.
    with running_ray_head(num_cpus=2, RAY_JOB_STOP_WAIT_TIME_S="30") as head:
        yield head


class Cluster:
    """The emulated API, KubeRay, and a way to run (and restart) the operator."""

    def __init__(
        self,
        kube_api: Any,
        kuberay: KubeRay,
        settings: OperatorSettings,
        token: str,
        services: HeadServices | None = None,
    ):
        self.kube_api, self.kuberay, self.settings, self.token = kube_api, kuberay, settings, token
        self.services = services

    @contextlib.contextmanager
    def operator(self) -> Iterator[None]:
        with self.kube_api.kopf(registry, login=False, memo=kopf.Memo(settings=self.settings)):
            yield

    def submit(self, job: dict) -> dict:
        """Create the RLJob."""
        return self.kube_api.create(self.kube_api.rljobs(), job)

    def job(self, name: str) -> dict:
        return self.kube_api.get(self.kube_api.rljobs(name=name))

    def status(self, name: str) -> dict:
        return self.job(name).get("status") or {}

    def wait_phase(self, name: str, phase: str, timeout: float = PATIENCE) -> dict:
        def reached() -> dict | None:
            status = self.status(name)
            assert status.get("phase") != "Failed" or phase == "Failed", status
            return status if status.get("phase") == phase else None

        return wait_until(reached, timeout, f"{name} to be {phase}")

    def condition(self, name: str, type_: str) -> dict:
        return next(c for c in self.status(name)["conditions"] if c["type"] == type_)

    def events(self, name: str) -> list[tuple[str, str]]:
        return [
            (e["type"], e["reason"])
            for e in self.kube_api.list(EVENTS)
            if e["involvedObject"]["name"] == name and e["involvedObject"]["kind"] == "RLJob"
        ]

    def clusters(self, name: str) -> list[dict]:
        """The RayClusters of the job `name` (named like it, unless the name is too long)."""
        return [
            c
            for c in self.kube_api.list(RAYCLUSTERS)
            if c["metadata"]["labels"].get("kuberl.io/job") == name
        ]


@pytest.fixture
def cluster(request, kube_api, ray_head, tmp_path, monkeypatch) -> Iterator[Cluster]:
    """A run of the operator's world; `indirect` parameters: {"kuberay_crd": False} leaves KubeRay's
    RayCluster CRD uninstalled."""
    options = getattr(request, "param", {})
    ray_url, token = ray_head
    metrics_port = free_port()
    with HeadServices(ray_url, token) as services:
        settings = OperatorSettings(
            **services.urls(),
            trainer_metrics_port=free_port(),
            run_dir_root=str(tmp_path / "runs"),
            job_config_dir=str(tmp_path / "etc"),
            poll_seconds=0.5,
            metrics_port=metrics_port,
            log_relay_port=free_port(),
            log_relay_token=RELAY_TOKEN,
        )
        monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
        kube_api.register_crd()
        if options.get("kuberay_crd", True):
            kube_api.create(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD
            )
        with KubeRay(kube_api.url, ray_url, token, tmp_path / "etc") as kuberay:
            services.kuberay = kuberay
            yield Cluster(kube_api, kuberay, settings, token, services)


def relayed_output(cluster: Cluster, name: str, attempt: int) -> str:
    """The last lines of the job's driver output as the operator's log relay serves them to the
    API (read by Ray's log API on the head: the emulated Services carry plain HTTP only, not the
    websocket a follow reads)."""
    url = (
        f"http://127.0.0.1:{cluster.settings.log_relay_port}"
        f"/v1/namespaces/default/rljobs/{name}/drivers/{attempt}/log"
    )
    response = requests.get(
        url,
        params={"uid": cluster.job(name)["metadata"]["uid"], "tailLines": "5"},
        headers={"Authorization": f"Bearer {RELAY_TOKEN}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.text


def metric(port: int, name: str, **labels: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            return float(match.group(2))
    return None


# --- Scenarios -----------------------------------------------------------------------------------


def test_a_job_trains_on_its_ray_cluster_to_success(cluster: Cluster):
    with cluster.operator():
        created = cluster.submit(rljob("solo"))
        [ray_cluster] = wait_until(lambda: cluster.clusters("solo"), PATIENCE, "the RayCluster")
        owner = ray_cluster["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("RLJob", created["metadata"]["uid"])
        assert ray_cluster["metadata"]["labels"]["kuberl.io/attempt"] == "1"
        assert cluster.kube_api.get(f"{CONFIGMAPS}/solo-job")["metadata"]["ownerReferences"]
        assert cluster.kube_api.get(f"{PDBS}/solo-head")["metadata"]["ownerReferences"]

        running = cluster.wait_phase("solo", "Running")
        assert running["attempt"] == 1 and running["rayCluster"] == "solo"
        assert running["startTime"]
        progress = wait_until(
            lambda: cluster.status("solo").get("progress", {}).get("iteration"),
            PATIENCE,
            "progress",
        )
        assert progress >= 1

        done = cluster.wait_phase("solo", "Succeeded")
        assert done["completionTime"] and done["restarts"] == 0
        # The last iteration's figures, read from the finished driver's final record.
        assert done["progress"]["timesteps"] >= 20_000 and done["progress"]["lastUpdateTime"]
        assert done["progress"]["lastCheckpoint"].startswith(cluster.settings.run_dir_root)
        complete = cluster.condition("solo", "Complete")
        assert (complete["status"], complete["reason"]) == ("True", "DriverSucceeded")
        assert complete["message"] == "stopped at timesteps>=20000"
        wait_until(lambda: not cluster.clusters("solo"), PATIENCE, "the RayCluster deleted")
        assert cluster.kuberay.submissions("solo") == ["solo-1"]
        events = cluster.events("solo")
        for reason in ("Provisioning", "DriverRunning", "DriverSucceeded"):
            assert ("Normal", reason) in events, events
        # Its checkpoints lived in the head pod's emptyDir (no claim, no object store): said in a
        # condition and once in a Warning Event.
        durable = cluster.condition("solo", "DurableCheckpoints")
        assert (durable["status"], durable["reason"]) == ("False", "CheckpointsInPod")
        assert "deleted with the Ray cluster" in durable["message"]
        assert events.count(("Warning", "CheckpointsInPod")) == 1, events

        port = cluster.settings.metrics_port
        assert metric(port, "kuberl_jobs", phase="Succeeded") == 1
        assert metric(port, "kuberl_operator_reconcile_duration_seconds_count") > 0

        cluster.kube_api.delete(cluster.kube_api.rljobs(name="solo"))
        wait_until(
            lambda: (
                cluster.kube_api.get(cluster.kube_api.rljobs(name="solo"), check=False).get("code")
                == 404
            ),
            20,
            "the RLJob gone",
        )
        for path in (f"{CONFIGMAPS}/solo-job", f"{PDBS}/solo-head", f"{SECRETS}/solo-ray-auth"):
            assert cluster.kube_api.get(path, check=False)["code"] == 404, path


def test_a_63_character_job_runs_on_the_head_service_its_cluster_names(cluster: Cluster):
    """KubeRay refuses RayClusters of more than 53 characters, and the head Service's name follows
    the cluster's (or the name the cluster gives it): the operator must dial the Service that
    exists."""
    name = "a-job-name-that-takes-every-one-of-the-sixty-three-characters-x"
    assert len(name) == 63
    job = rljob(name)
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        [ray_cluster] = wait_until(lambda: cluster.clusters(name), PATIENCE, "the RayCluster")
        cluster_name = ray_cluster["metadata"]["name"]
        assert len(cluster_name) <= 53 and cluster_name.startswith(name[:40])
        service = kuberay_head_service(ray_cluster)
        assert len(service) <= 63

        running = cluster.wait_phase(name, "Running")
        assert running["rayCluster"] == cluster_name
        wait_until(lambda: iteration(cluster, name) >= 1, PATIENCE, "progress from its metrics")
        # Every request, to the Jobs API and the driver's metrics, went to that Service.
        assert cluster.services.dialed == {service}
        assert cluster.services.unknown == set()
        assert cluster.kuberay.submissions(name) == [f"{name}-1"]
        assert cluster.kube_api.get(f"{PDBS}/{name}-head")["spec"]["selector"]["matchLabels"][
            "ray.io/cluster"
        ] == (cluster_name)

        cluster.kube_api.delete(cluster.kube_api.rljobs(name=name))
        wait_until(lambda: not cluster.clusters(name), PATIENCE, "the RayCluster gone")


def invalid_jobs() -> dict[str, tuple[dict, str]]:
    """Jobs the operator must refuse, each with the field its message names."""
    misspelt = rljob("broken")
    misspelt["spec"]["trainer"]["hyperparameters"]["lerning_rate"] = 0.1
    mispaired = rljob("mispaired")
    mispaired["spec"]["trainer"] |= {"algorithm": "APPO", "optimizer": "AsyncGradients"}
    del mispaired["spec"]["trainer"]["hyperparameters"]  # PPO's
    misplaced = rljob("misplaced")
    misplaced["spec"]["trainer"]["optimizerConfig"] = {"replayShards": 4}
    # Beyond the operator's settings (reach.py): a Secret they do not allow, another job's token.
    secretive = rljob("secretive")
    secretive["spec"]["storage"] = {"secretRef": {"name": "s3-credentials"}}
    snooping = rljob("snooping")
    snooping["spec"]["trainer"]["checkpoint"] = {"credentialsSecret": "solo-ray-auth"}
    # What Kubernetes stores but no RLJob may hold (bounded.py): deep nesting, beyond int64.
    deep = rljob("deep")
    deep["spec"]["trainer"]["envConfig"] = {
        "x": functools.reduce(lambda inner, _: [inner], range(200), [])
    }
    huge = rljob("huge")
    huge["spec"]["trainer"]["stop"] = {"timesteps": 2**70}
    return {
        "deep": (deep, "spec.trainer.envConfig.x[0][0]"),
        "huge": (huge, f"spec.trainer.stop.timesteps: {2**70} does not fit in the 64-bit"),
        "secretive": (
            secretive,
            "spec.storage.secretRef.name: the Secret s3-credentials is not one jobs may reference",
        ),
        "snooping": (
            snooping,
            "spec.trainer.checkpoint.credentialsSecret: solo-ray-auth is a Secret of the operator",
        ),
        "broken": (misspelt, "spec.trainer.hyperparameters.lerning_rate"),
        "mispaired": (mispaired, "spec.trainer.optimizer: AsyncGradients cannot drive APPO"),
        "misplaced": (misplaced, "spec.trainer.optimizerConfig.replayShards: used by AsyncReplay"),
    }


def test_an_invalid_job_fails_naming_the_field_and_creates_nothing(cluster: Cluster):
    with cluster.operator():
        for name, (job, field) in invalid_jobs().items():
            cluster.submit(job)
            failed = cluster.wait_phase(name, "Failed")
            condition = cluster.condition(name, "Failed")
            assert condition["reason"] == "InvalidSpec"
            assert field in condition["message"]
            assert failed["completionTime"]
            # The Event is posted beside the status write, not before it: wait for it.
            wait_until(
                lambda: ("Warning", "InvalidSpec") in cluster.events(name),  # noqa: B023
                30,
                f"the InvalidSpec Event of {name}",
            )
            assert cluster.clusters(name) == []
            assert cluster.kube_api.get(f"{SECRETS}/{name}-ray-auth", check=False)["code"] == 404


def iteration(cluster: Cluster, name: str) -> int:
    return cluster.status(name).get("progress", {}).get("iteration", 0)


def test_a_preempted_spot_worker_then_suspend_and_resume(cluster: Cluster):
    job = rljob(
        "spot",
        rolloutWorkers={
            "replicas": 1,
            "envsPerWorker": 4,
            "spot": {"enabled": True, "provider": "gke"},
        },
    )
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        cluster.wait_phase("spot", "Running")
        wait_until(lambda: iteration(cluster, "spot") >= 1, PATIENCE, "progress")
        # The operator serves the running driver's output through its log relay (the API's way).
        assert relayed_output(cluster, "spot", attempt=1).strip()

        # The node of the rollout worker is reclaimed: Kubernetes marks its pod, then evicts it.
        [worker] = cluster.kube_api.list(PODS, params={"labelSelector": "ray.io/node-type=worker"})
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "spot capacity reclaimed",
        }
        with cluster.kuberay.lock:  # the kubelet and KubeRay act after the operator has seen it
            cluster.kube_api.patch(
                f"{PODS}/{worker['metadata']['name']}/status",
                {"status": {"conditions": [*RUNNING_READY["conditions"], disruption]}},
            )
            preempted = cluster.wait_phase("spot", "Preempted")
        assert (preempted["preemptions"], preempted["restarts"], preempted["attempt"]) == (1, 0, 1)
        assert cluster.condition("spot", "Preempted")["reason"] == "WorkerPreempted"
        running = cluster.wait_phase("spot", "Running")  # the group was refilled
        assert (running["preemptions"], running["attempt"]) == (1, 1)
        assert ("Warning", "WorkerPreempted") in cluster.events("spot")
        # The Event may be posted just after the status that says Running.
        refilled = ("Normal", "WorkersRefilled")
        wait_until(
            lambda: refilled in cluster.events("spot"), PATIENCE, "the WorkersRefilled Event"
        )
        assert cluster.kuberay.submissions("spot") == ["spot-1"]  # the driver kept going

        # Suspend: the Ray cluster goes (its driver checkpoints on the way out), the job stays.
        cluster.kube_api.patch(cluster.kube_api.rljobs(name="spot"), {"spec": {"suspend": True}})
        suspended = cluster.wait_phase("spot", "Suspended")
        wait_until(lambda: not cluster.clusters("spot"), PATIENCE, "the RayCluster deleted")
        run_dir = Path(cluster.settings.run_dir_root) / "spot"
        checkpoints = wait_until(lambda: list((run_dir / "checkpoints").glob("checkpoint-*")), 60)
        assert suspended["preemptions"] == 1
        assert cluster.condition("spot", "Suspended")["status"] == "True"
        stopped_at = max(int(c.name.split("-")[1]) for c in checkpoints)

        # Resumed on a cluster whose upgrades must not wait for it: drains may take the head now.
        assert cluster.kube_api.get(f"{PDBS}/spot-head")["spec"]["maxUnavailable"] == 0
        drainable = {"suspend": False, "learner": {"disruptionBudget": {"maxUnavailable": 1}}}
        cluster.kube_api.patch(cluster.kube_api.rljobs(name="spot"), {"spec": drainable})
        resumed = cluster.wait_phase("spot", "Running")
        assert (resumed["attempt"], resumed["restarts"], resumed["preemptions"]) == (2, 0, 1)
        assert cluster.kube_api.get(f"{PDBS}/spot-head")["spec"]["maxUnavailable"] == 1
        assert cluster.kuberay.submissions("spot") == ["spot-1", "spot-2"]
        # The new attempt's driver goes on from the checkpoint, not from iteration 0.
        wait_until(
            lambda: iteration(cluster, "spot") > stopped_at,
            PATIENCE,
            "progress past the checkpoint",
        )

        cluster.kube_api.delete(cluster.kube_api.rljobs(name="spot"))
        wait_until(
            lambda: not cluster.clusters("spot"), PATIENCE, "the RayCluster gone with its job"
        )


def test_kubectl_scale_resizes_a_running_elastic_job_in_place(cluster: Cluster):
    """An elastic fleet (minReplicas and maxReplicas set) scaled through the RLJob's scale
    subresource, as `kubectl scale` and an HPA write it, and by an edit: the running RayCluster's
    rollout group follows, with no new attempt, cluster or driver."""
    workers = {"replicas": 1, "minReplicas": 1, "maxReplicas": 3, "envsPerWorker": 4}
    job = rljob("elastic", rolloutWorkers=workers)
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    path = cluster.kube_api.rljobs(name="elastic")

    def rollout_replicas() -> int:
        [ray_cluster] = cluster.clusters("elastic")
        [group] = ray_cluster["spec"]["workerGroupSpecs"]
        return group["replicas"]

    with cluster.operator():
        cluster.submit(job)
        cluster.wait_phase("elastic", "Running")
        wait_until(lambda: cluster.status("elastic").get("replicas") == 1, PATIENCE, "1 worker")
        [built] = cluster.clusters("elastic")
        assert built["spec"]["workerGroupSpecs"][0]["maxReplicas"] == 3

        cluster.kube_api.patch(f"{path}/scale", {"spec": {"replicas": 3}})
        wait_until(lambda: rollout_replicas() == 3, PATIENCE, "the rollout group resized")
        wait_until(lambda: cluster.status("elastic").get("replicas") == 3, PATIENCE, "3 workers")
        scale = cluster.kube_api.get(f"{path}/scale")
        assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 3)
        assert scale["status"]["selector"] == "kuberl.io/job=elastic,ray.io/node-type=worker"

        cluster.kube_api.patch(path, {"spec": {"rolloutWorkers": {"replicas": 2}}})
        wait_until(lambda: rollout_replicas() == 2, PATIENCE, "the rollout group shrunk")
        wait_until(lambda: cluster.status("elastic").get("replicas") == 2, PATIENCE, "2 workers")
        [after] = cluster.clusters("elastic")
        assert after["metadata"]["uid"] == built["metadata"]["uid"]
        status = cluster.status("elastic")
        assert (status["phase"], status["attempt"], status["restarts"]) == ("Running", 1, 0)
        assert cluster.condition("elastic", "UpToDate")["status"] == "True"
        assert cluster.kuberay.submissions("elastic") == ["elastic-1"]

        cluster.kube_api.delete(path)
        wait_until(lambda: not cluster.clusters("elastic"), PATIENCE, "the RayCluster gone")


def learner_metrics(utilisation: float, lag: float, dropped: int) -> str:
    """What a driver's metrics say of its learner (and that it has trained an iteration)."""
    return (
        f"kuberl_training_iteration 3\nkuberl_last_iteration_timestamp_seconds {time.time()}\n"
        f"kuberl_learner_utilisation {utilisation}\nkuberl_policy_lag_max {lag}\n"
        "# TYPE kuberl_stale_batches_dropped counter\n"
        f"kuberl_stale_batches_dropped_total {dropped}\n"
    )


def test_the_learner_driven_fleet_grows_for_a_starved_learner_and_shrinks_a_saturated_one(
    cluster: Cluster, monkeypatch, tmp_path
):
    """spec.rolloutWorkers.autoscaling with a driver whose metrics the test sets (fake_driver.py,
    run by the real Ray Jobs API): the operator writes replicas as an HPA would, with an Event, and
    the running cluster follows, on one attempt."""
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(learner_metrics(utilisation=0.2, lag=1, dropped=0))
    fake = [sys.executable, str(Path(__file__).with_name("fake_driver.py"))]
    command = shlex.join([*fake, str(cluster.settings.trainer_metrics_port), str(metrics)])
    monkeypatch.setattr(builders, "driver_entrypoint", lambda job, settings: command)
    workers = {"replicas": 2, "minReplicas": 1, "maxReplicas": 6, "envsPerWorker": 4}
    workers["autoscaling"] = {"stabilizationSeconds": 0}
    job = rljob("auto", rolloutWorkers=workers)
    job["spec"]["trainer"] = {"algorithm": "IMPALA", "env": "CartPole-v1", "seed": 0}
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    path = cluster.kube_api.rljobs(name="auto")

    def replicas() -> int:
        return cluster.job("auto")["spec"]["rolloutWorkers"]["replicas"]

    def group() -> int:
        [ray_cluster] = cluster.clusters("auto")
        return ray_cluster["spec"]["workerGroupSpecs"][0]["replicas"]

    with cluster.operator():
        cluster.submit(job)
        cluster.wait_phase("auto", "Running")
        wait_until(lambda: replicas() == 6, PATIENCE, "the fleet grown to maxReplicas")
        wait_until(lambda: group() == 6, PATIENCE, "the rollout group grown")
        assert ("Normal", "ScaledUp") in cluster.events("auto")

        metrics.write_text(learner_metrics(utilisation=0.99, lag=3, dropped=0))
        wait_until(lambda: replicas() == 1, PATIENCE, "the fleet shrunk to minReplicas")
        wait_until(lambda: group() == 1, PATIENCE, "the rollout group shrunk")
        assert ("Normal", "ScaledDown") in cluster.events("auto")
        status = cluster.status("auto")
        assert (status["phase"], status["attempt"], status["restarts"]) == ("Running", 1, 0)
        assert cluster.kuberay.submissions("auto") == ["auto-1"]

        cluster.kube_api.delete(path)
        wait_until(lambda: not cluster.clusters("auto"), PATIENCE, "the RayCluster gone")


def test_a_failing_driver_is_retried_on_the_same_cluster_after_the_backoff_then_fails(
    cluster: Cluster,
):
    job = rljob("flaky", restartPolicy={"maxRestarts": 1, "backoffSeconds": 3})
    # The run directory cannot be made (a file is in the way): the driver crashes, as it would on
    # a broken volume, which a later attempt may find mended.
    runs = Path(cluster.settings.run_dir_root)
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "flaky").write_text("in the way")
    with cluster.operator():
        cluster.submit(job)
        [ray_cluster] = wait_until(lambda: cluster.clusters("flaky"), PATIENCE, "the RayCluster")
        backoff = cluster.wait_phase("flaky", "Resuming")
        progressing = cluster.condition("flaky", "Progressing")
        assert progressing["reason"] == "RestartBackoff"
        assert "restart 1 of 1 in 3s, on the same Ray cluster" in progressing["message"]
        assert backoff["restarts"] == 1 and backoff["attempt"] == 2
        assert backoff["clusterAttempt"] == 1
        failed_at = time.monotonic()
        wait_until(lambda: "flaky-2" in cluster.kuberay.submissions("flaky"), 30, "attempt 2")
        assert time.monotonic() - failed_at >= 2  # the backoff (3 s from the failure) waited out
        # A new Ray job on the same RayCluster, told its attempt.
        [same] = cluster.clusters("flaky")
        assert same["metadata"]["uid"] == ray_cluster["metadata"]["uid"]
        second = cluster.kuberay.submission("flaky-2")
        assert second["runtime_env"]["env_vars"]["KUBERL_ATTEMPT"] == "2"
        assert second["start_time"] >= cluster.kuberay.submission("flaky-1")["end_time"]

        failed = cluster.wait_phase("flaky", "Failed")
        assert failed["restarts"] == 1
        condition = cluster.condition("flaky", "Failed")
        assert condition["reason"] == "BackoffLimitExceeded"
        assert "maxRestarts (1) used up" in condition["message"]
        assert "driver FAILED" in condition["message"]
        assert cluster.kuberay.submissions("flaky") == ["flaky-1", "flaky-2"]
        events = cluster.events("flaky")
        for event in ("DriverFailed", "BackoffLimitExceeded"):
            assert ("Warning", event) in events, events
        assert ("Normal", "RetryingOnSameCluster") in events, events
        wait_until(lambda: not cluster.clusters("flaky"), PATIENCE, "the RayCluster deleted")


def test_a_lost_head_rebuilds_the_cluster_for_the_next_attempt(cluster: Cluster):
    job = rljob("headless", restartPolicy={"backoffSeconds": 1})
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        cluster.wait_phase("headless", "Running")
        [first] = cluster.clusters("headless")
        [head] = cluster.kube_api.list(
            PODS, params={"labelSelector": "ray.io/cluster=headless,ray.io/node-type=head"}
        )
        lost = {"phase": "Failed", "message": "the node ran out of memory"}
        cluster.kube_api.patch(f"{PODS}/{head['metadata']['name']}/status", {"status": lost})

        rebuilt = wait_until(
            lambda: [
                c
                for c in cluster.clusters("headless")
                if c["metadata"]["uid"] != first["metadata"]["uid"]
            ],
            PATIENCE,
            "a new RayCluster",
        )
        assert rebuilt[0]["metadata"]["labels"]["kuberl.io/attempt"] == "2"
        again = wait_until(
            lambda: (
                (s := cluster.status("headless")).get("attempt") == 2
                and s.get("phase") == "Running"
                and s
            ),
            PATIENCE,
            "attempt 2 running",
        )
        assert (again["restarts"], again["clusterAttempt"]) == (1, 2)
        assert cluster.kuberay.submissions("headless") == ["headless-1", "headless-2"]
        said = [
            e["message"]
            for e in cluster.kube_api.list(EVENTS)
            if e["involvedObject"]["name"] == "headless" and e["reason"] == "HeadFailed"
        ]
        assert said and "on a new Ray cluster (its head pod was lost)" in said[0], said
        cluster.kube_api.delete(cluster.kube_api.rljobs(name="headless"))
        wait_until(lambda: not cluster.clusters("headless"), PATIENCE, "the RayCluster gone")


def test_an_earlier_driver_still_running_is_stopped_and_ended_before_the_next_is_submitted(
    cluster: Cluster,
):
    job = rljob("overlap", restartPolicy={"backoffSeconds": 1})
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        cluster.wait_phase("overlap", "Running")
        wait_until(lambda: iteration(cluster, "overlap") >= 1, PATIENCE, "training")
        [ray_cluster] = cluster.clusters("overlap")
    # The operator went down having given attempt 1 up for attempt 2 on the same cluster (the
    # status is written before the action), while attempt 1's driver goes on training.
    status = cluster.status("overlap")
    backoff = {
        "type": "Progressing",
        "status": "False",
        "reason": "RestartBackoff",
        "message": "driver FAILED: lost; restart 1 of 3 in 1s, on the same Ray cluster",
        "lastTransitionTime": status["startTime"],
    }
    conditions = [c for c in status["conditions"] if c["type"] != "Progressing"] + [backoff]
    given_up = {"phase": "Resuming", "attempt": 2, "clusterAttempt": 1, "restarts": 1}
    cluster.kube_api.patch(
        cluster.kube_api.rljobs(name="overlap") + "/status",
        {"status": given_up | {"conditions": conditions, "headPodUID": None}},
    )
    assert cluster.kuberay.submission("overlap-1")["status"] == "RUNNING"
    with cluster.operator():
        wait_until(
            lambda: cluster.status("overlap").get("phase") == "Running",
            PATIENCE,
            "attempt 2 running",
        )
        first = cluster.kuberay.submission("overlap-1")
        second = cluster.kuberay.submission("overlap-2")
        assert first["status"] == "STOPPED"
        assert second["start_time"] >= first["end_time"]  # never side by side
        assert second["runtime_env"]["env_vars"]["KUBERL_ATTEMPT"] == "2"
        assert [c["metadata"]["uid"] for c in cluster.clusters("overlap")] == [
            ray_cluster["metadata"]["uid"]
        ]
        assert cluster.status("overlap")["attempt"] == 2
        assert ("Normal", "RetryingOnSameCluster") in cluster.events("overlap")
        cluster.kube_api.delete(cluster.kube_api.rljobs(name="overlap"))
        wait_until(lambda: not cluster.clusters("overlap"), PATIENCE, "the RayCluster gone")


def test_an_operator_restarted_mid_reconcile_duplicates_nothing(cluster: Cluster):
    job = rljob("steady")
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    cluster.kuberay.hold.set()  # the cluster will not come up while the operator is down
    with cluster.operator():
        cluster.submit(job)
        [first] = wait_until(lambda: cluster.clusters("steady"), PATIENCE, "the RayCluster")
        cluster.wait_phase("steady", "Provisioning")
    with cluster.operator():  # restarted while provisioning
        time.sleep(2)
        [same] = cluster.clusters("steady")
        assert same["metadata"]["uid"] == first["metadata"]["uid"]
        cluster.kuberay.hold.clear()
        cluster.wait_phase("steady", "Running")
    with cluster.operator():  # restarted while the driver runs
        time.sleep(2)
        status = cluster.wait_phase("steady", "Running")
        assert (status["attempt"], status["restarts"]) == (1, 0)
        assert [c["metadata"]["uid"] for c in cluster.clusters("steady")] == [
            first["metadata"]["uid"]
        ]
        assert cluster.kuberay.submissions("steady") == ["steady-1"]
        assert [e for e in cluster.events("steady") if e[1] == "Provisioning"] == [
            ("Normal", "Provisioning")
        ]
        cluster.kube_api.delete(cluster.kube_api.rljobs(name="steady"))
        wait_until(
            lambda: not cluster.clusters("steady"), PATIENCE, "the RayCluster gone with its job"
        )


def test_a_job_only_the_driver_finds_invalid_fails_at_once(cluster: Cluster):
    job = rljob("typo", restartPolicy={"maxRestarts": 3, "backoffSeconds": 1})
    job["spec"]["trainer"]["env"] = "CartPol-v1"  # the operator has no gymnasium to check it
    with cluster.operator():
        cluster.submit(job)
        failed = cluster.wait_phase("typo", "Failed")
        condition = cluster.condition("typo", "Failed")
        assert condition["reason"] == "InvalidSpec", condition
        assert "the driver found the job invalid" in condition["message"]
        assert "spec.trainer.env" in condition["message"] and "CartPole-v1" in condition["message"]
        assert (failed["restarts"], failed["attempt"]) == (0, 1)
        assert cluster.kuberay.submissions("typo") == ["typo-1"]  # no retry
        wait_until(
            lambda: ("Warning", "InvalidSpec") in cluster.events("typo"), PATIENCE, "the Event"
        )
        wait_until(lambda: not cluster.clusters("typo"), PATIENCE, "the RayCluster deleted")


def test_a_head_kuberay_recreated_is_a_restart_not_a_second_submission(cluster: Cluster):
    job = rljob("recreated", restartPolicy={"backoffSeconds": 1})
    job["spec"]["trainer"]["stop"] = {"timesteps": 10_000_000}
    with cluster.operator():
        cluster.submit(job)
        running = cluster.wait_phase("recreated", "Running")
        [head] = cluster.kube_api.list(PODS, params={"labelSelector": "ray.io/node-type=head"})
        assert running["headPodUID"] == head["metadata"]["uid"]

        # The head container died and KubeRay replaced the pod before the operator looked.
        with cluster.kuberay.lock:
            cluster.kube_api.delete(f"{PODS}/{head['metadata']['name']}")
            [ray_cluster] = cluster.clusters("recreated")
            cluster.kuberay.create_pod(ray_cluster, "head", "headgroup")
            restarted = wait_until(
                lambda: cluster.status("recreated").get("restarts"), PATIENCE, "the restart"
            )
        assert restarted == 1
        assert cluster.condition("recreated", "Progressing")["reason"] == "RestartBackoff"
        assert ("Warning", "HeadReplaced") in cluster.events("recreated")
        again = cluster.wait_phase("recreated", "Running")
        assert (again["attempt"], again["restarts"]) == (2, 1)
        assert cluster.kuberay.submissions("recreated") == ["recreated-1", "recreated-2"]
        cluster.kube_api.delete(cluster.kube_api.rljobs(name="recreated"))
        wait_until(lambda: not cluster.clusters("recreated"), PATIENCE, "the RayCluster gone")


def test_the_deadline_counts_from_the_start_so_a_job_stuck_provisioning_fails(cluster: Cluster):
    cluster.kuberay.hold.set()  # no node ever comes up
    with cluster.operator():
        cluster.submit(rljob("stuck", activeDeadlineSeconds=2))
        failed = cluster.wait_phase("stuck", "Failed")
        condition = cluster.condition("stuck", "Failed")
        assert condition["reason"] == "DeadlineExceeded"
        assert "activeDeadlineSeconds 2" in condition["message"]
        assert failed["startTime"] and failed["restarts"] == 0
        wait_until(lambda: not cluster.clusters("stuck"), PATIENCE, "the RayCluster deleted")


def test_kuberay_uninstalled_after_it_was_found_is_said_not_retried(cluster: Cluster):
    cluster.kuberay.hold.set()
    with cluster.operator():
        cluster.submit(rljob("orphan"))
        wait_until(lambda: cluster.clusters("orphan"), PATIENCE, "the RayCluster")
        cluster.wait_phase("orphan", "Provisioning")

        # Uninstalling KubeRay deletes its CRD, and every RayCluster with it.
        cluster.kube_api.delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayclusters.ray.io"
        )
        available = wait_until(
            lambda: next(
                (
                    c
                    for c in cluster.status("orphan").get("conditions", [])
                    if c["type"] == "KubeRayAvailable" and c["status"] == "False"
                ),
                None,
            ),
            30,
            "KubeRayAvailable=False",
        )
        assert available["reason"] == "CRDNotFound" and "install KubeRay" in available["message"]
        status = cluster.status("orphan")
        assert (status["phase"], status["restarts"], status["attempt"]) == ("Provisioning", 0, 1)
        wait_until(
            lambda: ("Warning", "CRDNotFound") in cluster.events("orphan"), PATIENCE, "the Event"
        )


@pytest.mark.parametrize("cluster", [{"kuberay_crd": False}], indirect=True)
def test_without_kuberay_every_job_says_so_and_the_operator_keeps_running(cluster: Cluster):
    with cluster.operator():
        for name in ("first", "second"):
            cluster.submit(rljob(name))
        for name in ("first", "second"):
            available = wait_until(
                lambda n=name: next(
                    (
                        c
                        for c in cluster.status(n).get("conditions", [])
                        if c["type"] == "KubeRayAvailable"
                    ),
                    None,
                ),
                20,
                f"{name}'s KubeRayAvailable condition",
            )
            assert (available["status"], available["reason"]) == ("False", "CRDNotFound")
            assert (
                "rayclusters.ray.io" in available["message"]
                and "install KubeRay" in available["message"]
            )
            assert cluster.status(name)["phase"] == "Pending"
            assert cluster.condition(name, "Progressing")["status"] == "False"
            # the Event is posted after the status that says the same
            wait_until(
                lambda n=name: ("Warning", "CRDNotFound") in cluster.events(n),
                PATIENCE,
                f"{name}'s Event",
            )
        assert cluster.kube_api.list(f"{SECRETS}") == []  # nothing created meanwhile


NO_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)
NO_MATCH = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def unschedulable(message: str) -> dict:
    """A pod's status as kube-scheduler leaves it when no node fits."""
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    return {"phase": "Pending", "conditions": [scheduled]}


def unschedulable_events(cluster: Cluster, name: str) -> list[str]:
    """The messages of the job's Unschedulable Events, in the order they were posted."""
    return [
        e["message"]
        for e in cluster.kube_api.list(EVENTS)
        if e["involvedObject"]["name"] == name and e["reason"] == "Unschedulable"
    ]


def pod_lists(cluster: Cluster) -> int:
    """How often the operator has listed pods: once per reconcile of a job with a cluster."""
    return sum(1 for r in list(cluster.kube_api.api.log) if r.path == PODS and r.method == "GET")


def test_pods_that_cannot_be_scheduled_are_said_once_per_message_until_they_are(cluster: Cluster):
    cluster.kuberay.hold.set()  # the test plays KubeRay: pods that find no node
    job = rljob("gpuless", learner={"gpus": 1}, rolloutWorkers={"replicas": 1})
    with cluster.operator():
        cluster.submit(job)
        [ray_cluster] = wait_until(lambda: cluster.clusters("gpuless"), PATIENCE, "the RayCluster")
        cluster.wait_phase("gpuless", "Provisioning")

        # No node has a GPU: the head pod stays Pending with the scheduler's reason.
        cluster.kube_api.create(PODS, pod("gpuless-head", ray_cluster, "head", "headgroup"))
        cluster.kube_api.patch(f"{PODS}/gpuless-head/status", {"status": unschedulable(NO_GPU)})

        def schedulable() -> dict:
            return cluster.condition("gpuless", "Schedulable")

        said = wait_until(
            lambda: schedulable()["status"] == "False" and schedulable(), PATIENCE, "it"
        )
        head_message = f"the head pod cannot be scheduled: {NO_GPU}"
        assert (said["reason"], said["message"]) == ("Unschedulable", head_message)
        wait_until(lambda: unschedulable_events(cluster, "gpuless"), PATIENCE, "the Event")
        # The operator polls on and sees the same: it does not say it again.
        seen = pod_lists(cluster)
        wait_until(lambda: pod_lists(cluster) >= seen + 3, PATIENCE, "three more reconciles")

        # Nor can the rollout worker be placed: a new message, one more Event.
        worker = pod("gpuless-worker", ray_cluster, "worker", "rollout")
        cluster.kube_api.create(PODS, worker)
        cluster.kube_api.patch(f"{PODS}/gpuless-worker/status", {"status": unschedulable(NO_MATCH)})
        both = f"{head_message}; 1 pod of worker group rollout cannot be scheduled: {NO_MATCH}"
        wait_until(
            lambda: both in unschedulable_events(cluster, "gpuless"), PATIENCE, "the 2nd Event"
        )
        # kopf posts Events in order: a repeat of the first would be there by now.
        assert unschedulable_events(cluster, "gpuless") == [head_message, both]
        assert cluster.status("gpuless")["phase"] == "Provisioning"

        # A GPU node joins and the spot pool grows: both pods are placed.
        placed = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        for name in ("gpuless-head", "gpuless-worker"):
            cluster.kube_api.patch(f"{PODS}/{name}/status", {"status": placed})
        cleared = wait_until(
            lambda: schedulable()["status"] == "True" and schedulable(), PATIENCE, "it"
        )
        assert (cleared["reason"], cleared["message"]) == ("NoUnschedulablePods", "")
        assert unschedulable_events(cluster, "gpuless") == [head_message, both]
        assert [e for e in cluster.events("gpuless") if e[1] == "Provisioning"] == [
            ("Normal", "Provisioning")
        ]
        cluster.kube_api.delete(cluster.kube_api.rljobs(name="gpuless"))
        wait_until(lambda: not cluster.clusters("gpuless"), PATIENCE, "the RayCluster gone")
