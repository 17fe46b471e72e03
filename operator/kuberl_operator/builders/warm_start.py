"""spec.trainer.warmStart on a server (the kuberl API or a cluster): what a submitted job may name,
and where the checkpoint of a warmStart.job is, as the job's driver will see it.

A relative warmStart.checkpoint means the directory `kuberl train FILE` runs in; a server has no
such directory of the user's, so a submitted job must name an absolute path, a URI, or a job.

warmStart.job names another job of the namespace. It must exist and have saved a checkpoint
(its status.progress.lastCheckpoint). On a cluster the driver reads that job's checkpoint
location: its trainer.checkpoint.uri when that is an object store; else the run directory on its
claim, which the head mounts read-only at WARM_START_MOUNT_PATH (or, when both jobs share one
claim, through its own mount). A job whose checkpoints lived in its head pod's emptyDir has none
left to give. The manifest the driver reads names the location found (`resolved_manifest`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any, NamedTuple

from kuberl_operator.builders.driver import ephemeral_checkpoints, run_dir_on_claim
from kuberl_operator.builders.names import job_claim_name
from kuberl_operator.spec import RLJob
from kuberl_operator.validation import InvalidManifest, Problem, validate_rljob

WARM_START_CHECKPOINT_FIELD = "spec.trainer.warmStart.checkpoint"
WARM_START_JOB_FIELD = "spec.trainer.warmStart.job"
WARM_START_MOUNT_PATH = "/kuberl/warm-start"
"""Where the head mounts, read-only, the claim of the job its warmStart.job names."""


class WarmStartSource(NamedTuple):
    """The checkpoint location a warmStart.job resolves to, as the driver sees it."""

    checkpoint: str
    claim: str | None = None
    """The other job's claim, for the head to mount read-only at WARM_START_MOUNT_PATH; None when
    the location needs no mount (an object store, or the job's own claim)."""


class WarmStartUnavailable(ValueError):
    """Why warmStart.job cannot start the job: `problem`, on spec.trainer.warmStart.job."""

    def __init__(self, message: str):
        self.problem = Problem(WARM_START_JOB_FIELD, message)
        super().__init__(str(self.problem))


def served_warm_start_problems(job: RLJob) -> list[Problem]:
    """What a job submitted to a server may not name in spec.trainer.warmStart: a relative
    checkpoint path, which would be read from the server's working directory."""
    warm_start = job.spec.trainer.warm_start
    named = warm_start.checkpoint if warm_start else None
    if named is None or "://" in named or posixpath.isabs(named):
        return []
    return [
        Problem(
            WARM_START_CHECKPOINT_FIELD,
            f"{named!r} is a relative path, which a server would resolve in its own working "
            "directory, not yours: use an absolute path the server can read, a URI (file://, "
            "s3://, gs://, az://), or warmStart.job to start from another job's newest "
            "checkpoint",
        )
    ]


def source_job_problem(name: str, found: Mapping[str, Any] | None) -> Problem | None:
    """Why the job `name` (the RLJob document `found`, as stored; None when there is no such
    job) has nothing to start another from, or None when it has saved a checkpoint."""
    if found is None:
        return Problem(
            WARM_START_JOB_FIELD,
            f"there is no job {name!r} in this namespace: name an existing job, or set "
            "warmStart.checkpoint",
        )
    progress = (found.get("status") or {}).get("progress") or {}
    if not progress.get("lastCheckpoint"):
        return Problem(
            WARM_START_JOB_FIELD,
            f"job {name!r} has saved no checkpoint yet (status.progress.lastCheckpoint is "
            "empty): submit this job once it has one",
        )
    return None


def cluster_warm_start_source(job: RLJob, found: Mapping[str, Any] | None) -> WarmStartSource:
    """Where the driver of `job` finds the newest checkpoint of the job its warmStart.job names
    (the RLJob document `found`, as stored; None when there is no such job); else
    WarmStartUnavailable."""
    name = job.spec.trainer.warm_start.job if job.spec.trainer.warm_start else None
    if name is None:
        raise ValueError("the job has no warmStart.job to resolve")
    if problem := source_job_problem(name, found):
        raise WarmStartUnavailable(problem.message)
    assert found is not None  # source_job_problem says so otherwise
    try:
        # The spec only: the status and the server's metadata are no part of the manifest.
        kept = {key: found.get(key) for key in ("apiVersion", "kind", "spec")}
        source = validate_rljob({**kept, "metadata": {"name": name}})
    except InvalidManifest:
        raise WarmStartUnavailable(
            f"job {name!r} has an invalid spec, so where it keeps its "
            "checkpoints is unknown: fix it, or set warmStart.checkpoint"
        ) from None
    if reason := ephemeral_checkpoints(source.spec):
        raise WarmStartUnavailable(f"job {name!r} cannot start another: {reason}")
    uri = source.spec.trainer.checkpoint.uri
    claim = job_claim_name(source)
    if claim is None:  # not ephemeral without a claim: in an object store
        assert uri is not None
        return WarmStartSource(uri)
    mount = source.spec.storage.mount_path.rstrip("/") if source.spec.storage else ""
    location = uri.removeprefix("file://") if uri else run_dir_on_claim(source)
    inside = location[len(mount) :]  # ephemeral_checkpoints has checked it is below the mount
    storage = job.spec.storage
    if storage is not None and job_claim_name(job) == claim:
        return WarmStartSource(storage.mount_path.rstrip("/") + inside)
    return WarmStartSource(WARM_START_MOUNT_PATH + inside, claim)


def resolved_manifest(manifest: dict[str, Any], source: WarmStartSource) -> dict[str, Any]:
    """The job's manifest as its driver reads it: warmStart.job replaced by the checkpoint
    location it resolved to."""
    spec = manifest["spec"]
    trainer = {**spec["trainer"], "warmStart": {"checkpoint": source.checkpoint}}
    return {**manifest, "spec": {**spec, "trainer": trainer}}
