"""`kuberl submit / jobs / status / logs / suspend / resume / delete` against a real server."""

import os
import re
import time

import pytest
import yaml
from apiserver import TOKEN, ApiClient, small_job
from prometheus_client.parser import text_string_to_metric_families

from kuberl_api.metrics import JOB_LABELS, METRIC_JOB_EVALUATION_RETURN
from testkit import free_port, run_kuberl

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kuberl(local_api):
    """The CLI with the server and token from the environment, as a user would set them."""
    env = {**os.environ, "KUBERL_SERVER": local_api.url, "KUBERL_API_TOKEN": TOKEN}
    return lambda *args: run_kuberl(*args, env=env)


def test_submit_follow_and_delete(kuberl, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(small_job("from-cli", timesteps=1024, team="rl")))

    out = kuberl("submit", manifest)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("from-cli submitted (")

    again = kuberl("submit", manifest)
    assert again.returncode == 1
    assert 'HTTP 409: job "from-cli" already exists in namespace "default"' in again.stderr

    deadline = time.monotonic() + 90
    while "Succeeded" not in (status := kuberl("status", "from-cli")).stdout:
        assert status.returncode == 0, status.stderr
        assert "Failed" not in status.stdout
        assert time.monotonic() < deadline, status.stdout
        time.sleep(1)
    # 4 envs x 32 steps an iteration, less the steps that only reset an env: 8 or 9 iterations
    iteration = re.search(r"^  iteration +(\d+)$", status.stdout, re.MULTILINE).group(1)
    timesteps = re.search(r"^  timesteps +([\d,]+)$", status.stdout, re.MULTILINE).group(1)
    assert int(iteration) in (8, 9) and int(timesteps.replace(",", "")) >= 1024, status.stdout
    assert "Complete" in status.stdout and "checkpoint" in status.stdout

    listed = kuberl("jobs", "-l", "team=rl")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("from-cli"))
    assert row.split()[:6] == ["from-cli", "Succeeded", "PPO", "CartPole-v1", iteration, timesteps]
    assert "no jobs in namespace elsewhere" in kuberl("jobs", "-n", "elsewhere").stdout

    logs = kuberl("logs", "from-cli", "--tail", "2")
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 2

    # Finished: it stays Succeeded. The guarded API takes the CLI's bodyless changes.
    suspended = kuberl("suspend", "from-cli")
    assert suspended.returncode == 0
    assert (
        suspended.stdout == "from-cli already finished (Succeeded): there is nothing to suspend\n"
    )
    resumed = kuberl("resume", "from-cli")
    assert resumed.returncode == 0
    assert resumed.stdout == "from-cli already finished (Succeeded): there is nothing to resume\n"
    deleted = kuberl("delete", "from-cli")
    assert deleted.returncode == 0
    assert deleted.stdout.startswith("from-cli deleted; its run directory (checkpoints, progress)")
    gone = kuberl("status", "from-cli")
    assert gone.returncode == 1
    assert 'HTTP 404: job "from-cli" not found in namespace "default"' in gone.stderr


def test_errors_are_clear(kuberl, tmp_path, local_api):
    broken = small_job("broken-cli")
    broken["spec"]["trainer"]["env"] = 7
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(yaml.safe_dump(broken))
    out = kuberl("submit", manifest)
    assert out.returncode == 1
    assert "HTTP 422: Invalid" in out.stderr
    assert "spec.trainer.env: must be a string" in out.stderr

    missing = kuberl("submit", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr

    wrong_token = kuberl("jobs", "--token", "wrong")
    assert wrong_token.returncode == 1 and "HTTP 401: invalid bearer token" in wrong_token.stderr

    unreachable = kuberl("jobs", "--server", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 3
    assert "cannot reach the kuberl API" in unreachable.stderr
    assert "Connection refused" in unreachable.stderr


def test_every_view_shows_the_evaluation_return_beside_the_training_return(
    kuberl, local_api, tmp_path
):
    """A job that evaluates greedily: its evaluation return in the job's status, the CLI's
    status and list, the page and the API's metrics, over real HTTP."""
    job = small_job("evaluated", iterations=3, team="eval")
    job["spec"]["trainer"]["evaluation"] = {"everyIterations": 1, "episodes": 3}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    assert kuberl("submit", manifest).returncode == 0

    deadline = time.monotonic() + 90
    while "Succeeded" not in (status := kuberl("status", "evaluated")).stdout:
        assert "Failed" not in status.stdout and time.monotonic() < deadline, status.stdout
        time.sleep(1)

    client = ApiClient(local_api.url, TOKEN)
    progress = client.request("GET", client.jobs(name="evaluated")).json()["status"]["progress"]
    history = client.request("GET", client.jobs(name="evaluated", action="progress")).json()
    evaluation = history["items"][-1]["evaluationReturnMean"]
    assert evaluation is not None and progress["evaluationReturnMean"] == evaluation
    shown = f"{evaluation:.1f}"
    assert re.search(rf"^  evaluation return +{re.escape(shown)}$", status.stdout, re.MULTILINE)

    listed = kuberl("jobs", "-l", "team=eval").stdout.splitlines()
    assert listed[0].split()[6:8] == ["RETURN", "EVAL"]
    assert next(line for line in listed if line.startswith("evaluated")).split()[7] == shown

    page = client.request("GET", "/", params={"namespace": "default"}).text
    assert "<th>Evaluation</th>" in page
    metrics = client.request("GET", "/metrics").text
    labels = dict(zip(JOB_LABELS, ("default", "evaluated", "PPO", "Succeeded"), strict=True))
    samples = [
        sample
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == METRIC_JOB_EVALUATION_RETURN
    ]
    assert [sample.value for sample in samples if sample.labels == labels] == [evaluation]
