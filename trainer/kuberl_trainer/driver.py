"""The driver: builds workers, policy and optimizer from the config, loops `optimizer.step()`,
reports progress and metrics, checkpoints, and resumes from the newest checkpoint at start."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kuberl_trainer import algorithms
from kuberl_trainer.capacity import capacity_from_env
from kuberl_trainer.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    checkpoint_location,
)
from kuberl_trainer.config import AnyTrainerConfig, RolloutConfig, StopConditions
from kuberl_trainer.interrupt import IterationAbandoned, StopRequest
from kuberl_trainer.metrics import TrainerMetrics
from kuberl_trainer.progress import ConsoleReport, ProgressLog
from kuberl_trainer.progress_row import (
    CHECKPOINT,
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    PROGRESS_FILE,
    SAMPLES_PER_S,
    STRAGGLERS_DROPPED,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    WORKER_DOWNTIME_S,
    WORKERS_READY,
)
from kuberl_trainer.resource_wait import await_resources, job_requests
from kuberl_trainer.rollout_worker import RolloutWorker
from kuberl_trainer.tensorboard import TensorBoardLog
from kuberl_trainer.worker_set import WorkerSet

log = logging.getLogger(__name__)

# Small MLPs train fastest on one thread; more threads only add synchronisation overhead, and on
# a shared node they steal cores from the rollout workers.
LEARNER_TORCH_THREADS = 1


@dataclass(frozen=True)
class TrainResult:
    stopped_by: str  # the stop condition met, or the signal's name when interrupted
    interrupted: bool
    iteration: int
    timesteps: int
    episode_return_mean: float
    evaluation_return_mean: float | None
    time_total_s: float
    checkpoint: str | None  # the newest complete checkpoint: an absolute path or a URI
    resumed_from: str | None
    run_dir: Path


def stop_reason(stop: StopConditions, row: dict[str, Any]) -> str | None:
    """The first stop condition the iteration's row meets, as `name>=target`, or None."""
    checks = (
        ("timesteps", stop.timesteps, row[TIMESTEPS_TOTAL]),
        ("iterations", stop.iterations, row[ITERATION]),
        ("episodeReturnMean", stop.episode_return_mean, row[EPISODE_RETURN_MEAN]),
        ("evaluationReturnMean", stop.evaluation_return_mean, row.get(EVALUATION_RETURN_MEAN)),
        ("wallTimeSeconds", stop.wall_time_seconds, row[TIME_TOTAL_S]),
    )
    for name, target, value in checks:
        if target is not None and value is not None and math.isfinite(value) and value >= target:
            return f"{name}>={target:g}"
    return None


def learner_devices(gpus: int, cuda_count: int) -> tuple[list[str], str | None]:
    """Where the learner trains: one device per learner GPU (one CPU without GPUs), and a
    warning where fewer CUDA devices are visible than the job asked for. The count never depends
    on the machine, so LocalMultiGPU splits its minibatches alike everywhere: without CUDA each
    GPU becomes a CPU device, and too few GPUs are shared."""
    if gpus < 1:
        return ["cpu"], None
    if cuda_count < 1:
        warning = f"learner.gpus={gpus} but no CUDA device is visible: learning on the CPU"
        return ["cpu"] * gpus, warning
    devices = [f"cuda:{index % cuda_count}" for index in range(gpus)]
    if cuda_count < gpus:
        visible = f"{cuda_count} CUDA device{'s are' if cuda_count > 1 else ' is'} visible"
        return devices, f"learner.gpus={gpus} but {visible}: its {gpus} devices share them"
    return devices, None


