"""`kuberl train FILE`: the same RLJob manifest that goes to a cluster, trained on this machine.

Once the manifest is read, whatever happens, the last line on stdout is the final record
(kuberl_contract.final_record.FinalRecord): how the run ended and where training stood, for the
operator and the API to read. The summary above it is for people only, and so, on a terminal, is
all of stdout: there the record is left out (the operator and the API read a pipe or a file).

`--set PATH=VALUE` and `--seed N` change the manifest before it is checked (kuberl_cli.overrides).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl_cli.local_cost import local_cost
from kuberl_cli.overrides import OverrideError, with_overrides
from kuberl_cli.validate import (
    EXIT_INVALID,
    EXIT_OK,
    describe_job,
    job_in_document,
    manifest_document,
    noisy_stop,
    warm_start_checked,
)
from kuberl_contract.final_record import (
    EXIT_FAILED,
    EXIT_INVALID_JOB,
    EXIT_SIGNAL_BASE,
    EXIT_SUCCEEDED,
    FinalRecord,
    Outcome,
)
from kuberl_contract.progress_row import PROGRESS_FILE, format_return
from kuberl_operator.spec import RLJob

if TYPE_CHECKING:
    from kuberl_trainer.job.checkpoint import Checkpoint

RESUME_COMMAND_ENV = "KUBERL_RESUME_COMMAND"
"""The command that resumes an interrupted run, when another program started this one and resumes
it its own way (the API's trainers: `kuberl resume NAME`); else the summary says to run the same
command again."""


def train_command(
    file: Path,
    run_dir: Path | None,
    metrics_port: int | None,
    tensorboard: bool = False,
    overrides: list[str] | None = None,
    seed: int | None = None,
    prices: tuple[float | None, float | None] = (None, None),
    resume: bool = False,
) -> int:
    """The exit status (final_record's EXIT_*): 0 when a stop condition was met, 128+N when
    interrupted by signal N (after checkpointing), 65 when the job is invalid (its manifest, or
    what only the driver finds: an unknown env, an unsupported space, a resource request the Ray
    cluster never offers), 1 when training failed, 2 when the file is missing.
    `tensorboard` turns on spec.trainer.tensorboard; `overrides` (PATH=VALUE) and `seed` change
    the manifest before it is checked; `prices` (dollars per CPU-hour and per GPU-hour) price the
    hours the run held (local_cost); `resume` continues the run directory's checkpoint even when
    it was trained with another spec.trainer (without it, such a run is refused: its directory
    would record this job's result under that run)."""
    run = train_run(
        file, run_dir, metrics_port, tensorboard, overrides, seed, prices, resume=resume
    )
    return run.record.exit_code


@dataclass(frozen=True)
class TrainedRun:
    """How a run ended: its final record, and its run directory (None when it never had one: the
    manifest was missing or invalid)."""

    record: FinalRecord
    run_dir: Path | None


def train_run(
    file: Path,
    run_dir: Path | None,
    metrics_port: int | None,
    tensorboard: bool = False,
    overrides: list[str] | None = None,
    seed: int | None = None,
    prices: tuple[float | None, float | None] = (None, None),
    make_report: Callable[[RLJob], Any] | None = None,
    env_directories: Sequence[Path] | None = None,
    resume: bool = False,
) -> TrainedRun:
    """train_command's run, with its final record (printed as train_command says, except where the
    file is missing) and its run directory. `make_report(job)` gives what the driver reports
    progress to (default: the live bar on a terminal, else the driver's own lines). A `module:Class`
    env is looked for in `env_directories` after the installed packages (default: the manifest's
    directory and the working directory; kuberl_trainer.envs.search_path)."""
    from kuberl_trainer.envs.search_path import run_directories, search_for_envs_in

    search_for_envs_in(run_directories(file) if env_directories is None else env_directories)
    job, warm_start, exit_code, problems = _job_to_train(file, overrides or [], seed)
    if job is None:
        print("\n".join(problems), file=sys.stderr)
        if exit_code != EXIT_INVALID:
            record = FinalRecord(Outcome.INVALID_JOB, exit_code, "; ".join(problems), time.time())
            return TrainedRun(record, None)
        return TrainedRun(_ended(Outcome.INVALID_JOB, EXIT_INVALID_JOB, "; ".join(problems)), None)

    # Warnings the user must see (a corrupt checkpoint skipped, a worker replaced), one per line.
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.WARNING)
    # The training stack loads only once the manifest is known to be good.
    from kuberl_trainer.errors import InvalidJobError, TrainingError
    from kuberl_trainer.job.driver import Driver
    from kuberl_trainer.trained.export import export_checkpoint

    run_dir = run_dir or Path("runs") / (job.name if seed is None else f"{job.name}-seed{seed}")
    print(f"Training {job.name}: {describe_job(job)}; run directory {run_dir}", flush=True)
    if warning := noisy_stop(job):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    report = (make_report or _terminal_report)(job)
    try:
        trainer = job.spec.trainer
        if tensorboard:
            trainer = trainer.model_copy(update={"tensorboard": True})
        result = Driver(
            trainer,
            job.spec.rollout_workers,
            run_dir,
            job.name,
            namespace=job.metadata.namespace or "local",
            metrics_port=metrics_port,
            report=report,
            learner_gpus=job.spec.learner.gpus,
            learner_device=job.spec.learner.device,
            warm_start=warm_start,
            export=export_checkpoint,
            refuse_other_run=not resume,
        ).run()
    except InvalidJobError as exc:
        print(f"{job.name}: invalid job: {exc}", file=sys.stderr)
        return TrainedRun(_ended(Outcome.INVALID_JOB, EXIT_INVALID_JOB, str(exc)), run_dir)
    except TrainingError as exc:
        print(f"{job.name}: training failed: {exc}", file=sys.stderr)
        return TrainedRun(_ended(Outcome.FAILED, EXIT_FAILED, str(exc)), run_dir)
    finally:
        if report is not None:  # the driver closes it, unless it failed before running
            report.close()

    verb = "interrupted by" if result.interrupted else "stopped at"
    lines = [
        f"{job.name}: {verb} {result.stopped_by} after {result.iteration} iterations",
        f"  timesteps          {result.timesteps:,}",
        f"  episode return     {format_return(result.episode_return_mean)}"
        f" (mean of the last {job.spec.trainer.metrics_window} episodes)",
    ]
    if result.evaluation_return_mean is not None:
        lines.append(f"  evaluation return  {format_return(result.evaluation_return_mean)}")
    cost = local_cost(result.time_total_s, job.spec.rollout_workers, job.spec.learner.gpus, *prices)
    lines += [
        f"  training time      {result.time_total_s:.1f} s",
        f"  held               {cost.describe(*prices)}",
        f"  checkpoint         {_for_people(result.checkpoint)}",
        *([f"  policy             {_for_people(result.policy)}"] if result.policy else []),
        f"  progress           {_for_people(str(run_dir / PROGRESS_FILE))}",
    ]
    if result.interrupted:
        # A trainer that `kuberl serve` started is resumed through the API, which names how.
        resume = os.environ.get(RESUME_COMMAND_ENV)
        again = f"run `{resume}`" if resume else "run the same command again"
        lines.append(f"  {again} to resume from the checkpoint")
    print("\n".join(lines), flush=True)
    if result.interrupted:
        outcome = Outcome.INTERRUPTED
        exit_code = EXIT_SIGNAL_BASE + signal.Signals[result.stopped_by].value
    else:
        outcome, exit_code = Outcome.STOPPED, EXIT_SUCCEEDED
    record = FinalRecord(
        outcome=outcome,
        exit_code=exit_code,
        message=f"{verb} {result.stopped_by}",
        time=time.time(),
        iteration=result.iteration,
        timesteps_total=result.timesteps,
        episode_return_mean=result.episode_return_mean,
        evaluation_return_mean=result.evaluation_return_mean,
        time_total_s=result.time_total_s,
        checkpoint=None if result.checkpoint is None else str(result.checkpoint),
        policy=result.policy,
        cpu_hours=cost.cpu_hours,
        gpu_hours=cost.gpu_hours,
        dollars=cost.dollars,
    )
    _print_record(record)
    return TrainedRun(record, run_dir)


def _for_people(location: str | None) -> str | None:
    """A location as the summary shows it: a local path relative to the working directory when it
    lies below it (as `runs/NAME` is given), so that a log shared from this machine shows none of
    its paths; anything else as it is."""
    if location is None or "://" in location or not Path(location).is_relative_to(Path.cwd()):
        return location
    return str(Path(location).relative_to(Path.cwd()))


def _ended(outcome: Outcome, exit_code: int, message: str) -> FinalRecord:
    """Print the final record of a run that ended before training, and return it."""
    record = FinalRecord(outcome=outcome, exit_code=exit_code, message=message, time=time.time())
    _print_record(record)
    return record


def _print_record(record: FinalRecord) -> None:
    """The record, for the programs that read stdout through a pipe or a file; a person at a
    terminal has read the summary."""
    if not sys.stdout.isatty():
        print(record.line(), flush=True)


def _terminal_report(job: RLJob):
    """The live bar on a terminal (None elsewhere: the driver prints a line every few
    seconds)."""
    if not sys.stdout.isatty():
        return None
    from kuberl_cli.terminal_report import TerminalReport

    trainer = job.spec.trainer
    title = f"{job.name} {trainer.algorithm} {trainer.env}"
    return TerminalReport(title, trainer.stop).start()


def _job_to_train(
    file: Path, overrides: list[str], seed: int | None
) -> tuple[RLJob | None, Checkpoint | None, int, list[str]]:
    """As _overridden_job, with the checkpoint of a local warmStart checked and returned as read,
    for the driver to start from without reading it again (None where the job has no warm start,
    or has it in an object store)."""
    job, exit_code, problems = _overridden_job(file, overrides, seed)
    if job is None:
        return None, None, exit_code, problems
    warm_start, problem = warm_start_checked(job.spec.trainer)
    if problem is not None:
        return None, None, EXIT_INVALID, [f"{file}: {problem}"]
    return job, warm_start, exit_code, problems


def _overridden_job(
    file: Path, overrides: list[str], seed: int | None
) -> tuple[RLJob | None, int, list[str]]:
    """As validate.job_problems, for the manifest with the overrides applied to it as parsed,
    leaving out the warm start's checkpoint (train_command checks it, and keeps what it read)."""
    document, exit_code, problems = manifest_document(file)
    if exit_code != EXIT_OK:
        return None, exit_code, problems
    try:
        changed = with_overrides(document, overrides, seed)
    except OverrideError as exc:
        return None, EXIT_INVALID, [f"{file}: {exc}"]
    return job_in_document(file, changed, check_warm_start=False)
