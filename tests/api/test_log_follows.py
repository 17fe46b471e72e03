"""How many log follows may be open at once (log_follows), over real HTTP on the local backend: a
job is followed at most KUBERL_LOG_FOLLOWS_PER_JOB times and a caller follows at most
KUBERL_LOG_FOLLOWS_PER_CALLER logs; more are refused with 429 and a Retry-After, and a follow
gives its place back when its client goes away. Plain reads of a log are never counted."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import requests
from apiserver import ApiClient, serving, small_job

from kuberl_api.log_follows import PER_CALLER_ENV, PER_JOB_ENV, FollowLimits
from testkit import free_port, run_kuberl, wait_until

pytestmark = pytest.mark.timeout(300)

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> Iterator[tuple[ApiClient, ApiClient]]:
    """A server that follows a job at most twice and lets a caller follow three logs, with one
    trainer slot taken by `hog` (it trains until deleted): jobs `a` and `b` wait for the slot,
    so their follows stay open. Yields clients with Alice's and Bob's tokens."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    tokens = data_dir.parent / "tokens"
    tokens.write_text(f"{ALICE}\n{BOB}\n")
    args = ("--max-running", "1", "--token-file", str(tokens))
    env = {"KUBERL_API_TOKEN": "", PER_JOB_ENV: "2", PER_CALLER_ENV: "3"}
    with serving(data_dir, *args, env=env) as server:
        alice, bob = ApiClient(server.url, ALICE), ApiClient(server.url, BOB)
        for job in (small_job("hog", iterations=1_000_000), small_job("a"), small_job("b")):
            assert alice.submit(job).status_code == 201
        wait_until(lambda: alice.phase("hog") == "Running", 120, "the hog to run")
        yield alice, bob
        alice.request("DELETE", alice.jobs(name="hog"), params={"purge": "true"})


def follow(client: ApiClient, name: str) -> requests.Response:
    """An open follow of job `name` (its answer's headers read, its stream not)."""
    url = client.url + client.jobs(name=name, action="logs")
    return client.http.get(url, params={"follow": "true"}, stream=True, timeout=(10, 120))


def accepted(client: ApiClient, name: str) -> requests.Response | None:
    """A follow of job `name` if it is accepted, else None (the refusal closed)."""
    response = follow(client, name)
    if response.status_code == 200:
        return response
    response.close()
    return None


def test_follows_past_a_limit_are_refused_until_one_ends(capped):
    alice, bob = capped
    open_follows = [follow(alice, "a"), follow(alice, "a")]
    try:
        assert [response.status_code for response in open_follows] == [200, 200]
        assert alice.phase("a") == "Pending"  # waiting for the slot: still followed

        refused = follow(bob, "a")  # a third follow of `a`, whoever asks
        assert refused.status_code == 429 and refused.headers["Retry-After"].isdigit()
        assert refused.json()["reason"] == "TooManyRequests"
        assert PER_JOB_ENV in refused.json()["message"]

        open_follows.append(follow(alice, "b"))  # Alice's third
        assert open_follows[-1].status_code == 200
        refused = follow(alice, "hog")  # her fourth, of a job nobody follows
        assert refused.status_code == 429 and PER_CALLER_ENV in refused.json()["message"]
        # Reading a log without following it is not a follow.
        plain = alice.request("GET", alice.jobs(name="hog", action="logs"))
        assert plain.status_code == 200

        # A client that goes away gives its place back, once the server has seen it go.
        open_follows.pop(0).close()
        open_follows.append(
            wait_until(lambda: accepted(bob, "a"), 30, "the closed follow's place to be freed")
        )
    finally:
        for response in open_follows:
            response.close()


def test_the_limits_are_whole_numbers_from_one_named_when_wrong():
    assert FollowLimits.from_environ({}) == FollowLimits(per_job=8, per_caller=4)
    assert FollowLimits.from_environ({PER_JOB_ENV: "20", PER_CALLER_ENV: " "}) == FollowLimits(
        per_job=20, per_caller=4
    )
    for variable, value in [(PER_JOB_ENV, "0"), (PER_CALLER_ENV, "many"), (PER_JOB_ENV, "-3")]:
        with pytest.raises(ValueError, match=f"{variable}: a whole number from 1"):
            FollowLimits.from_environ({variable: value})


def test_a_limit_that_is_no_number_stops_serve_with_the_variable_named(tmp_path):
    out = run_kuberl(
        *("serve", "--port", free_port(), "--data-dir", tmp_path / "data"),
        env=os.environ | {PER_CALLER_ENV: "many"},
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"kuberl serve: {PER_CALLER_ENV}: a whole number from 1 is required, got 'many'"
    )
