"""The driver: runs one job's Trainer (see trainer.py) as a process, iteration by iteration. It
starts or joins Ray (ray_session.py) and waits for the job's resources, resumes from the newest
checkpoint, writes the progress rows, the metrics and TensorBoard's events, checkpoints, and on
SIGTERM checkpoints within the grace period and stops (preemption.py). A stop condition met ends
the run (outcome.py), with the final policy exported when the job asks for it (final_export.py)."""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kuberl_contract.capacity import capacity_from_env
from kuberl_contract.config import PBT, JobTrainerConfig, LearnerDevice, RolloutConfig
from kuberl_contract.progress_row import (
    CHECKPOINT,
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    PROGRESS_FILE,
    TIME_TOTAL_S,
)
from kuberl_trainer.errors import IncompatibleCheckpointError, InvalidJobError
from kuberl_trainer.job.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    checkpoint_location,
)
from kuberl_trainer.job.fencing import CheckpointFenced, attempt_from_env
from kuberl_trainer.job.final_export import PolicyExport, export_final_policy, exported_since
from kuberl_trainer.job.metrics import TrainerMetrics, return_target
from kuberl_trainer.job.outcome import TrainResult, stop_reason
from kuberl_trainer.job.preemption import Preemption
from kuberl_trainer.job.progress import ConsoleReport, ProgressLog
from kuberl_trainer.job.ray_session import RaySession
from kuberl_trainer.job.resource_wait import await_resources, job_requests
from kuberl_trainer.job.resume import (
    checkpoint_identity,
    checkpoint_meta,
    config_changes,
    other_run_refusal,
    restore_progress,
    saved_row,
    warm_start_location,
    warm_start_misfit,
    warm_start_source,
)
from kuberl_trainer.job.tensorboard import TensorBoardLog
from kuberl_trainer.job.trainer import Trainer
from kuberl_trainer.rollouts.interrupt import IterationAbandoned, StopRequest
from kuberl_trainer.rollouts.node_drain import OwnNodeDrain, until

log = logging.getLogger(__name__)


def trainer_class(config: JobTrainerConfig) -> type:
    """What runs the job: one algorithm's Trainer, or a Population of them (imported only for
    PBT)."""
    if config.algorithm == PBT:
        from kuberl_trainer.job.population import Population

        return Population
    return Trainer


