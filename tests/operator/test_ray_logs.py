"""A cluster job's driver output, from where Ray keeps it: the Jobs API of a real Ray head on
loopback (token authentication on, as KubeRay runs it). The operator's client follows a driver
until it exits; the API's kubernetes backend (a real `kuberl serve` against the emulated Kubernetes
API) serves the output of an RLJob's driver, snapshot and follow, presenting the token it derives
from the operator's key as the operator does; and each job's NetworkPolicy lets the API's pods
reach the Jobs API, and nothing else of the head."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import kmock
import pytest
import requests
from kubeapi import KubeAPIClient, running_kube_api
from rayhead import running_ray_head
from test_builders import SETTINGS, job_with
from test_network_policy import MONITORING_NS, OPERATOR_NS, PORTS, admits

from kuberl_operator.builders import build_network_policy, ray_auth_token
from kuberl_operator.builders.children import api_pod_labels
from kuberl_operator.ray_jobs import RayJobsClient
from kuberl_operator.settings import OperatorSettings
from testkit import rljob

# The API's test helpers (a real `kuberl serve`), from their folder.
API_TESTS = Path(__file__).resolve().parents[1] / "api"
if str(API_TESTS) not in sys.path:
    sys.path.append(str(API_TESTS))
from apiserver import ApiClient, ApiServer  # noqa: E402

pytestmark = pytest.mark.timeout(240)

NAMESPACE = "team-a"
KEY = "operator-key-" + "0" * 32  # the operator's ray_auth_key, which the API is given too
READER = "reader-token"  # may get rljobs in NAMESPACE, nothing else


def driver(release: Path) -> str:
    """A driver that prints a line, waits until the test creates `release`, prints another and
    exits: the test decides when it has written what. (Ray's first line of a log quotes the
    entrypoint: the words printed are not in it as printed.)"""
    code = (
        "import pathlib, time\n"
        "print('first', 'words', flush=True)\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        "print('last', 'words', flush=True)\n"
    )
    return f"{sys.executable} -c {shlex.quote(code)}"


def allow_reader(kube: KubeAPIClient) -> None:
    """TokenReview knows READER; SubjectAccessReview lets it get rljobs in NAMESPACE only."""

    def token_review(request):
        known = request.data["spec"]["token"] == READER
        user = {"username": "reader", "uid": "1", "groups": ["system:authenticated"]}
        return {"kind": "TokenReview", "status": {"authenticated": known, "user": user}}

    def access_review(request):
        attributes = request.data["spec"]["resourceAttributes"]
        wanted = (attributes["resource"], attributes["verb"], attributes["namespace"])
        allowed = wanted == ("rljobs", "get", NAMESPACE)
        return {"kind": "SubjectAccessReview", "status": {"allowed": allowed}}

    async def react():
        api = kube.api
        api[kmock.action.CREATE, kmock.resource("authentication.k8s.io", "v1", "tokenreviews")] << (
            token_review
        )
        reviews = kmock.resource("authorization.k8s.io", "v1", "subjectaccessreviews")
        api[kmock.action.CREATE, reviews] << access_review

    kube.call(react)


class Cluster:
    """The emulated Kubernetes API with one RLJob whose attempt 1 runs on a real Ray head (with
    that job's token), and the API in front of it."""

    def __init__(self, kube: KubeAPIClient, head_url: str, token: str, api: ApiServer) -> None:
        self.kube, self.head_url, self.token, self.api = kube, head_url, token, api
        self.reader = ApiClient(api.url, READER)

    def logs(self, name: str, **params: str) -> requests.Response:
        url = self.reader.url + self.reader.jobs(NAMESPACE, name, "logs")
        return self.reader.http.get(url, params=params, stream=True, timeout=(10, 120))

    def set_status(self, name: str, **status) -> None:
        self.kube.patch(self.kube.rljobs(NAMESPACE, name) + "/status", {"status": status})

    def create_job(self, name: str) -> dict:
        return self.kube.create(self.kube.rljobs(NAMESPACE), rljob(name, namespace=NAMESPACE))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("ray-logs")
    with running_kube_api() as kube:
        kube.register_crd()
        allow_reader(kube)
        job = kube.create(kube.rljobs(NAMESPACE), rljob("walker", namespace=NAMESPACE))
        settings = OperatorSettings(ray_auth_key=KEY)
        token = ray_auth_token(settings, NAMESPACE, "walker", job["metadata"]["uid"])
        with running_ray_head(token=token) as (head_url, _):
            env = {"KUBERL_RAY_AUTH_KEY": KEY, "KUBERL_RAY_DASHBOARD_URL": head_url}
            kubeconfig = kube.kubeconfig(tmp / "kubeconfig")
            args = ("--backend", "kubernetes", "--kubeconfig", str(kubeconfig))
            with ApiServer(tmp / "unused", *args, env=env) as api:
                yield Cluster(kube, head_url, token, api)


def submit(cluster: Cluster, submission_id: str, entrypoint: str) -> None:
    async def scenario():
        async with aiohttp.ClientSession() as session:
            client = RayJobsClient(cluster.head_url, cluster.token, session)
            assert await client.submit(submission_id, entrypoint)

    asyncio.run(scenario())


def test_the_jobs_api_client_follows_a_driver_as_it_writes_until_it_exits(cluster, tmp_path):
    release = tmp_path / "release"

    async def scenario():
        async with aiohttp.ClientSession() as session:
            client = RayJobsClient(cluster.head_url, cluster.token, session)
            await client.submit("direct-1", driver(release))
            chunks = client.follow_logs("direct-1", poll_s=0.2)
            seen = ""  # Ray writes a line of its own first
            while "first words" not in seen:
                seen += await asyncio.wait_for(anext(chunks), 90)
            assert (await client.status("direct-1")).status == "RUNNING"  # not ended: followed
            release.touch()
            seen += "".join([chunk async for chunk in chunks])  # ends once the driver exited
            assert (await client.status("direct-1")).status == "SUCCEEDED"
            return seen, await client.logs("direct-1")

    followed, whole = asyncio.run(scenario())
    assert followed == whole and "last words" in whole


def test_the_api_serves_the_drivers_output_snapshot_and_follow(cluster, tmp_path):
    release = tmp_path / "release"
    submit(cluster, "walker-1", driver(release))  # the operator's submission of attempt 1
    cluster.set_status("walker", phase="Running", attempt=1, rayCluster="walker")

    with cluster.logs("walker", follow="true") as response:
        assert response.status_code == 200, response.text
        lines = response.iter_lines(decode_unicode=True)
        while "first words" not in next(lines):  # Ray writes a line of its own first
            pass
        # While the driver runs, the snapshot has the same words.
        snapshot = cluster.logs("walker")
        assert snapshot.status_code == 200 and "first words" in snapshot.text
        assert "last words" not in snapshot.text
        release.touch()
        rest = list(lines)  # the stream ends when the Ray job does
    assert any("last words" in line for line in rest)

    whole = cluster.logs("walker").text
    assert whole.rstrip("\n").endswith("last words")
    assert cluster.logs("walker", tailLines="1").text == "last words\n"
    with cluster.logs("walker", follow="true", tailLines="1") as response:  # ended: at once
        assert response.text == "last words\n"
    # The reader may get jobs in NAMESPACE only: their logs too, nothing elsewhere.
    other = ApiClient(cluster.api.url, READER).request("GET", "/v1/namespaces/team-b/jobs/x/logs")
    assert other.status_code == 403


def test_a_job_without_a_driver_has_no_output_and_a_finished_one_ends_a_follow_at_once(cluster):
    cluster.create_job("queued")  # the operator has not seen it: no phase, no attempt
    assert cluster.logs("queued").text == ""

    cluster.create_job("done")
    cluster.set_status("done", phase="Succeeded", attempt=0)
    started = time.monotonic()
    with cluster.logs("done", follow="true") as response:
        assert (response.status_code, response.text) == (200, "")
    assert time.monotonic() - started < 30

    # A finished job whose head answers no more (here: refuses its token) has no output left.
    cluster.create_job("gone")
    cluster.set_status("gone", phase="Failed", attempt=1)
    response = cluster.logs("gone")
    assert response.status_code == 404 and "deletes when the job finishes" in response.text
    with cluster.logs("gone", follow="true") as response:
        assert (response.status_code, response.text) == (200, "")
    assert cluster.logs("nobody", follow="true").status_code == 404


def test_without_the_operators_key_the_api_says_what_it_needs(kube_api, tmp_path):
    kube_api.register_crd()
    allow_reader(kube_api)
    kube_api.create(kube_api.rljobs(NAMESPACE), rljob("walker", namespace=NAMESPACE))
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    args = ("--backend", "kubernetes", "--kubeconfig", str(kubeconfig))
    with ApiServer(tmp_path / "unused", *args, env={"KUBERL_RAY_AUTH_KEY": ""}) as api:
        reader = ApiClient(api.url, READER)
        for params in ({}, {"follow": "true"}):
            response = reader.request(
                "GET", reader.jobs(NAMESPACE, "walker", "logs"), params=params
            )
            assert response.status_code == 501
            assert "KUBERL_RAY_AUTH_KEY" in response.json()["message"]


def test_the_network_policy_lets_the_api_reach_the_jobs_api_and_nothing_else():
    policy = build_network_policy(job_with(), SETTINGS)
    api = api_pod_labels(SETTINGS)
    other_component = {**api, "app.kubernetes.io/component": "dashboards"}
    sources = {
        "api": (OPERATOR_NS, api),
        "api's labels, other namespace": (MONITORING_NS, api),
        "another component of the release": (OPERATOR_NS, other_component),
    }
    admitted = {
        who: {port for port, number in PORTS.items() if admits(policy, source, number, False)}
        for who, source in sources.items()
    }
    metrics = {"metrics"}  # by default Prometheus may scrape from any pod of any namespace
    assert admitted == {
        "api": {"dashboard"} | metrics,
        "api's labels, other namespace": metrics,
        "another component of the release": metrics,
    }
    # The API of the operator's own release: its labels but the component.
    assert api == {**SETTINGS.operator_pod_labels, "app.kubernetes.io/component": "api"}