class Driver:
    def __init__(
        self,
        config: AnyTrainerConfig,
        rollout: RolloutConfig,
        run_dir: Path,
        job_name: str,
        namespace: str = "local",
        metrics_port: int | None = None,
        report: ConsoleReport | None = None,
        learner_gpus: int = 0,
    ):
        self.config = config
        self.rollout = rollout
        self.learner_gpus = learner_gpus
        self.run_dir = run_dir
        self.job_name = job_name
        self.seed = (
            config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        )
        self.store = CheckpointStore(
            checkpoint_location(config.checkpoint.uri, run_dir), config.checkpoint.keep
        )
        self.checkpoint: str | None = None  # the newest complete checkpoint's location
        self.metrics = TrainerMetrics(namespace, job_name, config.algorithm)
        self.metrics_port = metrics_port
        self.report = report or ConsoleReport(
            f"{job_name} {config.algorithm} {config.env}", config.stop.timesteps
        )
        window = config.metrics_window
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.iteration = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.evaluation_return_mean: float | None = None
        self._signal: int | None = None
        self._signal_time = 0.0  # time.monotonic() when the first signal came
        self._stop_request = StopRequest()  # what the signal asks of the iteration in progress
        self._saving = False  # a checkpoint is being written: a second signal lets it finish
        self._started_ray = False
        self._tensorboard: TensorBoardLog | None = None

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> TrainResult:
        torch.set_num_threads(LEARNER_TORCH_THREADS)
        self._seed_everything()
        previous_handlers = self._install_signal_handlers()
        workers = optimizer = progress = None
        try:
            if self.metrics_port is not None:  # before any wait for Ray nodes, which it reports
                self.metrics.serve(self.metrics_port)
            # Found first: another job's checkpoints fail the job before Ray starts, and a resumed
            # run's workers are seeded anew (their envs must not replay the first run's episodes).
            found = self.store.latest({"algorithm": self.config.algorithm, "env": self.config.env})
            if self.rollout.replicas:
                self._start_ray()
                # Joining Ray installs the core worker's SIGTERM handler (a stack trace, then an
                # abort): ours again, or a preempted driver would die without its checkpoint.
                self._install_signal_handlers()
                self._await_resources()
            workers = self._make_workers(resumed_iteration=found.meta["iteration"] if found else 0)
            workers.stop_request = self._stop_request
            devices, warning = learner_devices(self.learner_gpus, torch.cuda.device_count())
            if warning:
                log.warning(warning)
            optimizer = algorithms.optimizer_class(self.config)(workers, self.config)
            optimizer.place(devices)  # the local worker's policy is the learner
            resumed_from = self._resume(optimizer, found) if found else None
            # Opened after resuming, which may truncate the file to the checkpoint's iteration.
            progress = ProgressLog(self.run_dir / PROGRESS_FILE)
            if self.config.tensorboard:
                purge = optimizer.counters.steps_sampled + 1 if resumed_from else None
                self._tensorboard = TensorBoardLog(self.run_dir, purge_step=purge)
            checkpoint, stopped_by = resumed_from, None
            saved = self.iteration if resumed_from is not None else None  # newest checkpoint's
            if resumed_from is not None:  # a finished job run again has nothing left to do
                stopped_by = stop_reason(self.config.stop, self._totals(optimizer))
                if stopped_by:
                    self.report.message(f"Already stopped at {stopped_by}: nothing to train")
            while stopped_by is None and self._signal is None:
                try:
                    row, timer_deltas, restarts = self._iterate(optimizer)
                except IterationAbandoned:  # preempted: the grace period is for the checkpoint
                    self.report.message(
                        f"Iteration {self.iteration + 1} dropped unfinished; checkpointing "
                        f"iteration {self.iteration}"
                    )
                    break
                progress.write(row)
                if self._tensorboard is not None:
                    self._tensorboard.write(row)
                self.report.update(row)
                self.metrics.record(row, timer_deltas, restarts)
                stopped_by = stop_reason(self.config.stop, row)
                if stopped_by or self.iteration % self.config.checkpoint.every_iterations == 0:
                    checkpoint, saved = self._checkpoint(optimizer, saved)
            # A signal after the stop condition was met interrupts nothing: the job is done.
            interrupted = self._signal is not None and stopped_by is None
            if interrupted:
                if saved != self.iteration:  # else nothing was trained since that checkpoint
                    checkpoint, saved = self._checkpoint(optimizer, saved)
                self._report_preemption(saved)
                stopped_by = signal.Signals(self._signal).name
            return TrainResult(
                stopped_by=stopped_by,
                interrupted=interrupted,
                iteration=self.iteration,
                timesteps=optimizer.counters.steps_sampled,
                episode_return_mean=_mean(self.recent_returns),
                evaluation_return_mean=self.evaluation_return_mean,
                time_total_s=self.time_total_s,
                checkpoint=checkpoint,
                resumed_from=resumed_from,
                run_dir=self.run_dir,
            )
        finally:
            if progress is not None:
                progress.close()
            if self._tensorboard is not None:
                self._tensorboard.close()
            self.report.close()
            if optimizer is not None:
                optimizer.stop()
            if workers is not None:
                workers.stop()
            if self._started_ray:
                import ray

                ray.shutdown()
            self._restore_signal_handlers(previous_handlers)

    def _iterate(self, optimizer) -> tuple[dict[str, Any], dict[str, float], int]:
        timers_before = dict(optimizer.counters.timers)
        restarts_before = optimizer.workers.restarts
        start = time.perf_counter()
        result = optimizer.step()
        self.iteration += 1
        self.recent_returns.extend(result.episode_returns.tolist())
        self.recent_lengths.extend(result.episode_lengths.tolist())
        self.episodes_total += len(result.episode_returns)
        evaluation = self.config.evaluation
        evaluated = (
            evaluation.every_iterations and self.iteration % evaluation.every_iterations == 0
        )
        if evaluated:
            with optimizer.policy_lock:
                self.evaluation_return_mean = optimizer.workers.local_worker.evaluate(
                    evaluation.episodes
                )
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        row = {
            **self._totals(optimizer),
            "timesteps_this_iter": result.steps_sampled,
            "timesteps_trained_this_iter": result.steps_trained,
            "episodes_total": self.episodes_total,
            "episodes_this_iter": len(result.episode_returns),
            "episode_return_max": max(self.recent_returns, default=math.nan),
            "episode_return_min": min(self.recent_returns, default=math.nan),
            "episode_len_mean": _mean(self.recent_lengths),
            SAMPLES_PER_S: result.steps_sampled / elapsed,
            "time_this_iter_s": elapsed,
            "worker_restarts": optimizer.workers.restarts,
            STRAGGLERS_DROPPED: optimizer.workers.stragglers_dropped,
            WORKER_DOWNTIME_S: optimizer.workers.downtime_s,
            WORKERS_READY: optimizer.workers.num_ready,
            CHECKPOINT: self.checkpoint,
            **result.learner_stats,
        }
        timer_deltas = {
            name: seconds - timers_before.get(name, 0.0)
            for name, seconds in optimizer.counters.timers.items()
        }
        return row, timer_deltas, optimizer.workers.restarts - restarts_before

    def _totals(self, optimizer) -> dict[str, Any]:
        """The cumulative part of a progress row: what stop conditions are checked against."""
        return {
            ITERATION: self.iteration,
            TIMESTEPS_TOTAL: optimizer.counters.steps_sampled,
            EPISODE_RETURN_MEAN: _mean(self.recent_returns),
            EVALUATION_RETURN_MEAN: self.evaluation_return_mean,
            TIME_TOTAL_S: self.time_total_s,
        }

    # -- building -----------------------------------------------------------------------------

    def _make_workers(self, resumed_iteration: int) -> WorkerSet:
        policy_class = algorithms.policy_class(self.config)
        starts: Counter[int] = Counter()  # of each worker slot in this run

        def worker_kwargs(index: int) -> dict[str, Any]:
            seed = worker_seed(self.seed, index, resumed_iteration, starts[index])
            starts[index] += 1
            return {
                "policy_class": policy_class,
                "config": self.config,
                "num_envs": self.rollout.envs_per_worker,
                "seed": seed,
                "worker_index": index,
                "num_workers": self.rollout.replicas,
            }

        return WorkerSet(
            RolloutWorker,
            worker_kwargs,
            self.rollout.replicas,
            self.rollout.cpus_per_worker,
            self.rollout.ray_resources,
        )

    def _start_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        address = os.environ.get("RAY_ADDRESS")
        if address:  # inside a Ray cluster (the operator sets it): join it
            ray.init(address=address, log_to_driver=True)
        else:  # a private local instance, ended with this run; never someone else's
            ray.init(address="local", include_dashboard=False, log_to_driver=False)
        self._started_ray = True

    def _await_resources(self) -> None:
        """Wait for the Ray nodes the job's actors need, or fail: never possible (an invalid
        job) or not joined in time (resource_wait)."""
        await_resources(
            job_requests(self.config, self.rollout),
            capacity_from_env(os.environ),
            private_ray=self._started_ray and not os.environ.get("RAY_ADDRESS"),
            waited=self.metrics.waiting_for_resources,
            interrupted=lambda: self._signal is not None,
        )

    def _seed_everything(self) -> None:
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        torch.manual_seed(self.seed)

    # -- checkpoints --------------------------------------------------------------------------

    def _meta(self, optimizer) -> dict[str, Any]:
        return {
            "algorithm": self.config.algorithm,
            "env": self.config.env,
            "iteration": self.iteration,
            "timesteps": optimizer.counters.steps_sampled,
            "created": time.time(),
            "config": self.config.model_dump(mode="json", by_alias=True),
        }

    def _save(self, optimizer) -> str | None:
        """Checkpoint; returns the newest complete checkpoint. When the store fails (full,
        unreachable, denied) training goes on: the failure is logged and counted, the previous
        checkpoints stay as they were, and the next save tries again."""
        with optimizer.policy_lock:
            policy_state, optimizer_state = optimizer.policy.get_state(), optimizer.save()
        state = {
            "policy": policy_state,
            "optimizer": optimizer_state,
            "driver": {
                "iteration": self.iteration,
                "episodes_total": self.episodes_total,
                "time_total_s": self.time_total_s,
                "recent_returns": list(self.recent_returns),
                "recent_lengths": list(self.recent_lengths),
                "evaluation_return_mean": self.evaluation_return_mean,
                "seed": self.seed,
                "rng": {
                    "python": random.getstate(),
                    "numpy": np.random.get_state(legacy=False),  # a dict: plain data
                    "torch": torch.get_rng_state(),
                },
            },
        }
        try:
            self.checkpoint = self.store.save(self.iteration, state, self._meta(optimizer))
        except CheckpointError as exc:
            self.metrics.checkpoint_failed()
            log.error("checkpoint failed, training goes on: %s", exc)
            return self.checkpoint
        if self._tensorboard is not None:  # the events up to a checkpoint are on disk with it
            self._tensorboard.flush()
        self.metrics.checkpointed(time.time(), self.checkpoint)
        return self.checkpoint

    def _resume(self, optimizer, found: Checkpoint) -> str:
        optimizer.policy.set_state(found.state["policy"])
        optimizer.restore(found.state["optimizer"])
        driver = found.state["driver"]
        self.iteration = driver["iteration"]
        self.episodes_total = driver["episodes_total"]
        self.time_total_s = driver["time_total_s"]
        self.recent_returns.extend(driver["recent_returns"])
        self.recent_lengths.extend(driver["recent_lengths"])
        self.evaluation_return_mean = driver["evaluation_return_mean"]
        random.setstate(driver["rng"]["python"])
        np.random.set_state(driver["rng"]["numpy"])
        torch.set_rng_state(driver["rng"]["torch"])
        self.checkpoint = found.uri
        self.metrics.checkpointed(found.meta["created"], found.uri)
        self.metrics.position(self.iteration, optimizer.counters.steps_sampled)
        _truncate_progress(self.run_dir / PROGRESS_FILE, self.iteration)
        self.report.message(
            f"Resuming from {found.uri} (iteration {self.iteration}, "
            f"{optimizer.counters.steps_sampled:,} timesteps)"
        )
        return found.uri

    # -- signals ------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame) -> None:
        """SIGTERM or SIGINT: checkpoint within the grace period and stop. The iteration in
        progress stops at its next safe point (see interrupt.py), raising IterationAbandoned from
        here when the driver is sampling in Python. A second signal stops at once, without a
        checkpoint, unless one is being written and the grace period has not run out: then that
        checkpoint is finished first, so none is left half-written."""
        name = signal.Signals(signum).name
        grace = self.config.checkpoint.grace_period_seconds
        if self._signal is None:
            self._signal, self._signal_time = signum, time.monotonic()
            self.report.message(
                f"{name} received: checkpointing within {grace} s (an unfinished iteration is "
                "dropped at its next wait for samples)"
            )
            self._stop_request.request()
            return
        if self._saving and time.monotonic() - self._signal_time < grace:
            self.report.message(f"{name} received again: finishing the checkpoint being written")
            return
        raise KeyboardInterrupt

    def _checkpoint(self, optimizer, saved: int | None) -> tuple[str | None, int | None]:
        """`_save`, marked as in progress for the signal handler. Returns the newest complete
        checkpoint and the iteration it holds (`saved`, the previous one's, when the save
        failed)."""
        before = self.checkpoint
        self._saving = True
        try:
            location = self._save(optimizer)
        finally:
            self._saving = False
        return location, (self.iteration if location is not None and location != before else saved)

    def _report_preemption(self, saved: int | None) -> None:
        """How long the checkpoint after a signal took, against the grace period."""
        name = signal.Signals(self._signal).name
        took = time.monotonic() - self._signal_time
        grace = self.config.checkpoint.grace_period_seconds
        if saved == self.iteration:
            self.report.message(
                f"Checkpoint of iteration {saved} complete {took:.1f} s after {name} "
                f"(grace period {grace} s)"
            )
        if took > grace:
            log.warning(
                "stopping took %.1f s after %s, longer than "
                "spec.trainer.checkpoint.gracePeriodSeconds=%d: a preempted pod would have been "
                "killed first; raise it so that a learning step and a checkpoint fit in it",
                took,
                name,
                grace,
            )

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def worker_seed(seed: int, index: int, resumed_iteration: int, start: int) -> int:
    """The seed of rollout worker `index` (0: the local one) on its `start`-th start in a run that
    resumed at `resumed_iteration` (0: a new run). Seeds lie far apart per worker, so that workers
    never replay each other's episodes; a worker started again (replacing a lost one, or in a
    resumed run) gets a seed of its own, so that its envs do not replay the episodes of the first
    start."""
    if resumed_iteration == 0 and start == 0:
        return seed + 10_007 * index
    mixed = np.random.SeedSequence([seed, index, resumed_iteration, start]).generate_state(1)
    return int(mixed[0])


def _truncate_progress(path: Path, iteration: int) -> None:
    """Drop rows of iterations after the checkpoint: that training was lost and is redone."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = [line for line in lines if line and json.loads(line)[ITERATION] <= iteration]
    if len(kept) != len(lines):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
