"""A job's rollout workers scaled through the API (GET and PUT .../scale) and `kuberl scale`, over
real HTTP: on the local backend, held to the job's bounds by its own validation and refused while
a trainer runs; on the kubernetes backend, written to the RLJob's scale subresource of the emulated
Kubernetes API, authorized on rljobs/scale as `kubectl scale` is."""

import os

import kmock
import pytest
from apiserver import TOKEN, ApiClient, small_job
from emulated_rbac import requests_to
from test_kubernetes_backend import cluster  # noqa: F401 (the emulated cluster's fixture)

from testkit import run_kuberl

pytestmark = pytest.mark.timeout(120)

WORKERS = "spec.rolloutWorkers.replicas"


def elastic_job(name: str) -> dict:
    """A small job whose fleet may be scaled between 2 and 6 rollout workers (3 wanted)."""
    job = small_job(name)
    job["spec"]["rolloutWorkers"] |= {"replicas": 3, "minReplicas": 2, "maxReplicas": 6}
    return job


def put_scale(client: ApiClient, namespace: str, name: str, workers: object):
    return client.request("PUT", client.jobs(namespace, name, "scale"), json={"workers": workers})


def fields(response) -> list[str]:
    return [cause["field"] for cause in response.json()["details"]["causes"]]


# --- the local backend ------------------------------------------------------------------------


