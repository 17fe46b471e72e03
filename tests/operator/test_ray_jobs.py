"""The operator's Ray Jobs client against a real Ray head started on loopback, with token
authentication on, as KubeRay runs it (submitting, stopping, and reading a driver's log in
pieces); and its reading of the driver's metrics."""

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import test_utils, web
from rayhead import running_ray_head

from kuberl_contract.final_record import FinalRecord, Outcome
from kuberl_operator.job_observer import ended_drivers_record
from kuberl_operator.ray_jobs import RayHeads, RayJobsClient, RayJobsError
from testkit import free_port


@pytest.fixture(scope="module")
def ray_head():
    with running_ray_head() as head:
        yield head


def run(scenario: Callable[[aiohttp.ClientSession], Awaitable], **session_options):
    """Runs `scenario(session)` with one HTTP session for all its clients, as the operator does."""

    async def main():
        async with aiohttp.ClientSession(**session_options) as session:
            return await scenario(session)

    return asyncio.run(main())


async def wait_for(client: RayJobsClient, submission_id: str, wanted: set[str], timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        driver = await client.status(submission_id)
        if driver is not None and driver.status in wanted:
            return driver
        assert time.monotonic() < deadline, f"{submission_id} stayed {driver}"
        await asyncio.sleep(0.5)


def test_submission_happens_once_per_id_and_reports_the_outcome(ray_head):
    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        assert await client.status("job-1") is None
        assert await client.submit("job-1", "python -c 'print(42)'") is True
        assert await client.submit("job-1", "python -c 'print(42)'") is False  # idempotent
        done = await wait_for(client, "job-1", {"SUCCEEDED", "FAILED"})
        assert (done.status, done.exit_code) == ("SUCCEEDED", 0)
        log = b"".join([piece async for piece in client.log_file("job-1", done.node_id)])
        assert "42" in log.decode()
        await client.submit("job-2", "python -c 'import sys; sys.exit(65)'")
        failed = await wait_for(client, "job-2", {"SUCCEEDED", "FAILED"})
        assert failed.status == "FAILED" and "65" in failed.message
        assert failed.exit_code == 65  # what tells an invalid job from a failed one

    run(scenario)


def test_the_driver_gets_the_environment_it_is_submitted_with(ray_head):
    """The operator tells each attempt's driver its number this way (KUBERL_ATTEMPT)."""
    code = "import os; print('attempt', os.environ['KUBERL_ATTEMPT'])"

    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        await client.submit("env-1", f"python -c {shlex.quote(code)}", env={"KUBERL_ATTEMPT": "3"})
        done = await wait_for(client, "env-1", {"SUCCEEDED", "FAILED"})
        log = b"".join([piece async for piece in client.log_file("env-1", done.node_id)])
        assert done.status == "SUCCEEDED" and log.decode().endswith("attempt 3\n"), log

    run(scenario)


def test_a_drivers_log_is_read_in_pieces_followed_to_its_end_or_cut_at_the_head(ray_head):
    """`tail` streams the log from its start to the driver's end; `log_file` sends it as it
    stands, or only its last lines, cut on the driver's node."""
    code = "import time\nfor i in range(30): print(f'line {i}')\ntime.sleep(2)\nprint('last words')"

    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        await client.submit("talker", f"python -c {shlex.quote(code)}")
        followed = "".join([piece async for piece in client.tail("talker")])  # ends with it
        assert followed.endswith("line 29\nlast words\n")
        status = await wait_for(client, "talker", {"SUCCEEDED"})
        assert status.node_id  # where its log file is
        whole = b"".join([piece async for piece in client.log_file("talker", status.node_id)])
        last = [piece async for piece in client.log_file("talker", status.node_id, 2)]
        assert whole.decode() == followed
        assert b"".join(last) == b"line 29\nlast words\n"

        with pytest.raises(RayJobsError, match="HTTP 404"):
            [piece async for piece in client.tail("no-such-job")]
        refused = RayJobsClient(ray_head[0], "wrong", session)
        with pytest.raises(RayJobsError, match="HTTP 403"):
            [piece async for piece in refused.tail("talker")]
        with pytest.raises(RayJobsError, match="HTTP 403"):
            [piece async for piece in refused.log_file("talker", status.node_id)]

    run(scenario)


def test_an_ended_drivers_final_record_is_read_from_its_logs_end_alone(ray_head):
    """However much a driver printed (16 MiB here), the operator reads its final record from the
    log's last lines, cut on the driver's node, never the whole log."""
    record = FinalRecord(Outcome.STOPPED, 0, "stopped at iterations>=3", time.time(), 3)
    code = f"for _ in range(200_000): print('x' * 83)\nprint({record.line()!r})"

    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        await client.submit("chatty", f"python -c {shlex.quote(code)}")
        await wait_for(client, "chatty", {"SUCCEEDED"})
        read = []
        log_file = client.log_file

        async def counted(*args):
            async for piece in log_file(*args):
                read.append(len(piece))
                yield piece

        client.log_file = counted
        found = await ended_drivers_record(client, "chatty")
        assert found is not None and found.message == record.message
        assert 0 < sum(read) <= 64 * 1024  # the last lines, not 16 MiB
        assert await ended_drivers_record(client, "no-such-job") is None

    run(scenario)


def test_stop_ends_a_running_driver(ray_head):
    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        await client.submit("sleeper", "sleep 120")
        await wait_for(client, "sleeper", {"RUNNING"})
        assert await client.stop("sleeper") is True
        assert (await wait_for(client, "sleeper", {"STOPPED", "FAILED"})).status == "STOPPED"
        assert await client.stop("no-such-job") is False

    run(scenario)


def test_statuses_lists_every_submission_in_one_request(ray_head):
    """How the operator finds an earlier attempt's driver still running before it submits the
    next one to the same cluster."""

    async def scenario(session):
        client = RayJobsClient(*ray_head, session)
        await client.submit("listed-1", "python -c 'pass'")
        await client.submit("listed-2", "sleep 120")
        await wait_for(client, "listed-1", {"SUCCEEDED", "FAILED"})
        await wait_for(client, "listed-2", {"RUNNING"})
        found = await client.statuses()
        assert (found["listed-1"].status, found["listed-1"].ended) == ("SUCCEEDED", True)
        assert (found["listed-2"].status, found["listed-2"].ended) == ("RUNNING", False)
        assert found["listed-1"] == await client.status("listed-1")
        await client.stop("listed-2")

    run(scenario)


def test_every_client_shares_the_operators_session_and_its_connections(ray_head):
    """One session per operator: requests of any number of clients (one per job) reuse its pooled
    connections instead of opening a session, and a connection, per request."""
    opened = []
    tracing = aiohttp.TraceConfig()

    async def on_connection(session, context, params):
        opened.append(params)

    tracing.on_connection_create_end.append(on_connection)

    async def scenario(session):
        clients = [RayJobsClient(*ray_head, session) for _ in range(3)]
        for _ in range(4):
            for client in clients:
                assert await client.status("never-submitted") is None
        assert all(client.session is session for client in clients)
        return session

    session = run(scenario, trace_configs=[tracing])
    assert len(opened) == 1, f"12 requests opened {len(opened)} connections"
    assert session.closed  # its owner closed it; the clients hold none of their own


@pytest.mark.parametrize("token, code", [("wrong", "403"), (None, "401")])
def test_requests_without_the_right_token_are_refused(ray_head, token, code):
    async def scenario(session):
        await RayJobsClient(ray_head[0], token, session).status("job-1")

    with pytest.raises(RayJobsError, match=f"HTTP {code}"):
        run(scenario)


def test_an_unreachable_head_is_a_clear_error():
    async def scenario(session):
        client = RayJobsClient(f"http://127.0.0.1:{free_port()}", "token", session, timeout_s=2)
        await client.submit("job", "true")

    with pytest.raises(RayJobsError, match="unreachable"):
        run(scenario)


def test_the_reconciler_opens_one_session_and_closes_it_at_cleanup():
    from kuberl_operator.kube import Kube, KubeConfig
    from kuberl_operator.metrics import OperatorMetrics
    from kuberl_operator.reconciler import Reconciler
    from kuberl_operator.settings import OperatorSettings

    async def scenario():
        reconciler = Reconciler(
            Kube(KubeConfig(f"http://127.0.0.1:{free_port()}")),
            OperatorSettings(),
            OperatorMetrics(),
        )
        session = reconciler.observer.heads.session
        assert reconciler.observer.heads.session is session  # every head, every job, every request
        assert reconciler.observer.heads.jobs("http://head:8265", "token").session is session
        await reconciler.close()
        return session

    assert asyncio.run(scenario()).closed


def test_the_drivers_metrics_as_it_serves_them_none_before_and_an_error_when_unreachable():
    exposition = "# TYPE kuberl_iteration gauge\nkuberl_iteration 3.0\n"  # observe reads it

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=exposition, content_type="text/plain")

    async def scenario():
        app = web.Application()
        app.router.add_get("/metrics", serve)
        heads = RayHeads(metrics_timeout_s=2)
        async with test_utils.TestServer(app) as driver:
            served = await heads.driver_metrics(str(driver.make_url("/metrics")))
            not_yet = await heads.driver_metrics(str(driver.make_url("/not-served")))
        with pytest.raises(RayJobsError, match="unreachable"):
            await heads.driver_metrics(f"http://127.0.0.1:{free_port()}/metrics")
        await heads.close()
        return served, not_yet

    assert asyncio.run(scenario()) == (exposition, "")
