"""`kuberl submit / jobs / status / logs / suspend / resume / delete` against a real server."""

import os
import re
import time

import pytest
import yaml
from apiserver import TOKEN, small_job

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
    assert kuberl("suspend", "from-cli").returncode == 0
    resumed = kuberl("resume", "from-cli")
    assert resumed.returncode == 0 and "from-cli resumed (Succeeded)" in resumed.stdout
    assert kuberl("delete", "from-cli").returncode == 0
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
