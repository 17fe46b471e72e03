"""An S3-compatible server on loopback (moto in server mode, in a thread of the test process) and
the environment that points the AWS SDKs at it, as a cluster's credentials Secret would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testkit import free_port


class MotoServer:
    """moto's S3 on a free loopback port; objects live in this process, across stop and start."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.running = False

    def start(self) -> None:
        """Reachable (again, on the same port)."""
        if not self.running:
            self._server.start()
            self.running = True

    def stop(self) -> None:
        """Unreachable from now on: connections are refused."""
        if self.running:
            self._server.stop()
            # moto's stop() leaves the socket listening, where connections would hang, not fail.
            self._server._server.server_close()
            self.running = False


@contextmanager
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class S3Bucket:
    server: MotoServer
    name: str

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.server.endpoint, region_name="us-east-1")

    def keys(self, prefix: str = "") -> list[str]:
        listing = self.client().list_objects_v2(Bucket=self.name, Prefix=prefix)
        return sorted(item["Key"] for item in listing.get("Contents", []))


def s3_environment(endpoint: str, home: Path) -> dict[str, str]:
    """What the trainer's environment needs for the server: the standard AWS variables, and no
    stray configuration or proxy from this machine."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "kuberl-test",
        "AWS_SECRET_ACCESS_KEY": "kuberl-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(home / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        # The SDK's default of 5 attempts with backoff spends ~10 s on each call while the server
        # is stopped on purpose.
        "AWS_MAX_ATTEMPTS": "2",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def fresh_bucket(server: MotoServer, monkeypatch, home: Path) -> S3Bucket:
    """A new bucket on the server, with the process environment pointing at the server for the
    rest of the test."""
    for name, value in s3_environment(server.endpoint, home).items():
        monkeypatch.setenv(name, value)
    bucket = S3Bucket(server, f"kuberl-{uuid.uuid4().hex[:12]}")
    bucket.client().create_bucket(Bucket=bucket.name)
    return bucket


def store_location(request, tmp_path: Path, monkeypatch) -> str:
    """A checkpoint location of the kind a fixture's `request.param` names: "local" (a path, as a
    PVC mounted by each pod is too) or "s3" (a fresh bucket on the module's `s3_server`)."""
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    bucket = fresh_bucket(request.getfixturevalue("s3_server"), monkeypatch, tmp_path)
    return f"s3://{bucket.name}/jobs/test"
