"""The kubernetes backend over real HTTP against the emulated Kubernetes API: TokenReview says who
calls, SubjectAccessReview what RBAC allows them, and RLJobs are custom objects there."""

import contextlib

import pytest
import requests
import yaml
from apiserver import ApiClient, ApiServer, small_job
from emulated_rbac import answer_reviews
from kubeapi import write_kubeconfig

from testkit import free_port, run_kuberl, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(kube_api):
    """The emulated Kubernetes API with the RLJob CRD and review endpoints (emulated_rbac);
    `reviews` records every SubjectAccessReview's resourceAttributes."""
    kube_api.register_crd()
    kube_api.reviews = answer_reviews(kube_api)
    return kube_api


def test_authentication_and_authorization_follow_kubernetes(api, cluster):
    anonymous, stranger = ApiClient(api.url), ApiClient(api.url, "stolen-token")
    alice, bob = ApiClient(api.url, "alice-token"), ApiClient(api.url, "bob-token")
    job = small_job("shared")

    assert anonymous.submit(job, "team-a").status_code == 401
    response = stranger.submit(job, "team-a")
    assert response.status_code == 401 and "invalid bearer token" in response.json()["message"]

    response = bob.submit(job, "team-a")
    assert response.status_code == 403
    assert response.json()["message"] == (
        'bob cannot create rljobs in namespace "team-a": no RBAC rule allows it'
    )
    assert cluster.list(cluster.rljobs("team-a")) == []  # nothing created

    response = alice.submit(job, "team-a")
    assert response.status_code == 201, response.text
    stored = cluster.get(cluster.rljobs("team-a", "shared"))
    assert stored["spec"]["trainer"]["stop"] == job["spec"]["trainer"]["stop"]
    assert "status" not in stored  # the operator writes status, never the API
    assert alice.submit(job, "team-a").status_code == 409

    assert bob.job("shared", "team-a")["metadata"]["name"] == "shared"
    listed = bob.request("GET", bob.jobs("team-a")).json()["items"]
    assert [item["metadata"]["name"] for item in listed] == ["shared"]
    assert bob.request("GET", bob.jobs("team-b")).status_code == 403
    assert bob.request("POST", bob.jobs("team-a", "shared", "suspend")).status_code == 403
    assert bob.request("DELETE", bob.jobs("team-a", "shared")).status_code == 403

    response = alice.request("POST", alice.jobs("team-a", "shared", "suspend"))
    assert response.status_code == 200 and response.json()["spec"]["suspend"] is True
    assert cluster.get(cluster.rljobs("team-a", "shared"))["spec"]["suspend"] is True
    response = alice.request("POST", alice.jobs("team-a", "shared", "resume"))
    assert response.status_code == 200
    assert cluster.get(cluster.rljobs("team-a", "shared"))["spec"]["suspend"] is False

    verbs = [(r["user"], r["verb"], r["namespace"], r.get("name")) for r in cluster.reviews]
    assert ("bob", "create", "team-a", None) in verbs
    assert ("bob", "get", "team-a", "shared") in verbs
    assert ("bob", "list", "team-b", None) in verbs
    assert ("alice", "patch", "team-a", "shared") in verbs
    assert ("bob", "delete", "team-a", "shared") in verbs

    purge = alice.request("DELETE", alice.jobs("team-a", "shared"), params={"purge": "true"})
    assert purge.status_code == 400 and "keeps no files of a job" in purge.json()["message"]
    assert alice.request("DELETE", alice.jobs("team-a", "shared")).status_code == 200
    assert cluster.list(cluster.rljobs("team-a")) == []
    assert alice.request("GET", alice.jobs("team-a", "shared")).status_code == 404


def test_status_progress_and_filters_come_from_the_rljob(api, cluster):
    alice = ApiClient(api.url, "alice-token")
    for name, team in (("first", "rl"), ("second", "vision")):
        assert alice.submit(small_job(name, team=team), "team-a").status_code == 201
    assert alice.request("GET", alice.jobs("team-a", "first", "progress")).json()["items"] == []

    # The operator's write of the status subresource.
    progress = {"iteration": 7, "timesteps": 896, "episodeReturnMean": 31.5}
    cluster.patch(
        cluster.rljobs("team-a", "first") + "/status",
        {"status": {"phase": "Running", "progress": progress}},
    )
    history = alice.request("GET", alice.jobs("team-a", "first", "progress")).json()
    assert [(r["iteration"], r["timesteps"], r["episodeReturnMean"]) for r in history["items"]] == [
        (7, 896, 31.5)
    ]
    assert ".status.progress" in history["source"]

    def names(**params):
        response = alice.request("GET", alice.jobs("team-a"), params=params)
        return [item["metadata"]["name"] for item in response.json()["items"]]

    assert names(phase="Running") == ["first"]
    assert names(labelSelector="team=vision") == ["second"]

    response = alice.request("GET", alice.jobs("team-a", "first", "logs"))
    assert response.status_code == 501 and "kubectl logs" in response.json()["message"]
    # No history to draw: the plot points to Grafana (and an unknown job is still a 404).
    response = alice.request("GET", alice.jobs("team-a", "first", "plot"))
    assert response.status_code == 501 and "Grafana" in response.json()["message"]
    assert alice.request("GET", alice.jobs("team-a", "nobody", "plot")).status_code == 404
    page = alice.request("GET", "/?namespace=team-a").text
    assert '<tr id="job-first">' in page and "<img" not in page and "Grafana" in page

    broken = small_job("broken")
    broken["spec"]["trainer"]["algorithm"] = "PPOO"
    response = alice.submit(broken, "team-a")
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "spec.trainer.algorithm"

    metrics = alice.request("GET", "/metrics").text
    assert "kuberl_jobs" not in metrics  # the operator counts the jobs of a cluster
    assert (
        'kuberl_api_job_episode_return_mean{algorithm="PPO",namespace="team-a",phase="Running",'
        'rljob="first"} 31.5'
    ) in metrics


