"""The forms kubectl users type, against a real `kuberl serve` (local backend): `submit -f`,
`apply -f`, `--set` and `--seed` on submission, `--no-headers`, `TYPE/NAME` wherever a job is
named, `get policy JOB` and `evaluate JOB` through the API."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from apiserver import TOKEN, ApiClient, small_job

from testkit import run_kuberl

pytestmark = pytest.mark.timeout(180)


def as_user(server) -> dict[str, str]:
    return {**os.environ, "KUBERL_SERVER": server.url, "KUBERL_API_TOKEN": TOKEN}


@pytest.fixture
def queued(queue_api):
    """The CLI against a server whose jobs stay Pending (no trainer runs)."""
    return lambda *args: run_kuberl(*args, env=as_user(queue_api))


def manifest(tmp_path, job, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(job))
    return path


def test_submit_takes_the_file_as_kubectl_does_or_as_before(queued, queue_client, tmp_path):
    for name, args in (("by-f", ["-f"]), ("by-filename", ["--filename"]), ("by-place", [])):
        out = queued("submit", *args, manifest(tmp_path, small_job(name), f"{name}.yaml"))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"{name} submitted ("), out.stdout
        assert queue_client.phase(name) == "Pending"

    for args in ([], ["a.yaml", "-f", "b.yaml"]):
        usage = queued("submit", *args)
        assert usage.returncode == 2 and "name one manifest: kuberl submit -f FILE" in usage.stderr


def test_submit_changes_the_manifest_with_set_and_seed(queued, queue_client, tmp_path):
    path = manifest(tmp_path, small_job("changed", timesteps=4096))
    out = queued(
        "submit",
        "-f",
        path,
        "--set",
        "trainer.stop.iterations=3",
        "--set",
        "spec.trainer.stop.timesteps=null",
        "--set",
        "trainer.hyperparameters.schedule=null",  # a linear schedule needs stop.timesteps
        "--set",
        "metadata.labels.team=sweep",
        "--seed",
        "7",
    )
    assert out.returncode == 0, out.stderr
    job = queue_client.job("changed")
    assert job["spec"]["trainer"]["seed"] == 7
    assert job["spec"]["trainer"]["stop"]["iterations"] == 3
    assert job["spec"]["trainer"]["stop"].get("timesteps") is None
    assert job["metadata"]["labels"] == {"team": "sweep"}
    assert yaml.safe_load(path.read_text())["spec"]["trainer"]["stop"] == {"timesteps": 4096}

    bad = queued("submit", path, "--set", "trainer.seed")
    assert bad.returncode == 1
    assert "--set trainer.seed: expected PATH=VALUE" in bad.stderr


def test_apply_creates_then_says_unchanged_changes_what_it_can_and_names_the_rest(
    queued, queue_client, tmp_path
):
    job = small_job("applied")
    path = manifest(tmp_path, job)
    created = queued("apply", "-f", path)
    assert created.returncode == 0, created.stderr
    assert created.stdout == "applied created in namespace default\n"

    # The server's document holds every default; the manifest only some: still unchanged.
    unchanged = queued("apply", "-f", path)
    assert unchanged.returncode == 0 and unchanged.stdout == "applied unchanged\n"

    changed = queued(
        "apply",
        "-f",
        path,
        "--set",
        "trainer.hyperparameters.learning_rate=0.5",
        "--set",
        "metadata.labels.team=x",
    )
    assert changed.returncode == 1
    assert changed.stdout == ""
    assert "job applied exists, and the API cannot change these fields of it:" in changed.stderr
    assert "  spec.trainer.hyperparameters.learning_rate: 0.001 -> 0.5" in changed.stderr
    assert "  metadata.labels.team: None -> 'x'" in changed.stderr
    assert "delete the job and submit it again" in changed.stderr
    assert queue_client.job("applied")["spec"]["trainer"]["hyperparameters"]["learning_rate"] == (
        0.001
    )

    # What the API changes (scale, suspend), apply changes, either way.
    job["spec"]["rolloutWorkers"]["replicas"] = 1
    job["spec"]["suspend"] = True
    scaled = queued("apply", "-f", manifest(tmp_path, job, "scaled.yaml"))
    assert scaled.returncode == 0, scaled.stderr
    assert scaled.stdout.splitlines() == [
        "applied scaled to 1 worker (0 ready)",
        "applied suspended (Suspended)",
    ]
    document = queue_client.job("applied")
    assert document["spec"]["rolloutWorkers"]["replicas"] == 1 and document["spec"]["suspend"]
    assert queued("apply", "-f", tmp_path / "scaled.yaml").stdout == "applied unchanged\n"
    back = queued("apply", "-f", path)
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines() == [
        "applied scaled to 0 workers (0 ready)",
        "applied resumed (Resuming)",
    ]


def test_tables_without_their_header_row(queued, queue_client):
    for name in ("plain-b", "plain-a"):
        assert queue_client.submit(small_job(name, team="plain")).status_code == 201
    for command in (["get", "jobs"], ["jobs"]):
        out = queued(*command, "-l", "team=plain", "--no-headers")
        assert out.returncode == 0, out.stderr
        assert [line.split()[:2] for line in out.stdout.splitlines()] == [
            ["plain-a", "Pending"],
            ["plain-b", "Pending"],
        ]
    assert queued("get", "job", "plain-a", "-o", "wide", "--no-headers").stdout.split()[0] == (
        "plain-a"
    )
    bad = queued("get", "jobs", "-o", "table.txt")
    assert bad.returncode == 2
    assert "'table.txt' is not one of json, yaml, wide, name" in " ".join(bad.stderr.split())
    nothing = queued("get", "jobs", "-l", "team=nobody", "--no-headers")
    assert nothing.returncode == 0 and nothing.stdout == ""
    assert nothing.stderr == "no jobs in namespace default\n"


def test_every_command_that_names_a_job_takes_type_slash_name(queued, queue_client):
    assert queue_client.submit(small_job("typed")).status_code == 201
    for command in (
        ["logs", "job/typed"],
        ["logs", "rljob/typed"],
        ["logs", "typed"],
        ["status", "rlj/typed"],
        ["get", "job/typed"],
        ["describe", "typed"],
        ["scale", "rljob/typed", "--workers", "1"],
        ["suspend", "job/typed"],
        ["resume", "rljobs.kuberl.io/typed"],
    ):
        out = queued(*command)
        assert out.returncode == 0, (command, out.stderr)
    missing = queued("logs", "job/absent")
    assert missing.returncode == 1 and 'job "absent" not found' in missing.stderr

    for command in ("logs", "status", "suspend", "resume", "delete", "describe", "get"):
        pod = queued(command, "pod/typed")
        assert pod.returncode == 1, command
        assert f'{command}: unknown resource type "pod": kuberl serves jobs (also job, ' in (
            pod.stderr
        ), pod.stderr
    assert queued("delete", "job/typed").stdout.startswith("typed deleted")


def in_dir(directory, *args, env):
    """The CLI run from `directory`, where `get policy` writes by default."""
    command = [sys.executable, "-m", "kuberl_cli.main", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=directory, env=env)


def test_a_jobs_policy_downloads_and_evaluates_through_the_api(local_api, queue_api, tmp_path):
    client, user = ApiClient(local_api.url, TOKEN), as_user(local_api)
    job = small_job("exported", iterations=2)
    job["spec"]["trainer"]["checkpoint"]["exportPolicy"] = True
    assert client.submit(job).status_code == 201
    client.wait_phase("exported", "Succeeded", "Failed")
    served = client.request("GET", client.jobs(name="exported", action="policy")).content

    out = in_dir(tmp_path, "get", "policy", "job/exported", env=user)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "exported.onnx").read_bytes() == served
    assert out.stdout.startswith("exported.onnx: the exported policy of job exported (")

    (tmp_path / "exported.onnx").write_bytes(b"mine")
    kept = in_dir(tmp_path, "get", "policy", "exported", env=user)
    assert kept.returncode == 1 and "pass --overwrite to replace it" in kept.stderr
    assert (tmp_path / "exported.onnx").read_bytes() == b"mine"
    replaced = in_dir(tmp_path, "get", "policy", "exported", "--overwrite", env=user)
    assert replaced.returncode == 0 and (tmp_path / "exported.onnx").read_bytes() == served
    named = in_dir(tmp_path, "get", "policy", "exported", "-o", "sub.onnx", env=user)
    assert named.returncode == 0 and (tmp_path / "sub.onnx").read_bytes() == served

    assert ApiClient(queue_api.url, TOKEN).submit(small_job("untrained")).status_code == 201
    none_yet = in_dir(tmp_path, "get", "policy", "untrained", env=as_user(queue_api))
    assert none_yet.returncode == 1 and len(none_yet.stderr.splitlines()) == 1
    assert 'job "untrained" in namespace "default" has no exported policy' in none_yet.stderr
    assert not (tmp_path / "untrained.onnx").exists()

    # No local path is named `exported` here: the API's job is.
    played = in_dir(tmp_path, "evaluate", "job/exported", "--episodes", "2", "-o", "json", env=user)
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout)["episodes"] == 2
    assert "evaluating the exported policy of job exported" in played.stderr
    text = in_dir(tmp_path, "evaluate", "exported", "--episodes", "1", env=user)
    assert text.returncode == 0, text.stderr
    assert "evaluating the exported policy of job exported" in text.stdout.splitlines()[0]

    neither = in_dir(tmp_path, "evaluate", "nobody", env=user)
    assert neither.returncode == 2 and len(neither.stderr.splitlines()) == 1
    assert "nobody: no such file or directory, nor a job of the kuberl API at" in neither.stderr
    assert 'job "nobody" not found' in neither.stderr