def test_a_local_scale_within_the_bounds_is_stored_and_one_outside_them_refused(queue_client):
    assert queue_client.submit(elastic_job("elastic"), "scaling").status_code == 201
    before = queue_client.job("elastic", "scaling")
    scale = queue_client.request("GET", queue_client.jobs("scaling", "elastic", "scale"))
    assert scale.status_code == 200, scale.text
    assert scale.json() == {
        "workers": 3,
        "readyWorkers": 0,
        "minWorkers": 2,
        "maxWorkers": 6,
        "elastic": True,
    }

    scaled = put_scale(queue_client, "scaling", "elastic", 4)
    assert scaled.status_code == 200, scaled.text
    assert scaled.json() == queue_client.job("elastic", "scaling")
    stored = scaled.json()
    # Only the desired count changed, one generation on.
    assert stored["spec"]["rolloutWorkers"] == before["spec"]["rolloutWorkers"] | {"replicas": 4}
    assert {k: v for k, v in stored["spec"].items() if k != "rolloutWorkers"} == {
        k: v for k, v in before["spec"].items() if k != "rolloutWorkers"
    }
    assert stored["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert put_scale(queue_client, "scaling", "elastic", 4).json() == stored  # nothing changes

    for outside, bound in ((7, "maxReplicas"), (1, "minReplicas"), (0, "replicas is 0")):
        refused = put_scale(queue_client, "scaling", "elastic", outside)
        assert refused.status_code == 422, refused.text
        assert fields(refused) == [WORKERS] and bound in refused.json()["message"]
    assert queue_client.job("elastic", "scaling") == stored


def test_a_fixed_fleet_takes_a_new_count_for_its_next_start(queue_client):
    assert queue_client.submit(small_job("fixed"), "scaling").status_code == 201
    scale = queue_client.request("GET", queue_client.jobs("scaling", "fixed", "scale")).json()
    assert scale == {
        "workers": 0,
        "readyWorkers": 0,
        "minWorkers": 0,
        "maxWorkers": 0,
        "elastic": False,
    }
    scaled = put_scale(queue_client, "scaling", "fixed", 1)
    assert scaled.status_code == 200 and scaled.json()["spec"]["rolloutWorkers"]["replicas"] == 1


def test_bad_scale_requests_name_the_field(queue_client):
    assert queue_client.submit(elastic_job("bodies"), "scaling").status_code == 201
    path = queue_client.jobs("scaling", "bodies", "scale")

    def put(body: bytes, content_type: str | None = "application/json"):
        headers = {"Content-Type": content_type} if content_type else {}
        return queue_client.request("PUT", path, data=body, headers=headers)

    for content_type in ("text/plain", None):
        assert put(b'{"workers": 4}', content_type).status_code == 415
    for body in (b'{"workers": -1}', b'{"workers": "4"}', b'{"workers": true}', b"{}"):
        refused = put(body)
        assert refused.status_code == 422, body
        assert fields(refused) == ["workers"], body
    misnamed = put(b'{"replicas": 4}')
    assert misnamed.status_code == 422 and set(fields(misnamed)) == {"workers", "replicas"}
    assert put(b"[").status_code == 422
    assert put(b'{"workers": 4}' + b" " * 5000).status_code == 413
    assert queue_client.job("bodies", "scaling")["spec"]["rolloutWorkers"]["replicas"] == 3

    assert put(b"workers: 4\n", "application/yaml").status_code == 200
    assert queue_client.job("bodies", "scaling")["spec"]["rolloutWorkers"]["replicas"] == 4
    assert put_scale(queue_client, "scaling", "nobody", 3).status_code == 404
    missing = queue_client.request("GET", queue_client.jobs("scaling", "nobody", "scale"))
    assert missing.status_code == 404


def test_a_running_local_trainer_is_not_resized(client):
    """A running trainer cannot change its workers: 409 saying how (suspend, scale, resume)."""
    assert client.submit(small_job("busy", iterations=100_000)).status_code == 201
    client.wait_phase("busy", "Running", timeout=60)
    try:
        assert put_scale(client, "default", "busy", 0).status_code == 200  # no change
        refused = put_scale(client, "default", "busy", 1)
        assert refused.status_code == 409, refused.text
        assert refused.json()["reason"] == "Conflict"
        assert "suspend it" in refused.json()["message"]
        assert "kuberl resume busy" in refused.json()["message"]
        assert client.job("busy")["spec"]["rolloutWorkers"]["replicas"] == 0
    finally:
        client.request("DELETE", client.jobs(name="busy"), params={"purge": "true"})


def test_kuberl_scale_against_the_local_backend(queue_api, queue_client):
    assert queue_client.submit(elastic_job("walker")).status_code == 201
    assert queue_client.submit(small_job("single")).status_code == 201
    env = {**os.environ, "KUBERL_SERVER": queue_api.url, "KUBERL_API_TOKEN": TOKEN}

    out = run_kuberl("scale", "job", "walker", "--workers", "5", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "walker scaled to 5 workers (0 ready)\n"
    out = run_kuberl("scale", "rljob/single", "--replicas", "1", env=env)
    assert out.returncode == 0 and out.stdout == "single scaled to 1 worker (0 ready)\n"

    out = run_kuberl("scale", "job", "walker", "--workers", "9", env=env)
    assert out.returncode == 1
    assert out.stderr.startswith("kuberl: HTTP 422: Invalid\n  spec.rolloutWorkers.replicas: 9:")
    out = run_kuberl("scale", "pod", "walker", "--workers", "2", env=env)
    assert out.returncode == 1 and 'unknown resource type "pod"' in out.stderr
    assert queue_client.job("walker")["spec"]["rolloutWorkers"]["replicas"] == 5


# --- the kubernetes backend -------------------------------------------------------------------


def test_the_scale_subresource_is_written_for_callers_rbac_lets_scale(api, cluster):  # noqa: F811
    alice, bob = ApiClient(api.url, "alice-token"), ApiClient(api.url, "bob-token")
    carol = ApiClient(api.url, "carol-token")
    job = elastic_job("elastic")
    assert alice.submit(job, "team-a").status_code == 201
    job_path = cluster.rljobs("team-a", "elastic")
    cluster.patch(job_path + "/status", {"status": {"phase": "Running", "replicas": 2}})

    # view's `get` on rljobs/scale reads it; scaling takes `update` on it.
    scale = bob.request("GET", bob.jobs("team-a", "elastic", "scale"))
    assert scale.status_code == 200, scale.text
    assert scale.json() == {
        "workers": 3,
        "readyWorkers": 2,
        "minWorkers": 2,
        "maxWorkers": 6,
        "elastic": True,
    }
    refused = put_scale(bob, "team-a", "elastic", 3)
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        'bob cannot update rljobs/scale "elastic" in namespace "team-a": no RBAC rule allows it'
    )
    assert carol.request("GET", carol.jobs("team-a", "elastic", "scale")).status_code == 403

    writes = len(cluster.api.log)
    scaled = put_scale(alice, "team-a", "elastic", 4)
    assert scaled.status_code == 200, scaled.text
    assert requests_to(cluster, "PATCH", job_path + "/scale", since=writes) == 1
    stored = cluster.get(job_path)
    assert stored["spec"]["rolloutWorkers"] == job["spec"]["rolloutWorkers"] | {"replicas": 4}
    assert scaled.json()["spec"] == stored["spec"]

    reviews = [
        (r["user"], r["verb"], r.get("subresource")) for r in cluster.reviews if r.get("name")
    ]
    assert ("bob", "get", "scale") in reviews and ("alice", "update", "scale") in reviews
    assert put_scale(alice, "team-a", "nobody", 3).status_code == 404


def test_the_api_servers_refusal_of_a_scale_is_a_422_with_its_message(api, cluster):  # noqa: F811
    """The operator's webhook refuses a scale outside the bounds (the emulated API runs no
    webhook, so its answer is played here)."""
    alice = ApiClient(api.url, "alice-token")
    assert alice.submit(elastic_job("bounded"), "team-a").status_code == 201
    denial = (
        'admission webhook "validate-rljob-scale.kuberl.io" denied the request: '
        "spec.rolloutWorkers: maxReplicas: 6 is less than replicas (9)"
    )

    def deny(_request):
        raise kmock.KubernetesError(status=422, reason="Invalid", message=denial, details={})

    async def webhook_denies_scales() -> None:
        rljobs = kmock.resource("kuberl.io", "v1alpha1", "rljobs")
        cluster.api[kmock.action.UPDATE, rljobs, kmock.subresource("scale")] << deny

    cluster.call(webhook_denies_scales)

    refused = put_scale(alice, "team-a", "bounded", 9)
    assert refused.status_code == 422, refused.text
    assert refused.json()["message"] == f"Kubernetes refused the scale: {denial}"
    assert fields(refused) == [WORKERS]
    assert (
        cluster.get(cluster.rljobs("team-a", "bounded"))["spec"]["rolloutWorkers"]["replicas"] == 3
    )


def test_kuberl_scale_on_a_cluster(api, cluster):  # noqa: F811
    assert (
        ApiClient(api.url, "alice-token").submit(elastic_job("walker"), "team-a").status_code == 201
    )
    cluster.patch(cluster.rljobs("team-a", "walker") + "/status", {"status": {"replicas": 2}})

    def as_user(token: str, *args: str):
        env = {**os.environ, "KUBERL_SERVER": api.url, "KUBERL_API_TOKEN": token}
        return run_kuberl("scale", *args, "-n", "team-a", env=env)

    out = as_user("alice-token", "job", "walker", "--workers", "4")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "walker scaled to 4 workers (2 ready)\n"
    out = as_user("bob-token", "rljob/walker", "--workers", "5")
    assert out.returncode == 1
    assert 'HTTP 403: bob cannot update rljobs/scale "walker"' in out.stderr
    assert (
        cluster.get(cluster.rljobs("team-a", "walker"))["spec"]["rolloutWorkers"]["replicas"] == 4
    )
