"""Every query of the dashboards and the alert rules against a real Prometheus (Debian's server)
scraping real kuberl processes on loopback, as the chart's monitors scrape them in a cluster:

- `kuberl train` (job `cartpole` in namespace `default`) as scrape job kuberl-trainer;
- the operator (kopf for real, against the emulated Kubernetes API, with the emulated KubeRay of
  the operator tests bringing up pods) as kuberl-operator, reconciling an RLJob of the same name
  whose spot rollout worker gets preempted, and an invalid RLJob that fails;
- `kuberl serve` (local backend) as kuberl-api.

The operator's RLJob has no Ray head here (its driver cannot be submitted, and the reconciles that
try are counted as errors), so it stays Provisioning: enough for every per-job operator series.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import requests
import yaml
from kubeapi import RAYCLUSTER_CRD, running_kube_api
from promql import (
    EXTERNAL_METRICS,
    RULES,
    alert_rules,
    dashboards,
    label_values,
    metric_names,
    panel_queries,
    substitute,
    variables,
)

from kuberl_operator.handlers import registry
from kuberl_operator.settings import OperatorSettings
from testkit import ROOT, edited, free_port, rljob, wait_until

# The helpers of the API's and the operator's tests: `kuberl serve` in a process, and the
# emulated KubeRay and cluster of the operator's end-to-end tests.
sys.path[:0] = [str(ROOT / "tests" / "api"), str(ROOT / "tests" / "operator")]
from apiserver import ApiClient, ApiServer, small_job  # noqa: E402
from test_operator import PODS, RUNNING_READY, Cluster, KubeRay  # noqa: E402

pytestmark = pytest.mark.slow

JOB, NAMESPACE = "cartpole", "default"
SCRAPE_JOBS = ("kuberl-trainer", "kuberl-operator", "kuberl-api")
# What Grafana would send for its variables, at a 1 s scrape interval.
VARIABLES = {
    "namespace": NAMESPACE,
    "rljob": JOB,
    "__rate_interval": "10s",
    "__interval": "2s",
    "__range": "1h",
    "__range_s": "3600",
}
# Panels whose series only a cluster has; every other panel must show data here.
NEEDS_CLUSTER = {
    (
        "kuberl-fleet",
        "GPU utilisation",
    ): "DCGM_FI_DEV_GPU_UTIL: NVIDIA's DCGM exporter on GPU nodes",
    ("kuberl-spot", "Pending rollout worker pods"): "kube_pod_status_phase: kube-state-metrics",
}
SEVERAL_POLICIES = {
    ("kuberl-training", "Return per policy"),
    ("kuberl-training", "Learner statistics per policy"),
}
"""Panels only a multi-agent job of several policies fills (the job scraped here has one): their
queries must still parse."""


class Prometheus:
    """Debian's Prometheus on a free loopback port with its own data directory, scraping every
    second and evaluating the alert rules every second; killed by PID."""

    def __init__(self, work: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,  # as the chart's monitors
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
                for job, port in targets.items()
            ],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = work / "prometheus.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [
                    str(shutil.which("prometheus")),
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._ready, 30, f"Prometheus on {self.url} (log: {self.log})")

    def _ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        with contextlib.suppress(requests.RequestException):
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        return False

    def api(self, path: str, **params: Any) -> Any:
        answer = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert answer["status"] == "success", (path, params, answer)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


@contextlib.contextmanager
def training(work: Path, port: int) -> Iterator[subprocess.Popen]:
    """`kuberl train` of a CartPole job that would run for hours (ended by PID), evaluating and
    checkpointing every other iteration."""
    job = edited(
        rljob(JOB),
        **{
            "metadata.namespace": NAMESPACE,
            "spec.trainer.stop": {"iterations": 1_000_000},
            "spec.trainer.checkpoint": {"everyIterations": 2, "keep": 1},
            "spec.trainer.evaluation": {"everyIterations": 2, "episodes": 1},
        },
    )
    (work / "job.yaml").write_text(yaml.safe_dump(job))
    command = [sys.executable, "-m", "kuberl_cli.main", "train", str(work / "job.yaml")]
    command += ["--run-dir", str(work / "run"), "--metrics-port", str(port)]
    # One thread: this trainer shares the machine with everything else of this test.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}
    with open(work / "train.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextlib.contextmanager
def operating(work: Path, metrics_port: int) -> Iterator[Cluster]:
    """The operator against the emulated API, with the emulated KubeRay bringing up pods. Its Ray
    Jobs API address is a closed port: no driver is ever submitted."""
    settings = OperatorSettings(
        ray_dashboard_url=f"http://127.0.0.1:{free_port()}",
        run_dir_root=str(work / "runs"),
        job_config_dir=str(work / "etc"),
        poll_seconds=0.5,
        metrics_port=metrics_port,
    )
    with running_kube_api() as kube_api, pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECONFIG", str(kube_api.kubeconfig(work / "kubeconfig")))
        kube_api.register_crd()
        kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
        with KubeRay(kube_api.url, settings.ray_dashboard_url, "token", work / "etc") as kuberay:
            cluster = Cluster(kube_api, kuberay, settings, token="token")
            with kube_api.kopf(registry, login=False, memo=kopf.Memo(settings=settings)):
                yield cluster


def preempt_the_rollout_worker(cluster: Cluster) -> None:
    """Kubernetes marks the spot worker's pod disrupted; the operator counts it before the
    emulated KubeRay replaces it."""
    selector = {"labelSelector": f"ray.io/cluster={JOB},ray.io/node-type=worker"}
    [worker] = wait_until(lambda: cluster.kube_api.list(PODS, params=selector), 30, "the worker")
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    with cluster.kuberay.lock:
        cluster.kube_api.patch(
            f"{PODS}/{worker['metadata']['name']}/status",
            {"status": {"conditions": [*RUNNING_READY["conditions"], disruption]}},
        )
        wait_until(lambda: cluster.status(JOB).get("preemptions") == 1, 30, "the preemption")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[Prometheus]:
    if shutil.which("prometheus") is None:
        pytest.skip("needs the prometheus server (Debian package prometheus): not installed")
    work = tmp_path_factory.mktemp("observability")
    spot_job = rljob(
        JOB,
        rolloutWorkers={
            "replicas": 1,
            "envsPerWorker": 4,
            "spot": {"enabled": True, "provider": "gke"},
        },
    )
    broken = edited(rljob("broken"), **{"spec.trainer.hyperparameters.lerning_rate": 0.1})
    trainer_port, operator_port = free_port(), free_port()
    with (
        training(work, trainer_port),
        operating(work, operator_port) as cluster,
        ApiServer(work / "api", "--max-running", "0") as api,  # stores jobs, runs none
    ):
        ports = {"kuberl-trainer": trainer_port, "kuberl-operator": operator_port}
        server = Prometheus(work, ports | {"kuberl-api": api.port})
        try:
            assert ApiClient(api.url).submit(small_job("queued")).status_code == 201
            cluster.submit(spot_job)
            cluster.submit(broken)
            preempt_the_rollout_worker(cluster)
            yield server
        finally:
            server.stop()


def test_every_target_is_scraped(prometheus: Prometheus):
    def healthy() -> bool:
        targets = prometheus.api("targets")["activeTargets"]
        return sorted(t["labels"]["job"] for t in targets if t["health"] == "up") == sorted(
            SCRAPE_JOBS
        )

    wait_until(healthy, 60, "every target up")
    # The RLJob's name is in `rljob`; `job` stays the scrape job's, as on `up`.
    [series] = prometheus.query(f'kuberl_training_timesteps{{namespace="{NAMESPACE}"}}')
    assert (series["metric"]["rljob"], series["metric"]["job"]) == (JOB, "kuberl-trainer")
    [phase] = prometheus.query(f'kuberl_operator_job_phase{{rljob="{JOB}"}}')
    assert phase["metric"]["job"] == "kuberl-operator"


def test_every_dashboard_query_runs_and_shows_data(prometheus: Prometheus):
    queries = panel_queries()
    # `up` is Prometheus's own: a panel reading only that and kuberl's series has data here
    external = {
        (q.dashboard, q.panel)
        for q in queries
        if metric_names(q.expr) & (EXTERNAL_METRICS.keys() - {"up"})
    }
    assert external == NEEDS_CLUSTER.keys()
    missing: list[str] = []

    def all_show_data() -> bool:
        missing[:] = []
        for q in queries:
            result = prometheus.query(substitute(q.expr, VARIABLES))  # fails unless it parses
            if not result and (q.dashboard, q.panel) not in NEEDS_CLUSTER.keys() | SEVERAL_POLICIES:
                missing.append(f"{q.dashboard} / {q.panel}: {q.expr}")
        return not missing

    try:
        wait_until(all_show_data, 90, "data for every panel", interval=1)
    except AssertionError:
        pytest.fail("no data for:\n" + "\n".join(missing))


def test_dashboard_variables_offer_the_job(prometheus: Prometheus):
    for board in dashboards().values():
        for variable in variables(board):
            if variable["type"] != "query":
                continue
            selector, label = label_values(variable["definition"])
            params = {"match[]": substitute(selector, VARIABLES)} if selector else {}
            values = prometheus.api(f"label/{label}/values", **params)
            assert VARIABLES[label] in values, (board["uid"], variable["definition"], values)


def test_alert_rules_evaluate_and_the_failed_job_alerts(prometheus: Prometheus):
    for rule in alert_rules():
        prometheus.query(rule["expr"])  # parses (the query API answers success)

    def evaluated() -> list[dict[str, Any]] | None:
        groups = prometheus.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        done = all(not rule["lastEvaluation"].startswith("0001") for rule in rules)
        return rules if rules and done else None

    rules = wait_until(evaluated, 30, "every rule evaluated")
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in alert_rules()}
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))

    def failed_job_alert() -> dict[str, Any] | None:
        alerts = prometheus.api("alerts")["alerts"]
        return next((a for a in alerts if a["labels"]["alertname"] == "KuberlJobFailed"), None)

    alert = wait_until(failed_job_alert, 30, "KuberlJobFailed pending")
    assert (alert["labels"]["rljob"], alert["labels"]["namespace"]) == ("broken", NAMESPACE)
    assert alert["annotations"]["summary"] == f"RLJob {NAMESPACE}/broken failed"
    firing = {a["labels"]["alertname"] for a in prometheus.api("alerts")["alerts"]}
    assert "KuberlOperatorDown" not in firing and "KuberlApiErrors" not in firing
