"""Fixtures of the API tests: real `kuberl serve` processes on loopback, local backend."""

import pytest
from apiserver import TOKEN, ApiClient, serving


@pytest.fixture(scope="module")
def local_api(tmp_path_factory):
    """A token-protected local backend running up to 2 trainers at once (shared by a module:
    tests use distinct job names)."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "2", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        yield server


@pytest.fixture(scope="module")
def queue_api(tmp_path_factory):
    """A local backend that starts no trainer (--max-running 0): jobs are stored and wait
    Pending, for tests of the API itself."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "0", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        yield server


@pytest.fixture
def client(local_api):
    return ApiClient(local_api.url, TOKEN)


@pytest.fixture
def queue_client(queue_api):
    return ApiClient(queue_api.url, TOKEN)
