"""Clocks for the benchmarks that run kuberl through its Driver, the way a job runs.

`IterationClock` is the driver's report: instead of printing, it records after every iteration
the wall clock, the driver process's CPU time, its main thread's CPU time (the driver's loop; the
learner thread and Ray's threads are the rest of the process) and the CPU time the whole machine
has been busy. `IterationClock.window` turns the records after a warm-up into rates.
"""

from __future__ import annotations

import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from rich.console import Console

from kuberl_contract.config import AnyTrainerConfig, RolloutConfig, TrainerConfig
from kuberl_contract.progress_row import EVALUATION_RETURN_MEAN
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.outcome import TrainResult
from kuberl_trainer.job.progress import ConsoleReport

NEVER = 10**9  # a checkpoint cadence no benchmark reaches: saving is not what is measured
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Tick:
    """The clocks at the end of one iteration."""

    iteration: int
    timesteps: int
    episode_return_mean: float | None
    time: float  # time.time(): comparable with clocks read in another process
    wall: float  # time.perf_counter()
    process_cpu: float  # the driver process: main thread, learner thread, Ray's threads
    main_cpu: float  # the main thread alone: the driver's loop and the optimizer's step()
    machine_cpu: float  # every process on the machine, other people's included
    evaluation_return_mean: float | None = None  # the latest greedy evaluation's, if any yet


def machine_busy_seconds() -> float:
    """CPU-seconds all processes on this machine have run so far (Linux's /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user .. steal
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


class IterationClock(ConsoleReport):
    """A quiet driver report that keeps a `Tick` per iteration."""

    def __init__(self, on_tick: Callable[[Tick], None] | None = None) -> None:
        """`on_tick` is called with every new tick (to stream them to another process)."""
        super().__init__("bench", None, Console(file=io.StringIO()))
        self.ticks: list[Tick] = []
        self._on_tick = on_tick

    def update(self, row: dict[str, Any]) -> None:
        # Called by the driver's loop, on its main thread, right after each iteration.
        self.ticks.append(
            Tick(
                row["iteration"],
                row["timesteps_total"],
                row["episode_return_mean"],
                time.time(),
                time.perf_counter(),
                time.process_time(),
                time.thread_time(),
                machine_busy_seconds(),
                row.get(EVALUATION_RETURN_MEAN),
            )
        )
        if self._on_tick is not None:
            self._on_tick(self.ticks[-1])

    def message(self, text: str) -> None:
        pass

    def window(self, warmup: int) -> dict[str, float]:
        """Rates from the end of iteration `warmup` (>= 1, so that start-up, the first weights
        and a replay buffer's learning_starts stay out) to the end of the last iteration. CPU
        rates are in cores: CPU-seconds per second of wall time."""
        if len(self.ticks) <= warmup:
            raise ValueError(f"{len(self.ticks)} iterations ran, fewer than warm-up + 1")
        a, b = self.ticks[warmup - 1], self.ticks[-1]
        seconds = b.wall - a.wall
        steps = b.timesteps - a.timesteps
        return {
            "iterations": b.iteration - a.iteration,
            "steps": steps,
            "seconds": seconds,
            "steps_per_s": steps / seconds,
            "driver_cpu": (b.process_cpu - a.process_cpu) / seconds,
            "main_thread_cpu": (b.main_cpu - a.main_cpu) / seconds,
            "machine_cpu": (b.machine_cpu - a.machine_cpu) / seconds,
            "main_thread_cpu_s": b.main_cpu - a.main_cpu,
            "driver_cpu_s": b.process_cpu - a.process_cpu,
        }


# Throughput benchmarks let Ape-X's learner run free: its default training_intensity ties
# sampling to the learner, so env steps/s would measure the learner, not the workers.
FREE_RUNNING: dict[str, dict[str, Any]] = {"APEX": {"training_intensity": None}}


def trainer_config(**fields: Any) -> AnyTrainerConfig:
    """`spec.trainer` from manifest-style keys, validated as `kuberl validate` would; checkpoints
    only at the end."""
    document = {"checkpoint": {"everyIterations": NEVER}, **fields}
    return TypeAdapter(TrainerConfig).validate_python(document)


def run_driver(
    config: AnyTrainerConfig, rollout: RolloutConfig, clock: IterationClock
) -> TrainResult:
    """One training run in a fresh run directory (so nothing resumes). Ray: the instance the
    caller started, if any (the driver then leaves it running), else a private one."""
    with tempfile.TemporaryDirectory() as run_dir:
        return Driver(config, rollout, Path(run_dir), "bench", report=clock).run()


def save_results(name: str, meta: dict[str, Any], result: dict[str, Any]) -> Path:
    """`result` with `meta` (the run's settings, completed here with the load average now, the
    CPUs, the versions and the command line) as bench/results/NAME-TIMESTAMP.json."""
    import ray
    import torch

    meta = meta | {
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "argv": sys.argv[1:],
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"meta": meta, **result}, indent=2))
    return path
