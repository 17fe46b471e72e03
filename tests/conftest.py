"""Shared fixtures: a private Ray instance, and an emulated Kubernetes API (`kube_api`); and the
order the tests run in."""

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# Explicit, so a token file in the home directory never changes how test clusters behave.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a test marked slow first, each module's tests kept together and in order:
    `make test` hands whole modules to its pytest-xdist workers in this order, and a long module
    that came last would run on alone while the other worker had nothing left to do."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)  # stable: order kept within


@pytest.fixture(scope="session")
def ray_local():
    """A Ray instance of this test process only (address="local" never joins someone else's);
    shut down at the end, which ends exactly the processes it started."""
    import ray

    # Actors defined in test modules (mock workers) must be importable by Ray's worker processes,
    # which inherit this environment.
    paths = [str(TESTS), *(str(p) for p in TESTS.iterdir() if p.is_dir())]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def kube_api():
    """A fresh emulated Kubernetes API on a loopback port (see kubeapi.py)."""
    from kubeapi import running_kube_api

    with running_kube_api() as client:
        yield client
