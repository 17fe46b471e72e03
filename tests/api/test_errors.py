"""Refusals over real HTTP: each error says what is wrong, names the field, and changes nothing."""

import json

import pytest
import yaml
from apiserver import ApiClient, small_job

pytestmark = pytest.mark.timeout(120)


def causes(response) -> dict[str, str]:
    body = response.json()
    assert body["kind"] == "Status" and body["code"] == response.status_code
    return {cause["field"]: cause["message"] for cause in body["details"]["causes"]}


def test_a_token_is_required(queue_api):
    anonymous = ApiClient(queue_api.url)
    response = anonymous.request("GET", anonymous.jobs())
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "missing bearer token" in response.json()["message"]
    wrong = ApiClient(queue_api.url, "not-the-token")
    response = wrong.submit(small_job("sneaky"))
    assert response.status_code == 401 and response.json()["reason"] == "Unauthorized"
    assert ApiClient(queue_api.url).request("GET", "/healthz").status_code == 200  # probes open


def test_unknown_jobs_are_404(queue_client):
    for method, action in (("GET", ""), ("GET", "progress"), ("GET", "logs"), ("DELETE", "")):
        response = queue_client.request(method, queue_client.jobs(name="missing", action=action))
        assert response.status_code == 404, (method, action)
        assert response.json()["message"] == 'job "missing" not found in namespace "default"'
    response = queue_client.request("POST", queue_client.jobs(name="missing", action="suspend"))
    assert response.status_code == 404


def test_a_taken_name_is_409_and_the_first_job_is_kept(queue_client):
    first = small_job("taken", timesteps=1024)
    assert queue_client.submit(first).status_code == 201
    response = queue_client.submit(small_job("taken", timesteps=4096))
    assert response.status_code == 409 and response.json()["reason"] == "AlreadyExists"
    assert queue_client.job("taken")["spec"]["trainer"]["stop"]["timesteps"] == 1024


def test_invalid_jobs_are_422_naming_every_field(queue_client):
    job = small_job("broken")
    job["spec"]["trainer"]["hyperparameters"]["lerning_rate"] = 0.1
    job["spec"]["rolloutWorkers"]["replicas"] = -1
    response = queue_client.submit(job)
    assert response.status_code == 422
    found = causes(response)
    assert "did you mean 'learning_rate'" in found["spec.trainer.hyperparameters.lerning_rate"]
    assert "must be >= 0" in found["spec.rolloutWorkers.replicas"]
    assert "spec.trainer.hyperparameters.lerning_rate" in response.json()["message"]
    assert queue_client.request("GET", queue_client.jobs(name="broken")).status_code == 404


def test_incompatible_optimizers_and_misplaced_settings_are_422_naming_the_field(queue_client):
    pairing = small_job("pairing")
    pairing["spec"]["trainer"] |= {"algorithm": "IMPALA", "optimizer": "AsyncGradients"}
    del pairing["spec"]["trainer"]["hyperparameters"]  # PPO's
    setting = small_job("setting")
    setting["spec"]["trainer"]["optimizerConfig"] = {"learnerQueueSize": 4}
    resources = small_job("resources")
    resources["spec"]["rolloutWorkers"] |= {"replicas": 2, "rayResources": {"spot": -1}}

    for job, field, message in (
        (pairing, "spec.trainer.optimizer", "AsyncGradients cannot drive IMPALA"),
        (
            setting,
            "spec.trainer.optimizerConfig.learnerQueueSize",
            "used by AsyncReplay, AsyncSamples only, and this job runs SyncSamples",
        ),
        (resources, "spec.rolloutWorkers.rayResources.spot", "must be >= 0.0001, got -1"),
    ):
        response = queue_client.submit(job)
        assert response.status_code == 422, job["metadata"]["name"]
        assert message in causes(response)[field]
        name = job["metadata"]["name"]
        assert queue_client.request("GET", queue_client.jobs(name=name)).status_code == 404


def test_the_asynchronous_algorithms_are_accepted(queue_client):
    for algorithm in ("A3C", "APEX", "IMPALA", "APPO"):
        job = small_job(f"async-{algorithm.lower()}")
        job["spec"]["trainer"]["algorithm"] = algorithm
        del job["spec"]["trainer"]["hyperparameters"]
        job["spec"]["rolloutWorkers"]["replicas"] = 2  # Ape-X's replay shards need them
        response = queue_client.submit(job)
        assert response.status_code == 201, response.text
        assert response.json()["spec"]["trainer"]["algorithm"] == algorithm


def test_bodies_that_are_not_manifests(queue_client):
    url = queue_client.jobs()
    yaml_type = {"Content-Type": "application/yaml"}
    response = queue_client.request("POST", url, data="a: [unclosed", headers=yaml_type)
    assert response.status_code == 422
    assert "not valid YAML" in causes(response)[""]

    json_type = {"Content-Type": "application/json"}
    response = queue_client.request("POST", url, data='{"kind": "RLJob",', headers=json_type)
    assert response.status_code == 422 and "not valid JSON" in causes(response)[""]

    response = queue_client.request("POST", url, data="- just\n- a list\n", headers=yaml_type)
    assert response.status_code == 422 and "not a mapping" in causes(response)[""]

    response = queue_client.request("POST", url, data=b"\xff\xfe", headers=yaml_type)
    assert response.status_code == 422 and "UTF-8" in causes(response)[""]

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    response = queue_client.request("POST", url, data=json.dumps(pod), headers=json_type)
    assert response.status_code == 422 and "this is a Pod" in causes(response)["kind"]

    response = queue_client.request("POST", url, data="x", headers={"Content-Type": "text/csv"})
    assert response.status_code == 415


def test_yaml_bodies_and_namespaces(queue_client):
    text = yaml.safe_dump(small_job("from-yaml"))
    response = queue_client.request(
        "POST", queue_client.jobs("team-a"), data=text, headers={"Content-Type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["metadata"]["namespace"] == "team-a"

    elsewhere = small_job("elsewhere")
    elsewhere["metadata"]["namespace"] = "team-b"
    response = queue_client.submit(elsewhere, namespace="team-a")
    assert response.status_code == 422
    assert "differs from the namespace in the URL" in causes(response)["metadata.namespace"]

    response = queue_client.request("GET", "/v1/namespaces/Not_A_Namespace/jobs")
    assert response.status_code == 400 and "namespace" in causes(response)


def test_server_set_fields_are_not_taken_from_the_body(queue_client):
    job = small_job("clean")
    job["metadata"] |= {"uid": "forged", "resourceVersion": "7"}
    job["status"] = {"phase": "Succeeded"}
    stored = queue_client.submit(job).json()
    assert stored["metadata"]["uid"] != "forged" and "resourceVersion" not in stored["metadata"]
    assert stored["status"]["phase"] == "Pending"
