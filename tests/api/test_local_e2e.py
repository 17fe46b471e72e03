"""The local backend end to end: `kuberl serve` on loopback, real trainer processes, real HTTP."""

import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import onnxruntime
import psutil
import pytest
from apiserver import TOKEN, small_job

from kuberl_operator.constants import KEPT_FILES_ANNOTATION
from kuberl_operator.spec import RLJob
from testkit import wait_until

pytestmark = pytest.mark.timeout(180)


def test_submit_trains_to_success_with_progress_history(client, local_api):
    response = client.submit(small_job("cartpole", timesteps=1024))
    assert response.status_code == 201, response.text
    stored = RLJob.model_validate(response.json())
    assert stored.metadata.namespace == "default"
    assert stored.status.phase in ("Pending", "Running")

    job = client.wait_phase("cartpole", "Succeeded", "Failed")
    assert job["status"]["phase"] == "Succeeded", client.request(
        "GET", client.jobs(name="cartpole", action="logs")
    ).text
    status = RLJob.model_validate(job).status  # the status has the operator's shape
    assert status.progress.timesteps >= 1024
    assert status.start_time <= status.completion_time
    assert status.progress.last_checkpoint
    conditions = {c.type: c.status for c in status.conditions}
    assert conditions["Complete"] == "True" and conditions["Failed"] == "False"

    history = client.request("GET", client.jobs(name="cartpole", action="progress")).json()
    assert [row["iteration"] for row in history["items"]] == list(
        range(1, status.progress.iteration + 1)
    )
    timesteps = [row["timesteps"] for row in history["items"]]
    # 4 envs x 32 steps an iteration, less the steps that only reset an env after an episode
    assert all(100 < b - a <= 128 for a, b in itertools.pairwise([0, *timesteps])), timesteps
    assert timesteps[-2] < 1024 <= timesteps[-1] == status.progress.timesteps
    assert history["items"][-1]["episodeReturnMean"] > 0
    assert "progress.jsonl" in history["source"]

    logs = client.request(
        "GET", client.jobs(name="cartpole", action="logs"), params={"tailLines": 3}
    )
    assert logs.status_code == 200 and "progress.jsonl" in logs.text
    assert len(logs.text.splitlines()) == 3

    metrics = client.request("GET", "/metrics").text
    assert (
        'kuberl_api_job_timesteps{algorithm="PPO",namespace="default",phase="Succeeded",'
        f'rljob="cartpole"}} {float(status.progress.timesteps)}'
    ) in metrics
    assert 'kuberl_jobs{namespace="default",phase="Succeeded"}' in metrics
    assert (
        'kuberl_api_requests_total{code="201",method="POST",route="/v1/namespaces/{namespace}/jobs"}'
        in metrics
    )
    assert "kuberl_api_request_duration_seconds_bucket" in metrics


def test_a_trainer_runs_without_the_api_token(client, tmp_path):
    record = tmp_path / "environment.json"
    job = small_job("environment", iterations=1)
    job["spec"]["trainer"] |= {
        "env": "recording_env:EnvironmentRecorder",
        "envConfig": {"path": str(record)},
    }
    assert client.submit(job).status_code == 201
    done = client.wait_phase("environment", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", client.request(
        "GET", client.jobs(name="environment", action="logs")
    ).text
    environment = json.loads(record.read_text())
    assert "KUBERL_API_TOKEN" not in environment and TOKEN not in environment.values()
    assert environment["PATH"] == os.environ["PATH"]  # the rest of the user's environment stays