def test_every_namespace_is_listed_only_for_a_cluster_wide_grant(api, cluster):
    """GET /v1/jobs is `list` at the cluster scope: a review without a namespace, which a caller
    allowed in some namespaces only is refused (403, never a partial list); for one allowed
    everywhere, one cluster-scoped list of rljobs, filtered as a namespace's list is."""
    for namespace, name, team in (("team-a", "ours", "rl"), ("team-b", "theirs", "vision")):
        job = small_job(name, team=team, listing="everywhere")
        job["metadata"]["namespace"] = namespace
        cluster.create(cluster.rljobs(namespace), job)
    cluster.patch(cluster.rljobs("team-b", "theirs") + "/status", {"status": {"phase": "Running"}})
    dave = ApiClient(api.url, "dave-token")

    def listed(client: ApiClient, **params) -> list[tuple[str, str]]:
        response = client.request("GET", "/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        assert response.json()["kind"] == "RLJobList"
        items = response.json()["items"]
        return sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in items)

    everything = cluster.list("/apis/kuberl.io/v1alpha1/rljobs")
    assert listed(dave) == sorted(
        (j["metadata"]["namespace"], j["metadata"]["name"]) for j in everything
    )
    assert listed(dave, labelSelector="listing") == [("team-a", "ours"), ("team-b", "theirs")]
    assert listed(dave, labelSelector="listing,team=vision") == [("team-b", "theirs")]
    assert listed(dave, labelSelector="listing", phase="Running") == [("team-b", "theirs")]
    review = next(r for r in cluster.reviews if r["user"] == "dave")
    assert review["verb"] == "list" and "namespace" not in review  # every namespace
    # One cluster-scoped list, the selector passed on to Kubernetes.
    lists = [r.query for r in cluster.api.log if r.path == "/apis/kuberl.io/v1alpha1/rljobs"]
    assert {"labelSelector": "listing,team=vision"} in lists

    for user in ("alice", "carol"):  # each may list one namespace, so not every namespace
        response = ApiClient(api.url, f"{user}-token").request("GET", "/v1/jobs")
        assert response.status_code == 403, response.text
        assert response.json()["message"] == (
            f"{user} cannot list rljobs at the cluster scope (in every namespace): "
            "no RBAC rule allows it"
        )
    alice = ApiClient(api.url, "alice-token")
    assert alice.request("GET", alice.jobs("team-a")).status_code == 200  # what she is owed
    assert ApiClient(api.url).request("GET", "/v1/jobs").status_code == 401
    watched = dave.request("GET", "/v1/jobs", params={"watch": "true"})
    assert watched.status_code == 400 and "watch" in watched.json()["message"]


def test_metrics_show_each_caller_only_the_namespaces_it_may_list(api, cluster):
    alice = ApiClient(api.url, "alice-token")
    assert alice.submit(small_job("ours"), "team-a").status_code == 201
    theirs = small_job("theirs")
    theirs["metadata"]["namespace"] = "team-b"
    cluster.create(cluster.rljobs("team-b"), theirs)  # alice may not see it

    def jobs_shown(token: str | None) -> set[str]:
        text = ApiClient(api.url, token).request("GET", "/metrics").text
        assert "kuberl_api_requests_total{" in text  # request series, for anyone
        return {
            line.split('rljob="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("kuberl_api_job_timesteps{")
        }

    assert jobs_shown("alice-token") == {"ours"}
    assert jobs_shown("carol-token") == {"theirs"}  # asked again for each caller
    assert jobs_shown("alice-token") == {"ours"}
    assert jobs_shown("stolen-token") == set()
    assert jobs_shown(None) == set()
    lists = [(r["user"], r.get("namespace")) for r in cluster.reviews if r["verb"] == "list"]
    assert {("alice", "team-a"), ("alice", "team-b"), ("carol", "team-b")} <= set(lists)


def test_not_ready_without_the_crd(kube_api, tmp_path):
    server = ApiServer(
        tmp_path / "unused", "--backend", "kubernetes", "--kube-server", kube_api.url
    )
    server.process = None
    with pytest.raises(AssertionError, match="timed out"):
        server.start(ready_timeout=3)
    try:
        # Not ready is not down: once it listens (a loaded machine may take a while), it says why.
        def readyz() -> tuple[int, str] | None:
            with contextlib.suppress(requests.ConnectionError):
                response = ApiClient(server.url).request("GET", "/readyz")
                return response.status_code, response.text
            return None

        status, text = wait_until(readyz, 30, "the API to listen")
        assert status == 503 and "CRD" in text
    finally:
        server.stop()


def test_a_kubeconfig_the_api_cannot_use_stops_it_with_the_reason(tmp_path):
    kubeconfig = write_kubeconfig("https://kube.example", tmp_path / "kubeconfig")
    document = yaml.safe_load(kubeconfig.read_text())
    document["users"][0]["user"] = {"exec": {"command": "gke-gcloud-auth-plugin"}}
    kubeconfig.write_text(yaml.safe_dump(document))
    out = run_kuberl(
        "serve", "--backend", "kubernetes", "--kubeconfig", kubeconfig, "--port", free_port()
    )
    assert out.returncode == 1
    assert f"kuberl serve: {kubeconfig}: user 'tester' authenticates with an exec plugin" in (
        out.stderr
    )
