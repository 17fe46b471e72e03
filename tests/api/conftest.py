"""Fixtures of the API tests: real `kuberl serve` processes on loopback, local backend."""

import os
from pathlib import Path

import pytest
from apiserver import TOKEN, ApiClient, ApiServer, serving

# Where trainers find this directory's test envs (`recording_env:EnvironmentRecorder`).
TEST_ENVS_PATH = os.pathsep.join(
    part for part in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if part
)


@pytest.fixture(scope="module")
def local_api(tmp_path_factory):
    """A token-protected local backend running up to 2 trainers at once (shared by a module:
    tests use distinct job names)."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    env = {"KUBERL_API_TOKEN": TOKEN, "PYTHONPATH": TEST_ENVS_PATH}
    with serving(data_dir, "--max-running", "2", env=env) as server:
        yield server


@pytest.fixture(scope="module")
def queue_api(tmp_path_factory):
    """A local backend that starts no trainer (--max-running 0): jobs are stored and wait
    Pending, for tests of the API itself."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "0", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        yield server


@pytest.fixture(scope="module")
def open_queue_api(tmp_path_factory):
    """A local backend without tokens (so on loopback, for loopback Hosts only) that starts no
    trainer."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "0", env={"KUBERL_API_TOKEN": ""}) as server:
        yield server


@pytest.fixture
def client(local_api):
    return ApiClient(local_api.url, TOKEN)


@pytest.fixture
def queue_client(queue_api):
    return ApiClient(queue_api.url, TOKEN)


@pytest.fixture
def api(cluster, tmp_path):
    """`kuberl serve` with the kubernetes backend, against the emulated API of the module's
    `cluster` fixture (a module of the kubernetes backend's tests defines or imports it)."""
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    with ApiServer(
        tmp_path / "unused", "--backend", "kubernetes", "--kubeconfig", str(kubeconfig)
    ) as server:
        yield server
