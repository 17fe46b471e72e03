"""A cluster job's driver output, from where Ray keeps it: the Jobs API of a real Ray head on
loopback (token authentication on, as KubeRay runs it). The operator's log relay (run as the
operator runs it, over its Reconciler's clients, against the emulated Kubernetes API) serves a
driver's status and output to its token's holder only, with the job's Ray token derived from the
operator's key or read back from the job's Secret; the API's kubernetes backend (a real `kuberl
serve`) serves the output of an RLJob's driver, snapshot and follow, through the relay and
without any Ray token; and each job's NetworkPolicy admits the API's pods nowhere on the head
but where any pod may go."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shlex
import sys
import threading
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
from test_network_policy import OPERATOR_NS, PORTS, admits

from kuberl_operator import log_relay
from kuberl_operator.builders import build_network_policy, ray_auth_token
from kuberl_operator.kube import Kube, load_kube_config
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.ray_jobs import RayJobsClient
from kuberl_operator.reconciler import Reconciler
from kuberl_operator.settings import OperatorSettings
from testkit import rljob

# The API's test helpers (a real `kuberl serve`), from their folder.
API_TESTS = Path(__file__).resolve().parents[1] / "api"
if str(API_TESTS) not in sys.path:
    sys.path.append(str(API_TESTS))
from apiserver import ApiClient, ApiServer  # noqa: E402

pytestmark = pytest.mark.timeout(240)

NAMESPACE = "team-a"
KEY = "operator-key-" + "0" * 32  # the operator's ray_auth_key, which the API never sees
RELAY_TOKEN = "relay-token-" + "1" * 32  # what the API presents to the operator's log relay
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


@contextlib.contextmanager
def running_relay(settings: OperatorSettings, kubeconfig: Path) -> Iterator[str]:
    """The operator's log relay as the operator serves it (handlers.start: over its Reconciler's
    Jobs API clients), on an event loop of its own in a thread; yields its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="log-relay", daemon=True)
    thread.start()

    async def start():
        reconciler = Reconciler(Kube(load_kube_config(kubeconfig)), settings, OperatorMetrics())
        runner = await log_relay.serve(
            0, RELAY_TOKEN, reconciler.observer.jobs_client, host="127.0.0.1"
        )
        return reconciler, runner

    async def stop():
        await runner.cleanup()
        await reconciler.close()

    reconciler, runner = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


class Cluster:
    """The emulated Kubernetes API with one RLJob whose attempts run on a real Ray head (with
    that job's token), the operator's log relay, and the API in front of them."""

    def __init__(
        self, kube: KubeAPIClient, head_url: str, token: str, relay_url: str, api: ApiServer
    ) -> None:
        self.kube, self.head_url, self.token, self.api = kube, head_url, token, api
        self.relay_url = relay_url
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
        token = ray_auth_token(OperatorSettings(ray_auth_key=KEY), *walker(job))
        kubeconfig = kube.kubeconfig(tmp / "kubeconfig")
        with running_ray_head(token=token) as (head_url, _):
            settings = OperatorSettings(ray_auth_key=KEY, ray_dashboard_url=head_url)
            with running_relay(settings, kubeconfig) as relay_url:
                # The API's whole say on jobs' logs: where the relay is and its token.
                env = {"KUBERL_LOG_RELAY_URL": relay_url, "KUBERL_LOG_RELAY_TOKEN": RELAY_TOKEN}
                args = ("--backend", "kubernetes", "--kubeconfig", str(kubeconfig))
                with ApiServer(tmp / "unused", *args, env=env) as api:
                    yield Cluster(kube, head_url, token, relay_url, api)


def walker(job: dict) -> tuple[str, str, str]:
    return NAMESPACE, "walker", job["metadata"]["uid"]


def submit(cluster: Cluster, submission_id: str, entrypoint: str) -> None:
    async def scenario():
        async with aiohttp.ClientSession() as session:
            client = RayJobsClient(cluster.head_url, cluster.token, session)
            assert await client.submit(submission_id, entrypoint)

    asyncio.run(scenario())


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


def test_without_the_relay_the_api_says_what_it_needs(kube_api, tmp_path):
    kube_api.register_crd()
    allow_reader(kube_api)
    kube_api.create(kube_api.rljobs(NAMESPACE), rljob("walker", namespace=NAMESPACE))
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    args = ("--backend", "kubernetes", "--kubeconfig", str(kubeconfig))
    with ApiServer(tmp_path / "unused", *args, env={"KUBERL_LOG_RELAY_URL": ""}) as api:
        reader = ApiClient(api.url, READER)
        for params in ({}, {"follow": "true"}):
            response = reader.request(
                "GET", reader.jobs(NAMESPACE, "walker", "logs"), params=params
            )
            assert response.status_code == 501
            assert "KUBERL_LOG_RELAY_URL" in response.json()["message"]


def test_the_network_policy_admits_the_api_nowhere_any_pod_may_not_go():
    """The API reads drivers' output through the operator's relay: it reaches no head's Jobs
    API, where the job's token would let anyone do anything."""
    policy = build_network_policy(job_with(), SETTINGS)
    # The API's pods: the operator's selector labels with the chart's component "api".
    api = {**SETTINGS.operator_pod_labels, "app.kubernetes.io/component": "api"}
    sources = {
        "api": (OPERATOR_NS, api),
        "operator": (OPERATOR_NS, dict(SETTINGS.operator_pod_labels)),
    }
    admitted = {
        who: {port for port, number in PORTS.items() if admits(policy, source, number, False)}
        for who, source in sources.items()
    }
    metrics = {"metrics"}  # by default Prometheus may scrape from any pod of any namespace
    assert admitted == {"api": metrics, "operator": {"dashboard"} | metrics}