def test_suspend_checkpoints_and_resume_continues_the_iteration_count(client):
    name = "suspended"
    assert client.submit(small_job(name, iterations=120)).status_code == 201
    wait_until(
        lambda: client.job(name)["status"]["progress"]["iteration"] >= 3, 60, "a few iterations"
    )

    response = client.request("POST", client.jobs(name=name, action="suspend"))
    assert response.status_code == 200 and response.json()["spec"]["suspend"] is True
    suspended = client.wait_phase(name, "Suspended", "Succeeded", "Failed", timeout=60)
    assert suspended["status"]["phase"] == "Suspended", suspended["status"]
    stopped_at = suspended["status"]["progress"]["iteration"]
    assert 3 <= stopped_at < 120
    assert suspended["status"]["progress"]["lastCheckpoint"].endswith(f"{stopped_at:08d}")
    time.sleep(1)  # nothing runs while suspended
    assert client.job(name)["status"]["progress"]["iteration"] == stopped_at

    response = client.request("POST", client.jobs(name=name, action="resume"))
    assert response.status_code == 200 and response.json()["spec"]["suspend"] is False
    done = client.wait_phase(name, "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    history = client.request("GET", client.jobs(name=name, action="progress")).json()["items"]
    assert [row["iteration"] for row in history] == list(range(1, 121))  # no restart from 0
    log = client.request("GET", client.jobs(name=name, action="logs")).text
    assert "Resuming from" in log and f"(iteration {stopped_at}," in log
    # The suspended trainer's summary says how this job resumes (not how a `kuberl train` does).
    assert f"run `kuberl resume {name}` to resume from the checkpoint" in log
    assert "run the same command again" not in log


def test_delete_stops_the_trainer_and_removes_the_job(client, local_api):
    name = "deleted"
    assert client.submit(small_job(name, iterations=100_000)).status_code == 201
    wait_until(lambda: client.phase(name) == "Running", 60, "the job to run")
    wait_until(local_api.trainer_pids, 10, "the trainer process")
    pids = [
        pid
        for pid in local_api.trainer_pids()
        if any(name in part for part in psutil.Process(pid).cmdline())
    ]
    assert len(pids) == 1
    group = [pids[0], *(c.pid for c in psutil.Process(pids[0]).children(recursive=True))]

    response = client.request("DELETE", client.jobs(name=name), params={"purge": "true"})
    assert response.status_code == 200 and response.json()["metadata"]["name"] == name
    assert KEPT_FILES_ANNOTATION not in (response.json()["metadata"].get("annotations") or {})
    assert client.request("GET", client.jobs(name=name)).status_code == 404
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in group), 10, "the trainer to end")
    assert not (local_api.data_dir / "jobs" / "default" / name).exists()
    assert client.request("DELETE", client.jobs(name=name)).status_code == 404


def test_delete_keeps_the_trained_model_and_a_new_job_of_the_name_starts_afresh(client, local_api):
    name = "kept"
    assert client.submit(small_job(name, iterations=2)).status_code == 201
    client.wait_phase(name, "Succeeded", "Failed")

    response = client.request("DELETE", client.jobs(name=name))

    assert response.status_code == 200
    kept = Path(response.json()["metadata"]["annotations"][KEPT_FILES_ANNOTATION])
    assert kept.parent == local_api.data_dir / "kept" / "default"
    assert sorted(p.name for p in (kept / "run" / "checkpoints").iterdir())  # the model is there
    assert not (local_api.data_dir / "jobs" / "default" / name).exists()
    # The same name again trains from scratch: nothing of the deleted job is resumed.
    assert client.submit(small_job(name, iterations=1)).status_code == 201
    client.wait_phase(name, "Succeeded", "Failed")
    log = client.request("GET", client.jobs(name=name, action="logs")).text
    assert "Resuming from" not in log


def test_deleting_a_job_with_remote_workers_leaves_no_ray_behind(client, local_api):
    name = "with-ray"
    job = small_job(name, iterations=100_000)
    job["spec"]["rolloutWorkers"] = {"replicas": 1, "envsPerWorker": 4, "cpusPerWorker": 0.5}
    assert client.submit(job).status_code == 201
    wait_until(
        lambda: (client.job(name)["status"].get("progress") or {}).get("iteration", 0) >= 1,
        120,
        "the job to train on its private Ray",
    )
    [leader] = [
        pid
        for pid in local_api.trainer_pids()
        if any(name in part for part in psutil.Process(pid).cmdline())
    ]
    tree = [psutil.Process(leader), *psutil.Process(leader).children(recursive=True)]
    names = " ".join(" ".join(p.cmdline()) for p in tree if alive(p))
    assert "raylet" in names and "gcs_server" in names, names  # Ray's daemons, in its tree

    assert client.request("DELETE", client.jobs(name=name)).status_code == 200
    wait_until(lambda: not [p for p in tree if alive(p)], 20, "every Ray process gone")


