"""What a scrape of /metrics costs the cluster and shows, on the kubernetes backend over real HTTP
against the emulated Kubernetes API: one TokenReview per scrape before anything is listed, nothing
listed for a caller without a valid token, one SubjectAccessReview at the cluster scope (then one
per namespace only when that is refused), and one listing shared by the scrapes of a few seconds,
shown to each caller only as far as its own reviews allow."""

import asyncio
import time
from typing import NamedTuple

import pytest
from apiserver import ApiClient, ApiServer, small_job
from emulated_rbac import ALL_RLJOBS, TOKEN_REVIEWS, answer_reviews, requests_to

from kuberl_api.kubernetes_backend import LISTING_TTL_SECONDS
from kuberl_api.listing_cache import ListingCache
from testkit import wait_until

pytestmark = pytest.mark.timeout(120)

NAMESPACES = ("team-a", "team-b", "team-c")
JOB_SERIES = "kuberl_api_job_timesteps{"


@pytest.fixture
def cluster(kube_api):
    """The emulated Kubernetes API with the RLJob CRD, its reviews answered (emulated_rbac), and
    one job in each of NAMESPACES."""
    kube_api.register_crd()
    kube_api.reviews = answer_reviews(kube_api)
    for namespace in NAMESPACES:
        job = small_job(f"job-of-{namespace}")
        job["metadata"]["namespace"] = namespace
        kube_api.create(kube_api.rljobs(namespace), job)
    return kube_api


class Scrape(NamedTuple):
    """What one scrape showed, and what it asked the cluster."""

    jobs: set[str]
    token_reviews: int
    access_reviews: list[str | None]  # the namespace of each list review (None: every namespace)
    lists: int


def scrape(api: ApiServer, cluster, token: str | None) -> Scrape:
    since, reviewed = len(cluster.api.log), len(cluster.reviews)
    response = ApiClient(api.url, token).request("GET", "/metrics")
    assert response.status_code == 200, response.text
    assert "kuberl_api_requests_total{" in response.text  # the request series, for anyone
    jobs = {
        line.split('rljob="')[1].split('"')[0]
        for line in response.text.splitlines()
        if line.startswith(JOB_SERIES)
    }
    reviews = cluster.reviews[reviewed:]
    assert all(review["verb"] == "list" for review in reviews)
    return Scrape(
        jobs,
        requests_to(cluster, "POST", TOKEN_REVIEWS, since),
        [review.get("namespace") for review in reviews],
        requests_to(cluster, "GET", ALL_RLJOBS, since),
    )


def test_a_scrape_without_a_valid_token_lists_nothing(api, cluster):
    anonymous = scrape(api, cluster, None)
    assert anonymous == Scrape(set(), token_reviews=0, access_reviews=[], lists=0)
    # One TokenReview for the whole scrape, however many namespaces hold jobs; then nothing.
    stranger = scrape(api, cluster, "stolen-token")
    assert stranger == Scrape(set(), token_reviews=1, access_reviews=[], lists=0)
    assert requests_to(cluster, "GET", ALL_RLJOBS) == 0


def test_a_cluster_wide_reader_costs_one_review_of_each_kind(api, cluster):
    dave = scrape(api, cluster, "dave-token")
    assert dave == Scrape(
        {f"job-of-{namespace}" for namespace in NAMESPACES},
        token_reviews=1,
        access_reviews=[None],
        lists=1,
    )


def test_a_namespace_reader_is_asked_about_each_namespace_once_the_cluster_scope_is_refused(
    api, cluster
):
    alice = scrape(api, cluster, "alice-token")
    assert alice.jobs == {"job-of-team-a"}
    assert alice.token_reviews == 1 and alice.lists == 1
    # The cluster scope first; refused, each namespace of the listing once.
    assert alice.access_reviews[0] is None
    assert sorted(alice.access_reviews[1:]) == sorted(NAMESPACES)
    assert ("alice", "team-b") in {(r["user"], r.get("namespace")) for r in cluster.reviews}


def test_the_listing_is_shared_for_a_few_seconds_but_each_caller_sees_only_its_own(api, cluster):
    started = time.monotonic()
    shown = {
        token: scrape(api, cluster, token)
        for token in ("dave-token", "alice-token", "carol-token", "stolen-token", None)
    }
    elapsed = time.monotonic() - started
    # The listing is the API's own view, made once and reused by whoever may see it...
    lists = sum(each.lists for each in shown.values())
    assert lists <= 1 + int(elapsed // LISTING_TTL_SECONDS), (lists, elapsed)
    # ...never by the authorization: each caller is reviewed anew and sees only its namespaces.
    assert shown["dave-token"].jobs == {f"job-of-{namespace}" for namespace in NAMESPACES}
    assert shown["alice-token"].jobs == {"job-of-team-a"}
    assert shown["carol-token"].jobs == {"job-of-team-b"}
    assert shown["stolen-token"].jobs == shown[None].jobs == set()
    assert all(each.token_reviews == 1 for token, each in shown.items() if token)

    # A job created since is shown once the listing is a few seconds old.
    newer = small_job("newer")
    newer["metadata"]["namespace"] = "team-b"
    cluster.create(cluster.rljobs("team-b"), newer)
    wait_until(
        lambda: "newer" in scrape(api, cluster, "carol-token").jobs,
        LISTING_TTL_SECONDS * 6,
        "the new job in the scrape",
    )


def test_the_listing_cache_keeps_a_listing_for_its_time_and_loads_it_once_for_waiting_callers():
    now = [1000.0]
    cache = ListingCache(ttl_seconds=5, clock=lambda: now[0])
    loads = []

    async def load():
        loads.append(now[0])
        await asyncio.sleep(0)  # others arrive while this one loads
        return [len(loads)]

    async def scenario():
        together = await asyncio.gather(*(cache.get(load) for _ in range(3)))
        assert together == [[1], [1], [1]] and len(loads) == 1  # one load for concurrent callers
        now[0] += 4.9
        assert await cache.get(load) == [1]
        now[0] += 0.2
        assert await cache.get(load) == [2]  # expired: loaded again

        async def fail():
            raise OSError("Kubernetes away")

        now[0] += 10
        with pytest.raises(OSError):
            await cache.get(fail)
        assert await cache.get(load) == [3]  # a failure is not kept

    asyncio.run(scenario())