class Driver:
    def __init__(
        self,
        config: JobTrainerConfig,
        rollout: RolloutConfig,
        run_dir: Path,
        job_name: str,
        namespace: str = "local",
        metrics_port: int | None = None,
        report: ConsoleReport | None = None,
        learner_gpus: int = 0,
        learner_device: LearnerDevice = "auto",
        warm_start: Checkpoint | None = None,
        export: PolicyExport | None = None,
        refuse_other_run: bool = False,
    ):
        """`warm_start`: spec.trainer.warmStart's checkpoint where the caller has read it already
        (`kuberl train` reads a local one to check it before anything starts); else the driver
        reads it. `export`: how to write the final checkpoint's greedy policy to a file
        (kuberl_trainer.trained.export.export_checkpoint, which `kuberl train` passes), used when
        spec.trainer.checkpoint.exportPolicy asks for it; without it nothing is exported. Given,
        not imported: using a trained policy is a room above running a job. `refuse_other_run`:
        fail rather than resume a checkpoint trained with another spec.trainer
        (resume.other_run_changes; `kuberl train` without --resume), except in the operator's
        attempts, which run the RLJob as it now stands."""
        self.config = config
        self._refuse_other_run = refuse_other_run
        self._export = export
        self._warm_start_source = warm_start
        self.rollout = rollout
        self.run_dir = run_dir
        self.job_name = job_name
        self.learner_gpus = learner_gpus
        self._said = ""  # the placement last reported
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        stop_request = StopRequest()  # what the signal asks of the iteration in progress
        self.trainer = trainer_class(config)(
            config, rollout, seed, learner_gpus, stop_request, learner_device
        )
        self.store = CheckpointStore(
            checkpoint_location(config.checkpoint.uri, run_dir),
            config.checkpoint.keep,
            attempt_from_env(os.environ),  # the operator's try of this job; None outside it
        )
        self.checkpoint: str | None = None  # the newest complete checkpoint's location
        self.metrics = TrainerMetrics(
            namespace,
            job_name,
            config.algorithm,
            return_target(config.stop.episode_return_mean, config.env),
        )
        self.metrics_port = metrics_port
        self.report = report or ConsoleReport(
            f"{job_name} {config.algorithm} {config.env}", config.stop
        )
        self.preemption = Preemption(
            config.checkpoint.grace_period_seconds, stop_request, self.report
        )
        self._ray = RaySession()
        self._own_drain = OwnNodeDrain()
        self._tensorboard: TensorBoardLog | None = None

    @property
    def iteration(self) -> int:
        return self.trainer.iteration

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train the job until a stop condition is met or a signal stops it, checkpointing on the
        way; whatever happens, the logs are closed and what the run started is stopped."""
        trainer = self.trainer
        trainer.seed_everything()
        previous_handlers = self.preemption.install()
        built = progress = None
        try:
            found = self._prepare()
            built = trainer
            resumed_from = self._build(found)
            # Opened after resuming, which may truncate the file to the checkpoint's iteration.
            progress = ProgressLog(self.run_dir / PROGRESS_FILE)
            self._open_tensorboard(resumed_from)
            checkpoint, saved, stopped_by = self._train(progress, resumed_from)
            # A signal after the stop condition was met interrupts nothing: the job is done.
            interrupted = self.preemption.signalled and stopped_by is None
            if interrupted:
                if saved != self.iteration:  # else nothing was trained since that checkpoint
                    checkpoint, saved = self._checkpoint(saved)
                self.preemption.report_checkpoint(saved, self.iteration)
                stopped_by = self.preemption.signal_name
            result = self._result(stopped_by, interrupted, checkpoint, resumed_from)
            if not interrupted and checkpoint is not None and self.config.checkpoint.export_policy:
                result = replace(result, policy=self._export_policy(checkpoint))
            return result
        finally:
            self._close(progress, built)
            self.preemption.restore(previous_handlers)

    def _export_policy(self, checkpoint: str) -> str | None:
        """The final checkpoint's greedy policy as policy.onnx beside it (see
        CheckpointConfig.export_policy); None when it cannot be exported."""
        if self._export is None:
            return None
        if (exported := exported_since(self.store, checkpoint)) is not None:
            return exported  # a finished run run again: the export of its checkpoint stands
        uri = export_final_policy(self._export, checkpoint, self.config, self.trainer, self.store)
        if uri is not None:
            self.report.message(f"Exported the greedy policy to {uri} (ONNX)")
        return uri

    def _prepare(self) -> Checkpoint | None:
        """Serve the metrics, find the checkpoint to resume from, and when the trainer needs Ray
        start or join it and wait for the job's resources. Returns the checkpoint found."""
        if self.metrics_port is not None:  # before any wait for Ray nodes, which it reports
            self.metrics.serve(self.metrics_port)
        # Found first: another job's checkpoints fail the job before Ray starts, and a resumed
        # run's workers are seeded anew (their envs must not replay the first run's episodes).
        found = self.store.latest(checkpoint_identity(self.config))
        own_run = not self._refuse_other_run or self.store.attempt is not None
        if found and not own_run and (refusal := other_run_refusal(found, self.config)):
            raise InvalidJobError(refusal)
        if self.trainer.needs_ray:
            self._ray.start()
            # Joining Ray installs the core worker's SIGTERM handler (a stack trace, then an
            # abort): ours again, or a preempted driver would die without its checkpoint.
            self.preemption.install()
            self._await_resources()
        return found

    def _build(self, found: Checkpoint | None) -> str | None:
        """Build the trainer and resume it from the checkpoint found, if any. Returns the
        location resumed from."""
        trainer = self.trainer
        trainer.build(resumed_iteration=found.meta["iteration"] if found else 0)
        self._say_placement()
        # Taken either way, so that a run resuming from its own checkpoint does not hold it.
        read, self._warm_start_source = self._warm_start_source, None
        if found:
            return self._resume(found)
        if self.config.warm_start is not None:
            named = warm_start_location(self.config.warm_start)
            self._warm_start(read or warm_start_source(named))
        return None

    def _warm_start(self, source: Checkpoint) -> None:
        """Load the trained policy of spec.trainer.warmStart (`source`) into the new run's
        learner."""
        try:
            self.trainer.warm_start(source.state)
        except IncompatibleCheckpointError as exc:
            raise IncompatibleCheckpointError(warm_start_misfit(source, exc)) from None
        meta = source.meta
        self.report.message(
            f"Warm start from {source.uri} ({meta.get('algorithm')} on {meta.get('env')}, "
            f"iteration {meta.get('iteration')}, {meta.get('timesteps', 0):,} env steps): its "
            "weights, optimizer moments and observation statistics; counters start at 0"
        )

    def _open_tensorboard(self, resumed_from: str | None) -> None:
        """Open TensorBoard's event log when the job asks for one; a resumed run purges the
        events written after its checkpoint."""
        if self.config.tensorboard:
            purge = self.trainer.timesteps + 1 if resumed_from else None
            self._tensorboard = TensorBoardLog(self.run_dir, purge_step=purge)

    def _train(
        self, progress: ProgressLog, resumed_from: str | None
    ) -> tuple[str | None, int | None, str | None]:
        """Iterate until a stop condition is met, a signal comes or the iteration in progress is
        abandoned, checkpointing every `everyIterations`, at the stop and after a signal. An
        iteration's checkpoint is saved before its progress row is written, so that the row
        names it (or, when the save failed, the previous one); the checkpoint carries the row,
        which resuming restores if the process died in between. Returns the newest complete
        checkpoint, the iteration it holds, and the stop condition met (None when none was)."""
        checkpoint, stopped_by = resumed_from, None
        saved = self.iteration if resumed_from is not None else None  # newest checkpoint's
        if resumed_from is not None:  # a finished job run again has nothing left to do
            stopped_by = stop_reason(self.config.stop, self.trainer.totals())
            if stopped_by:
                self.report.message(f"Already stopped at {stopped_by}: nothing to train")
        while stopped_by is None and not self.preemption.signalled:
            try:
                row, timer_deltas, restarts = self.trainer.step()
            except IterationAbandoned:  # preempted: the grace period is for the checkpoint
                self.report.message(
                    f"Iteration {self.iteration + 1} dropped unfinished; checkpointing "
                    f"iteration {self.iteration}"
                )
                break
            self._record(row, timer_deltas, restarts)
            stopped_by = stop_reason(self.config.stop, row)
            due = self.iteration % self.config.checkpoint.every_iterations == 0
            if (drain := self._own_drain.begun()) is not None:  # before the node goes
                self.report.message(f"This Ray node is about to go ({until(drain)}): checkpointing")
                due = True
            if stopped_by or due or self.preemption.signalled:
                checkpoint, saved = self._checkpoint(saved, row)
            row[CHECKPOINT] = self.checkpoint
            progress.write(row)
        return checkpoint, saved, stopped_by

    def _record(self, row: dict[str, Any], timer_deltas: dict[str, float], restarts: int) -> None:
        """Write an iteration's row to TensorBoard (before its checkpoint, which flushes the
        events), the console and the metrics; the progress file gets it once its checkpoint is
        known."""
        if self._tensorboard is not None:
            self._tensorboard.write(row)
        self._say_placement()
        self.report.update(row)
        self.metrics.record(row, timer_deltas, restarts)

    def _say_placement(self) -> None:
        """Where the GPUs went, at start and again when the learner's device is chosen (see
        device_choice.py)."""
        trainer = self.trainer
        if self.learner_gpus and isinstance(trainer, Trainer) and trainer.placement != self._said:
            self._said = trainer.placement
            self.report.message(trainer.placement)

    def _result(
        self,
        stopped_by: str,
        interrupted: bool,
        checkpoint: str | None,
        resumed_from: str | None,
    ) -> TrainResult:
        """What the run ended with: where it stopped and why, its totals and its checkpoint."""
        totals = self.trainer.totals()
        return TrainResult(
            stopped_by=stopped_by,
            interrupted=interrupted,
            iteration=self.iteration,
            timesteps=self.trainer.timesteps,
            episode_return_mean=totals[EPISODE_RETURN_MEAN],
            evaluation_return_mean=totals[EVALUATION_RETURN_MEAN],
            time_total_s=totals[TIME_TOTAL_S],
            checkpoint=checkpoint,
            resumed_from=resumed_from,
            run_dir=self.run_dir,
        )

    def _close(self, progress: ProgressLog | None, built: Any) -> None:
        """Close the logs, stop the trainer if it was built, and shut Ray down if this driver
        started it."""
        if progress is not None:
            progress.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        self.report.close()
        if built is not None:
            built.stop()
        self._ray.shutdown()

    # -- Ray's resources ------------------------------------------------------------------------

    def _await_resources(self) -> None:
        """Wait for the Ray nodes the job's actors need, or fail: never possible (an invalid
        job) or not joined in time (resource_wait)."""
        await_resources(
            job_requests(self.config, self.rollout),
            capacity_from_env(os.environ),
            private_ray=self._ray.private,
            waited=self.metrics.waiting_for_resources,
            interrupted=lambda: self.preemption.signalled,
            to_start=job_requests(self.config, self.rollout, self.rollout.fewest),
        )

    # -- checkpoints --------------------------------------------------------------------------

    def _save(self, row: dict[str, Any] | None) -> str | None:
        """Checkpoint; returns the newest complete checkpoint. When the store fails (full,
        unreachable, denied) training goes on: the failure is logged and counted, the previous
        checkpoints stay as they were, and the next save tries again. A fenced save ends the
        driver (CheckpointFenced): a newer attempt owns the job, and retrying would never pass."""
        try:
            meta = checkpoint_meta(
                self.config, self.iteration, self.trainer.timesteps, row, self.trainer.env_spaces
            )
            self.checkpoint = self.store.save(self.iteration, self.trainer.state(), meta)
        except CheckpointFenced:
            raise
        except CheckpointError as exc:
            self.metrics.checkpoint_failed()
            log.error("checkpoint failed, training goes on: %s", exc)
            return self.checkpoint
        if self._tensorboard is not None:  # the events up to a checkpoint are on disk with it
            self._tensorboard.flush()
        self.metrics.checkpointed(time.time(), self.checkpoint)
        return self.checkpoint

    def _resume(self, found: Checkpoint) -> str:
        current = self.config.model_dump(mode="json", by_alias=True)
        changes = config_changes(found.meta.get("config", current), current)
        changed = f"spec.trainer changed since the checkpoint: {', '.join(changes)}"
        try:
            self.trainer.load_state(found.state)
        except IncompatibleCheckpointError as exc:
            advice = (
                "train in another run directory (or checkpoint.uri), or set spec.trainer back "
                "to what the checkpoint was trained with"
            )
            raise IncompatibleCheckpointError(
                f"cannot resume from {found.uri}: {exc}"
                + (f"; {changed}" if changes else "")
                + f"; {advice}"
            ) from None
        if changes:
            self.report.message(f"Resuming with {changed}")
        self.checkpoint = found.uri
        self.metrics.checkpointed(found.meta["created"], found.uri)
        self.metrics.position(self.iteration, self.trainer.timesteps)
        restore_progress(self.run_dir / PROGRESS_FILE, self.iteration, saved_row(found))
        self.report.message(
            f"Resuming from {found.uri} (iteration {self.iteration}, "
            f"{self.trainer.timesteps:,} timesteps)"
        )
        return found.uri

    def _checkpoint(
        self, saved: int | None, row: dict[str, Any] | None = None
    ) -> tuple[str | None, int | None]:
        """`_save`, marked as in progress for the signal handler; `row` is the iteration's
        progress row when it is not written yet. Returns the newest complete checkpoint and the
        iteration it holds (`saved`, the previous one's, when the save failed)."""
        before = self.checkpoint
        with self.preemption.saving():
            location = self._save(row)
        return location, (self.iteration if location is not None and location != before else saved)
