"""A job's exported policy through the API (GET /v1/namespaces/{ns}/jobs/{name}/policy):
`kuberl get policy JOB [-o FILE] [--overwrite]` writes it to a file, and `kuberl evaluate JOB`
plays it as it plays a file of `kuberl export`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kuberl_cli.client import EXIT_REFUSED, Client, ClientError, job_name

POLICY_SUFFIX = ".onnx"
"""The exported policy's format (the API serves an ONNX graph), and its file's ending."""


def policy_bytes(client: Client, name: str) -> bytes:
    """The exported policy of the job `name` names (NAME, job/NAME); ClientError with the API's
    one line when the job has none yet, or is not there."""
    return client.call("GET", client.jobs_path(job_name(name, "get policy"), "policy"))


def get_policy(client: Client, name: str, file: str | None, overwrite: bool = False) -> None:
    """Writes the job's exported policy to `file` (NAME.onnx in the working directory without
    one), never over an existing file unless `overwrite`, and says where in one line."""
    name = job_name(name, "get policy")
    target = Path(file) if file else Path(f"{name}{POLICY_SUFFIX}")
    if target.is_dir():
        raise ClientError(f"-o {target}: is a directory: name the file to write", EXIT_REFUSED)
    if target.exists() and not overwrite:
        raise ClientError(
            f"-o {target}: the file exists: pass --overwrite to replace it, or name another",
            EXIT_REFUSED,
        )
    policy = policy_bytes(client, name)  # before anything is written: an error leaves no file
    _write_whole(target, policy)
    print(f"{target}: the exported policy of job {name} ({len(policy):,} bytes)")


def _write_whole(target: Path, data: bytes) -> None:
    """Writes `data` to `target` at once, through a file beside it, so that a reader never sees
    half a policy and an interrupted write leaves the old file as it was."""
    directory = target.parent if str(target.parent) else Path(".")
    descriptor, partial = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


@contextmanager
def downloaded_policy(client: Client, name: str) -> Iterator[Path]:
    """The job's exported policy in a temporary file, removed on exit."""
    policy = policy_bytes(client, name)
    with tempfile.TemporaryDirectory(prefix="kuberl-policy-") as directory:
        path = Path(directory) / f"{job_name(name, 'evaluate')}{POLICY_SUFFIX}"
        path.write_bytes(policy)
        yield path
