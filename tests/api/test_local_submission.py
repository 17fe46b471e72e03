"""What the local backend checks when it takes a job, and what `kuberl serve` says when it starts,
over real HTTP against a real `kuberl serve`."""

import json
import os
from pathlib import Path

import pytest
from apiserver import TOKEN, ApiClient, serving, small_job

from testkit import edited, wait_until

# Where the check and the trainers find this directory's test envs (`recording_env:...`).
TEST_ENVS_PATH = os.pathsep.join(
    part for part in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if part
)


@pytest.fixture(scope="module")
def checking_api(tmp_path_factory):
    """A token-protected local backend that starts no trainer: what a submission leaves is the
    check's doing alone."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    env = {"KUBERL_API_TOKEN": TOKEN, "PYTHONPATH": TEST_ENVS_PATH}
    with serving(data_dir, "--max-running", "0", env=env) as server:
        yield server


@pytest.fixture
def checking_client(checking_api):
    return ApiClient(checking_api.url, TOKEN)


def test_an_env_typo_is_refused_at_submission_as_kuberl_validate_refuses_it(checking_client):
    queue_client = checking_client
    job = edited(small_job("typo"), **{"spec.trainer.env": "CartPol-v1"})
    refused = queue_client.submit(job, "checks")
    assert refused.status_code == 422, refused.text
    [cause] = refused.json()["details"]["causes"]
    assert cause["field"] == "spec.trainer.env"
    assert "is not a registered gymnasium id" in cause["message"]
    assert "did you mean 'CartPole-v1'?" in cause["message"]
    # Nothing was stored: the name is free.
    assert queue_client.request("GET", queue_client.jobs("checks", "typo")).status_code == 404

    missing = edited(small_job("missing"), **{"spec.trainer.env": "no_such_module_here:Env"})
    refused = queue_client.submit(missing, "checks")
    assert refused.status_code == 422, refused.text
    [cause] = refused.json()["details"]["causes"]
    assert cause["field"] == "spec.trainer.env" and "no_such_module_here" in cause["message"]

    assert queue_client.submit(small_job("fine"), "checks").status_code == 201


def test_the_check_makes_the_env_in_a_process_without_the_api_token(checking_client, tmp_path):
    """A `module:Class` env runs the job's code when it is made: the check makes it, as `kuberl
    validate` does, in a process of its own that gets the trainer's environment (no token)."""
    client = checking_client
    seen = tmp_path / "environment.json"
    job = edited(
        small_job("recorded"),
        **{
            "spec.trainer.env": "recording_env:EnvironmentRecorder",
            "spec.trainer.envConfig": {"path": str(seen)},
        },
    )
    assert client.submit(job, "checks").status_code == 201  # no trainer runs on this server
    environment = json.loads(wait_until(seen.exists, 10, "the env made") and seen.read_text())
    assert "KUBERL_API_TOKEN" not in environment
    assert environment["PYTHONPATH"] == TEST_ENVS_PATH  # the rest is the API's, as a trainer's


def test_serve_says_where_it_serves_as_news_not_as_a_warning(checking_api):
    banner = f"kuberl API (local backend) on {checking_api.url} (Ctrl+C stops it)"
    lines = checking_api.output().splitlines()
    assert banner in lines, lines


def test_one_spec_is_checked_once_however_many_submit_it_at_once(tmp_path, monkeypatch):
    """A burst of one spec (a sweep, a retry loop) waits for one check, not one process each;
    a `module:Class` env is checked every time, since its code may change."""
    import asyncio

    from kuberl_api import env_check

    started: list[str] = []

    async def counted_check(document, work_dir):
        started.append(document["spec"]["trainer"]["env"])
        await asyncio.sleep(0)  # under way while the later submissions arrive
        return []

    monkeypatch.setattr(env_check, "check", counted_check)
    monkeypatch.setattr(env_check, "_verdicts", {})
    registered = [small_job(f"burst-{i}") for i in range(20)]
    own_code = [
        edited(small_job(f"own-{i}"), **{"spec.trainer.env": "envs:Corridor"}) for i in range(3)
    ]

    async def submit_all():
        return await asyncio.gather(
            *(env_check.env_problems(job, tmp_path) for job in registered + own_code)
        )

    assert asyncio.run(submit_all()) == [[]] * 23
    assert started.count("CartPole-v1") == 1 and started.count("envs:Corridor") == 3
