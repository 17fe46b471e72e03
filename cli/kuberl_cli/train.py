"""`kuberl train FILE`: the same RLJob manifest that goes to a cluster, trained on this machine."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from kuberl_cli.validate import EXIT_INVALID, checked_job, describe_job


def train_command(
    file: Path, run_dir: Path | None, metrics_port: int | None, tensorboard: bool = False
) -> int:
    """0 when a stop condition was met, 128+signal when interrupted (after checkpointing), 1 when
    the job is invalid or failed, 2 when the file is missing. `tensorboard` turns on
    spec.trainer.tensorboard."""
    job, exit_code = checked_job(file)
    if job is None:
        return exit_code

    # Warnings the user must see (a corrupt checkpoint skipped, a worker replaced), one per line.
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.WARNING)
    # The training stack loads only once the manifest is known to be good.
    from kuberl_trainer.driver import Driver
    from kuberl_trainer.errors import TrainingError
    from kuberl_trainer.progress_row import format_return

    run_dir = run_dir or Path("runs") / job.name
    print(f"Training {job.name}: {describe_job(job)}; run directory {run_dir}", flush=True)
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
            learner_gpus=job.spec.learner.gpus,
        ).run()
    except TrainingError as exc:
        print(f"{job.name}: training failed: {exc}", file=sys.stderr)
        return EXIT_INVALID

    verb = "interrupted by" if result.interrupted else "stopped at"
    lines = [
        f"{job.name}: {verb} {result.stopped_by} after {result.iteration} iterations",
        f"  timesteps          {result.timesteps:,}",
        f"  episode return     {format_return(result.episode_return_mean)}"
        f" (mean of the last {job.spec.trainer.metrics_window} episodes)",
    ]
    if result.evaluation_return_mean is not None:
        lines.append(f"  evaluation return  {format_return(result.evaluation_return_mean)}")
    lines += [
        f"  training time      {result.time_total_s:.1f} s",
        f"  checkpoint         {result.checkpoint}",
        f"  progress           {run_dir / 'progress.jsonl'}",
    ]
    if result.interrupted:
        lines.append("  run the same command again to resume from the checkpoint")
    print("\n".join(lines), flush=True)
    if result.interrupted:
        import signal

        return 128 + signal.Signals[result.stopped_by].value
    return 0