def relay_get(cluster: Cluster, path: str, token: str | None = RELAY_TOKEN, **params):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(cluster.relay_url + path, params=params, headers=headers, timeout=30)


def read_relayed(cluster: Cluster, attempt: int, uid: str, after: int = 0, **params) -> dict:
    path = f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/{attempt}"
    response = relay_get(cluster, path, uid=uid, after=str(after), **params)
    assert response.status_code == 200, response.text
    return response.json()


def ended_driver(cluster: Cluster, attempt: int, uid: str) -> dict:
    """The attempt's driver read through the relay as a follower reads it (each read waiting at
    the relay for news) until it has exited: the last answer, with the whole log as its text."""
    deadline, text, after = time.monotonic() + 120, "", 0
    while True:
        output = read_relayed(cluster, attempt, uid, after=after, wait="10")
        text, after = text + output["text"], output["length"]
        if output["ended"]:
            return {**output, "text": text}
        assert time.monotonic() < deadline, output


def test_the_relay_serves_a_drivers_output_to_its_token_holder_and_nothing_else(cluster):
    uid = cluster.kube.get(cluster.kube.rljobs(NAMESPACE, "walker"))["metadata"]["uid"]
    submit(cluster, "walker-7", f"{sys.executable} -c \"print('relayed', 'words')\"")
    output = ended_driver(cluster, 7, uid)
    assert output["found"] and "relayed words" in output["text"]
    assert output["length"] == len(output["text"])
    rest = read_relayed(cluster, 7, uid, after=output["length"])
    assert (rest["text"], rest["length"], rest["ended"]) == ("", output["length"], True)
    last = read_relayed(cluster, 7, uid, tailLines="1")  # the last line, from the same reader
    assert (last["text"], last["length"]) == ("relayed words\n", output["length"])
    assert read_relayed(cluster, 8, uid) == {
        "found": False,
        "ended": False,
        "start": 0,
        "text": "",
        "length": 0,
    }
    # The log as it stands, streamed; its last lines cut by the head.
    log = f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7/log"
    assert relay_get(cluster, log, uid=uid).text == output["text"]
    assert relay_get(cluster, log, uid=uid, tailLines="1").text == "relayed words\n"
    assert relay_get(cluster, log, uid=uid, tailLines="0").text == ""
    assert relay_get(cluster, log.replace("/7/", "/8/"), uid=uid).text == ""

    driver = f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7"
    for token in (None, "relay-token-" + "2" * 32, KEY):
        for path in (driver, log):
            refused = relay_get(cluster, path, token=token, uid=uid)
            assert refused.status_code == 401 and "relayed" not in refused.text
    for path, params in [
        (f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7", {}),  # no uid
        (f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/0", {"uid": uid}),
        (f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7", {"uid": uid, "after": "-1"}),
        (f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7", {"uid": uid, "wait": "11"}),
        (f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7", {"uid": uid, "tailLines": "x"}),
        (
            f"/v1/namespaces/{NAMESPACE}/rljobs/walker/drivers/7/log",
            {"uid": uid, "tailLines": "-1"},
        ),
        ("/v1/namespaces/Team_A/rljobs/walker/drivers/7", {"uid": uid}),
        ("/v1/namespaces/team-a/rljobs/evil.com%23/drivers/7", {"uid": uid}),
    ]:
        assert relay_get(cluster, path, **params).status_code == 400, path
    # Nothing else of the head: no other path, no other method.
    assert relay_get(cluster, "/api/jobs/walker-7/logs").status_code == 404
    stop = requests.post(
        cluster.relay_url + driver,
        params={"uid": uid},
        headers={"Authorization": f"Bearer {RELAY_TOKEN}"},
        timeout=30,
    )
    assert stop.status_code == 405
    # A job whose head refuses the token the relay has for it: the head's answer, as a 503.
    stranger = relay_get(
        cluster, f"/v1/namespaces/{NAMESPACE}/rljobs/stranger/drivers/1", uid="123"
    )
    assert stranger.status_code == 503 and "HTTP" in stranger.json()["message"]


def test_without_a_key_the_relay_reads_the_jobs_token_from_its_secret(cluster, tmp_path):
    """An operator without ray_auth_key (a local run) gives each job a random token in the job's
    <job>-ray-auth Secret (owned by the job) and reads it back: so does its relay."""
    uid = cluster.kube.get(cluster.kube.rljobs(NAMESPACE, "walker"))["metadata"]["uid"]
    owner = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "name": "walker", "uid": uid}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "walker-ray-auth",
            "namespace": NAMESPACE,
            "ownerReferences": [owner | {"controller": True}],
        },
        "data": {"auth_token": base64.b64encode(cluster.token.encode()).decode()},
    }
    cluster.kube.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    submit(cluster, "walker-9", f"{sys.executable} -c \"print('secret', 'words')\"")
    settings = OperatorSettings(ray_dashboard_url=cluster.head_url)  # no key
    with running_relay(settings, cluster.kube.kubeconfig(tmp_path / "kubeconfig")) as url:
        keyless = Cluster(cluster.kube, cluster.head_url, cluster.token, url, cluster.api)
        assert "secret words" in ended_driver(keyless, 9, uid)["text"]


def test_the_relay_refuses_to_start_without_a_token():
    async def start():
        await log_relay.serve(0, None, lambda *_: None)

    with pytest.raises(ValueError, match="KUBERL_LOG_RELAY_TOKEN"):
        asyncio.run(start())
