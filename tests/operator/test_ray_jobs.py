"""The operator's Ray Jobs client against a real Ray head started on loopback, with token
authentication on, as KubeRay runs it."""

import asyncio
import time

import pytest
from rayhead import running_ray_head

from kuberl_operator.ray_jobs import RayJobsClient, RayJobsError
from testkit import free_port


@pytest.fixture(scope="module")
def ray_head():
    with running_ray_head() as head:
        yield head


def run(coroutine):
    return asyncio.run(coroutine)


async def wait_for(client: RayJobsClient, submission_id: str, wanted: set[str], timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        driver = await client.status(submission_id)
        if driver is not None and driver.status in wanted:
            return driver
        assert time.monotonic() < deadline, f"{submission_id} stayed {driver}"
        await asyncio.sleep(0.5)


def test_submission_happens_once_per_id_and_reports_the_outcome(ray_head):
    client = RayJobsClient(*ray_head)

    async def scenario():
        assert await client.status("job-1") is None
        assert await client.submit("job-1", "python -c 'print(42)'") is True
        assert await client.submit("job-1", "python -c 'print(42)'") is False  # idempotent
        done = await wait_for(client, "job-1", {"SUCCEEDED", "FAILED"})
        assert done.status == "SUCCEEDED", done
        await client.submit("job-2", "python -c 'import sys; sys.exit(3)'")
        failed = await wait_for(client, "job-2", {"SUCCEEDED", "FAILED"})
        assert failed.status == "FAILED" and "3" in failed.message

    run(scenario())


def test_stop_ends_a_running_driver(ray_head):
    client = RayJobsClient(*ray_head)

    async def scenario():
        await client.submit("sleeper", "sleep 120")
        await wait_for(client, "sleeper", {"RUNNING"})
        assert await client.stop("sleeper") is True
        assert (await wait_for(client, "sleeper", {"STOPPED", "FAILED"})).status == "STOPPED"
        assert await client.stop("no-such-job") is False

    run(scenario())


@pytest.mark.parametrize("token, code", [("wrong", "403"), (None, "401")])
def test_requests_without_the_right_token_are_refused(ray_head, token, code):
    client = RayJobsClient(ray_head[0], token)
    with pytest.raises(RayJobsError, match=f"HTTP {code}"):
        run(client.status("job-1"))


def test_an_unreachable_head_is_a_clear_error():
    client = RayJobsClient(f"http://127.0.0.1:{free_port()}", "token", timeout_s=2)
    with pytest.raises(RayJobsError, match="unreachable"):
        run(client.submit("job", "true"))
