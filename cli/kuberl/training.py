"""`kuberl.train`: a job trained as `kuberl train FILE` trains it (kuberl_cli.train's `train_run`,
the same code), from a manifest file or a manifest as a dict, its fields changed by keyword
arguments as `--set` changes them, with a progress line instead of the command's output."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from kuberl.progress import LineProgress, Silent
from kuberl_cli.train import TrainedRun, train_run
from kuberl_contract.final_record import FinalRecord, Outcome
from kuberl_trainer.envs.search_path import ENV_PATH

DICT_MANIFEST = "job.yaml"
"""The name a manifest given as a dict is written to, in a folder of its own, to be read as
`kuberl train` reads a file (with the same bounds on size and depth)."""


class JobError(ValueError):
    """The job cannot be trained as given: its manifest is missing or invalid, or an override is.
    The message names each field and says why; `record` is the run's final record."""

    def __init__(self, message: str, record: FinalRecord | None = None):
        super().__init__(message)
        self.record = record


class TrainingFailed(RuntimeError):
    """Training began and failed; the message says why, `record` is the run's final record."""

    def __init__(self, record: FinalRecord):
        super().__init__(record.message)
        self.record = record


def train(
    job: str | os.PathLike[str] | Mapping[str, Any],
    *,
    run_dir: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    resume: bool = False,
    progress: bool = True,
    **overrides: Any,
) -> TrainedRun:
    """Train `job` (an RLJob manifest's path, or the manifest as a dict) on this machine, as
    `kuberl train` does, and return the run's final record and run directory.

    Args:
        job: The manifest file, or the manifest itself as a dict (its `module:Class` envs are then
            looked for in the working directory; a file's, next to it too).
        run_dir: Where the run's checkpoints and progress go (default `runs/NAME`, as the
            command's); a run directory holding checkpoints is resumed.
        seed: Sets `spec.trainer.seed` (and names the default run directory `runs/NAME-seedN`),
            as `--seed` does.
        resume: Continue the run directory's checkpoint even where it was trained with another
            spec.trainer (as `--resume`); without it such a run is a JobError naming the fields.
        progress: Show a progress line (redrawn in place: notebooks and terminals alike).
        **overrides: Fields to change before the job is checked, as `--set PATH=VALUE`: the path
            dotted or with `__` for the dots (`trainer__stop__iterations=5`), below `spec` unless
            it starts at a top-level field; the value any JSON value (None clears the field).

    Returns:
        The run's final record (`record`: how it ended, the iteration, timesteps, returns,
        checkpoint) and its run directory (`run_dir`). A run interrupted by a signal returns too,
        with `record.outcome` Interrupted, and resumes when trained again.

    Raises:
        FileNotFoundError: No manifest at the path.
        JobError: The manifest or an override is invalid; the message names the field.
        TrainingFailed: Training began and failed.
    """
    if isinstance(job, Mapping):
        with tempfile.TemporaryDirectory(prefix="kuberl-job-") as folder:
            file = Path(folder) / DICT_MANIFEST
            file.write_text(yaml.safe_dump(dict(job), sort_keys=False))
            directories = [Path.cwd().resolve()]
            return _trained(file, directories, run_dir, seed, resume, progress, overrides)
    file = Path(job)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no RLJob manifest there")
    return _trained(file, None, run_dir, seed, resume, progress, overrides)


def _trained(
    file: Path,
    env_directories: list[Path] | None,
    run_dir: str | os.PathLike[str] | None,
    seed: int | None,
    resume: bool,
    progress: bool,
    overrides: dict[str, Any],
) -> TrainedRun:
    """The run of the manifest at `file` (see `train`); the exceptions `train` raises for those of
    its endings that are errors."""
    stream = sys.stdout  # before the command's own output is set aside
    with _env_path_kept(), contextlib.redirect_stdout(io.StringIO()):
        # The command's summary and final-record line are what the returned record holds.
        run = train_run(
            file,
            None if run_dir is None else Path(run_dir),
            metrics_port=None,
            overrides=as_overrides(overrides),
            seed=seed,
            make_report=lambda job: LineProgress.for_job(job, stream) if progress else Silent(),
            env_directories=env_directories,
            resume=resume,
        )
    record = run.record
    if record.outcome is Outcome.INVALID_JOB:
        # A dict's problems name its fields, not the file it was read from.
        shown = (
            record.message if env_directories is None else record.message.replace(f"{file}: ", "")
        )
        raise JobError(shown, record)
    if record.outcome is Outcome.FAILED:
        raise TrainingFailed(record)
    return run


def as_overrides(overrides: Mapping[str, Any]) -> list[str]:
    """Keyword arguments as `--set PATH=VALUE` strings: `__` in a name is a dot, and the value is
    written as JSON, which the override reads as YAML (a string stays a string)."""
    return [
        f"{name.replace('__', '.')}={json.dumps(value, default=str)}"
        for name, value in overrides.items()
    ]


@contextlib.contextmanager
def _env_path_kept() -> Iterator[None]:
    """The run's env directories (search_path.ENV_PATH) set for the run only: this process trains
    again later, perhaps from another manifest's folder."""
    before = os.environ.get(ENV_PATH)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_PATH, None)
        else:
            os.environ[ENV_PATH] = before
