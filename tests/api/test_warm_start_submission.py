"""spec.trainer.warmStart through the API, over real HTTP against a real `kuberl serve`: a relative
checkpoint path is refused at submission (the server would read it in its own working directory),
and warmStart.job starts a job from another job's newest checkpoint (the local backend), or is
refused where that job has none that outlives its pods (the kubernetes backend)."""

import pytest
from apiserver import TOKEN, ApiClient, serving, small_job
from emulated_rbac import answer_reviews

from kuberl_operator.builders.warm_start import WARM_START_CHECKPOINT_FIELD, WARM_START_JOB_FIELD
from testkit import edited


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "2", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        yield ApiClient(server.url, TOKEN)


def warm_started(name: str, **warm_start: str) -> dict:
    return edited(small_job(name, iterations=1), **{"spec.trainer.warmStart": warm_start})


def refusal(client: ApiClient, job: dict) -> dict:
    """The one cause of the 422 the submission of `job` gets; nothing stored."""
    refused = client.submit(job)
    assert refused.status_code == 422, refused.text
    [cause] = refused.json()["details"]["causes"]
    name = job["metadata"]["name"]
    assert client.request("GET", client.jobs("default", name)).status_code == 404
    return cause


def test_a_relative_warm_start_path_is_refused_naming_the_field_and_the_ways_out(client):
    cause = refusal(client, warm_started("relative", checkpoint="runs/cartpole"))

    assert cause["field"] == WARM_START_CHECKPOINT_FIELD
    assert "'runs/cartpole' is a relative path" in cause["message"]
    for way_out in ("absolute path the server can read", "a URI", "warmStart.job"):
        assert way_out in cause["message"]


def test_a_warm_start_from_a_job_that_does_not_exist_is_refused(client):
    cause = refusal(client, warm_started("orphan", job="nobody"))

    assert cause["field"] == WARM_START_JOB_FIELD
    assert cause["message"] == (
        "there is no job 'nobody' in this namespace: name an existing job, or set "
        "warmStart.checkpoint"
    )


def test_a_warm_start_from_a_job_without_a_checkpoint_is_refused(client):
    waiting = edited(small_job("waiting"), **{"spec.suspend": True})  # never runs
    assert client.submit(waiting).status_code == 201

    cause = refusal(client, warm_started("eager", job="waiting"))

    assert cause["field"] == WARM_START_JOB_FIELD
    assert "job 'waiting' has saved no checkpoint yet" in cause["message"]


def test_both_a_checkpoint_and_a_job_is_refused(client):
    cause = refusal(client, warm_started("both", job="a", checkpoint="/runs/a"))

    assert cause["field"] == "spec.trainer.warmStart"
    assert "set one of checkpoint" in cause["message"]


def test_a_job_starts_from_another_jobs_newest_checkpoint(client):
    assert client.submit(small_job("teacher", iterations=1)).status_code == 201
    client.wait_phase("teacher", "Succeeded")

    assert client.submit(warm_started("student", job="teacher")).status_code == 201
    student = client.wait_phase("student", "Succeeded", "Failed")

    logs = client.request("GET", client.jobs("default", "student", "logs")).text
    assert student["status"]["phase"] == "Succeeded", logs[-2000:]
    assert "Warm start from " in logs and "/teacher/run/checkpoints/" in logs, logs[-2000:]
    # The job is stored as submitted: the name, not the location it resolved to.
    assert student["spec"]["trainer"]["warmStart"] == {"job": "teacher"}


# --- The kubernetes backend ----------------------------------------------------------------------


@pytest.fixture
def cluster(kube_api):
    """The emulated Kubernetes API with the RLJob CRD and review endpoints (emulated_rbac)."""
    kube_api.register_crd()
    kube_api.reviews = answer_reviews(kube_api)
    return kube_api


def test_a_cluster_job_starts_only_from_a_job_whose_checkpoints_outlive_its_pods(api, cluster):
    alice = ApiClient(api.url, "alice-token")
    student = warm_started("student", job="teacher")

    missing = alice.submit(student, "team-a")
    assert missing.status_code == 422, missing.text
    assert "there is no job 'teacher'" in missing.json()["details"]["causes"][0]["message"]

    in_pod = edited(small_job("teacher"), **{"spec.storage": None})  # an emptyDir
    assert alice.submit(in_pod, "team-a").status_code == 201
    checkpoint = {"progress": {"lastCheckpoint": "/kuberl/runs/teacher/checkpoints/5"}}
    cluster.patch(cluster.rljobs("team-a", "teacher") + "/status", {"status": checkpoint})
    ephemeral = alice.submit(student, "team-a").json()["details"]["causes"][0]
    assert ephemeral["field"] == WARM_START_JOB_FIELD
    assert "cannot start another: the checkpoints" in ephemeral["message"]

    kept = edited(small_job("keeper"), **{"spec.storage": {"size": "1Gi"}})
    assert alice.submit(kept, "team-a").status_code == 201
    cluster.patch(cluster.rljobs("team-a", "keeper") + "/status", {"status": checkpoint})
    accepted = alice.submit(warm_started("student", job="keeper"), "team-a")
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["spec"]["trainer"]["warmStart"] == {"job": "keeper"}