def alive(process: psutil.Process) -> bool:
    """Still running (psutil compares start times too: a reused PID is no survivor), and not a
    zombie waiting to be reaped."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_list_filters_by_phase_and_labels_and_pages(queue_client):
    for index in range(5):
        team = "rl" if index % 2 == 0 else "vision"
        job = small_job(f"listed-{index}", team=team, tier=f"t{index}")
        assert queue_client.submit(job, namespace="listing").status_code == 201
    suspended = small_job("listed-suspended", team="rl")
    suspended["spec"]["suspend"] = True
    assert queue_client.submit(suspended, namespace="listing").status_code == 201

    def names(**params):
        response = queue_client.request("GET", queue_client.jobs("listing"), params=params)
        assert response.status_code == 200, response.text
        return [item["metadata"]["name"] for item in response.json()["items"]]

    assert names() == [*(f"listed-{i}" for i in range(5)), "listed-suspended"]
    assert names(phase="Suspended") == ["listed-suspended"]
    assert names(phase="Pending", labelSelector="team=rl") == ["listed-0", "listed-2", "listed-4"]
    assert names(labelSelector="team!=rl") == ["listed-1", "listed-3"]
    assert names(labelSelector="tier in (t1,t4),team") == ["listed-1", "listed-4"]
    assert names(labelSelector="!tier") == ["listed-suspended"]

    seen, token = [], None
    while True:
        params = {"limit": 4, **({"continue": token} if token else {})}
        page = queue_client.request("GET", queue_client.jobs("listing"), params=params).json()
        assert len(page["items"]) <= 4
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert seen == names()
    assert names(labelSelector="team=rl", limit=0) == names(labelSelector="team=rl")

    bad = queue_client.request("GET", queue_client.jobs("listing"), params={"continue": "nope"})
    assert bad.status_code == 400 and bad.json()["details"]["causes"][0]["field"] == "continue"
    bad = queue_client.request(
        "GET", queue_client.jobs("listing"), params={"labelSelector": "team in rl"}
    )
    assert bad.status_code == 400 and "labelSelector" in bad.json()["message"]


def test_health_readiness_and_openapi(queue_client, queue_api):
    assert queue_client.request("GET", "/healthz").text == "ok"
    assert queue_client.request("GET", "/readyz").text == "ok"
    spec = queue_client.request("GET", "/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/v1/jobs",
        "/v1/namespaces/{namespace}/jobs",
        "/v1/namespaces/{namespace}/jobs/{name}",
        "/v1/namespaces/{namespace}/jobs/{name}/progress",
        "/v1/namespaces/{namespace}/jobs/{name}/suspend",
        "/v1/namespaces/{namespace}/jobs/{name}/resume",
        "/v1/namespaces/{namespace}/jobs/{name}/logs",
    ):
        assert path in paths
    assert (
        "progress.jsonl"
        in paths["/v1/namespaces/{namespace}/jobs/{name}/progress"]["get"]["description"]
    )
    assert queue_client.request("GET", "/docs").status_code == 200
    assert os.path.isdir(queue_api.data_dir)


def test_a_finished_job_serves_its_exported_policy(client, local_api):
    exported, plain = "exports", "exports-not"
    job = small_job(exported, iterations=2)
    job["spec"]["trainer"]["checkpoint"]["exportPolicy"] = True
    assert client.submit(job).status_code == 201
    assert client.submit(small_job(plain, iterations=1)).status_code == 201
    client.wait_phase(exported, "Succeeded", "Failed")
    client.wait_phase(plain, "Succeeded", "Failed")

    progress = client.job(exported)["status"]["progress"]
    assert progress["exportedPolicy"].endswith("/run/checkpoints/policy.onnx")
    response = client.request("GET", client.jobs(name=exported, action="policy"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == f'attachment; filename="{exported}.onnx"'
    session = onnxruntime.InferenceSession(response.content)
    actions = session.run(["actions"], {"obs": np.zeros((3, 4), dtype=np.float32)})[0]
    assert actions.shape == (3,) and set(actions) <= {0, 1}

    missing = client.request("GET", client.jobs(name=plain, action="policy"))
    assert missing.status_code == 404
    assert "has no exported policy" in missing.json()["message"]
