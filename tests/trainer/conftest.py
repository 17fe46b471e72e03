"""Fixtures of the checkpoint stores' tests: each test of a store runs on a local path and on S3."""

import pytest
from s3server import moto_server, store_location


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 on loopback, one per test module."""
    with moto_server() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path, monkeypatch):
    """A checkpoint location on a local path (as a PVC is too), then in a fresh S3 bucket."""
    return store_location(request, tmp_path, monkeypatch)
