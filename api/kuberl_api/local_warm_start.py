"""spec.trainer.warmStart.job on the local backend: the job it names must exist in the namespace and
have saved a checkpoint when the job is submitted, and the trainer reads that job's checkpoint
location (its trainer.checkpoint.uri, else its run directory), written into the manifest it
trains in place of the job's name (builders.resolved_manifest, as the operator does on a
cluster). The stored job keeps warmStart.job as submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kuberl_api.submission import invalid
from kuberl_operator.builders.warm_start import (
    WARM_START_CHECKPOINT_FIELD,
    WARM_START_JOB_FIELD,
    WarmStartSource,
    resolved_manifest,
    source_job_problem,
)
from kuberl_operator.validation import Problem


def source_job_name(manifest: Mapping[str, Any]) -> str | None:
    """The job the manifest's spec.trainer.warmStart.job names, or None."""
    warm_start = (manifest["spec"].get("trainer") or {}).get("warmStart") or {}
    return warm_start.get("job")


def checked_source(name: str, found: Mapping[str, Any] | None) -> None:
    """An ApiError 422 naming spec.trainer.warmStart.job when the job `name` (its stored document
    `found`, None when there is none) has no checkpoint to start another from."""
    if problem := source_job_problem(name, found):
        raise invalid([problem])


def source_location(found: Mapping[str, Any] | None, run_dir: Path) -> WarmStartSource:
    """Where the other job (its stored document `found`; None when deleted since) keeps its
    checkpoints: its trainer.checkpoint.uri, else its run directory `run_dir`."""
    trainer = ((found or {}).get("spec") or {}).get("trainer") or {}
    uri = (trainer.get("checkpoint") or {}).get("uri")
    return WarmStartSource(uri or str(run_dir.absolute()))


def trainer_manifest(
    manifest: dict[str, Any], found: Mapping[str, Any] | None, run_dir: Path, check: bool
) -> dict[str, Any]:
    """The manifest the trainer reads: its warmStart.job replaced by the checkpoint location of
    that job (`found`, with run directory `run_dir`), once `checked_source` when `check`."""
    name = source_job_name(manifest)
    if check and name is not None:
        checked_source(name, found)
    return resolved_manifest(manifest, source_location(found, run_dir))


def as_job_problems(problems: list[Problem]) -> list[Problem]:
    """The problems `kuberl validate` found with a resolved manifest, those of the checkpoint it
    was given put on spec.trainer.warmStart.job, which the user wrote."""
    return [
        Problem(WARM_START_JOB_FIELD, problem.message)
        if problem.path == WARM_START_CHECKPOINT_FIELD
        else problem
        for problem in problems
    ]
