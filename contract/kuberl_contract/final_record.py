"""How `kuberl train` ends: its exit codes, and the final record, one JSON line on stdout prefixed
FINAL_RECORD_PREFIX that it prints as it exits, so the operator (through the Ray Jobs API's log of
the driver) and the API (through the trainer's log) learn how a driver ended without parsing its
human summary. Standard library only, like progress_row."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from kuberl_contract.json_values import finite_or_none
from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
)

EXIT_SUCCEEDED = 0
"""A stop condition was met."""
EXIT_FAILED = 1
"""Training failed in a way a retry may not repeat (a crash, a lost learner thread); the job is
restarted with backoff."""
EXIT_NO_FILE = 2
"""The manifest file is missing."""
EXIT_INVALID_JOB = 65
"""The job is invalid and retrying cannot help: a spec problem only the driver finds (an unknown
env id, an unsupported action or observation space, an algorithm the env's spaces do not suit, a
resource request larger than the Ray cluster will ever offer), or a manifest the trainer refuses.
The operator fails such a job at once with reason InvalidSpec. (sysexits.h's EX_DATAERR.)"""
EXIT_SIGNAL_BASE = 128
"""Interrupted by signal N, after checkpointing: the status is 128 + N, as shells report it."""


class Outcome(StrEnum):
    """How a driver ended, as its final record says."""

    STOPPED = "Stopped"  # a stop condition was met
    INTERRUPTED = "Interrupted"  # a signal; checkpointed first
    INVALID_JOB = "InvalidJob"  # see EXIT_INVALID_JOB
    FAILED = "Failed"  # see EXIT_FAILED


FINAL_RECORD_PREFIX = "kuberl-final-record "
"""What the final record's line starts with; the rest of the line is its JSON."""


@dataclass(frozen=True)
class FinalRecord:
    """The last thing `kuberl train` prints: how it ended and where training stood. The figures
    are None when the driver ended before training (an invalid job)."""

    outcome: Outcome
    exit_code: int
    message: str
    """Why it ended, for people: the stop condition met, the signal, or the error."""
    time: float
    """Unix time it was written."""
    iteration: int | None = None
    timesteps_total: int | None = None
    episode_return_mean: float | None = None
    evaluation_return_mean: float | None = None
    time_total_s: float | None = None
    checkpoint: str | None = None
    """Full location (path or URI) of the newest complete checkpoint; None when there is none."""
    policy: str | None = None
    """Full location of the greedy policy exported when a stop condition ended the job (ONNX,
    beside the checkpoints); None otherwise."""
    cpu_hours: float | None = None
    """CPUs the run held (the driver's one and its rollout workers') times its training hours
    (LocalCost); None when it ended before training."""
    gpu_hours: float | None = None
    """The learner's GPUs times the training hours."""
    dollars: float | None = None
    """What those hours cost at the prices `kuberl train` was given (--cpu-price, --gpu-price);
    None without a price."""

    def line(self) -> str:
        """The record as printed: the prefix and one line of strict JSON (NaN becomes null)."""
        values = {key: finite_or_none(value) for key, value in asdict(self).items()}
        return FINAL_RECORD_PREFIX + json.dumps(values, allow_nan=False, separators=(",", ":"))

    def row(self) -> dict[str, Any]:
        """The figures in progress-row keys, those that are known (NaN is not)."""
        figures = {
            ITERATION: self.iteration,
            TIMESTEPS_TOTAL: self.timesteps_total,
            EPISODE_RETURN_MEAN: self.episode_return_mean,
            EVALUATION_RETURN_MEAN: self.evaluation_return_mean,
            TIME_TOTAL_S: self.time_total_s,
        }
        return {key: value for key, value in figures.items() if finite_or_none(value) is not None}


def read_final_record(text: str) -> FinalRecord | None:
    """The last well-formed final record in a driver's output, or None when there is none (the
    driver still runs, was killed, or crashed before printing one)."""
    for line in reversed(text.splitlines()):
        start = line.find(FINAL_RECORD_PREFIX)
        if start < 0:
            continue
        try:
            return _record(json.loads(line[start + len(FINAL_RECORD_PREFIX) :]))
        except (ValueError, TypeError, KeyError):
            continue  # cut short or garbled: an earlier whole one is better than none
    return None


def _record(values: dict[str, Any]) -> FinalRecord:
    def number(key: str, kind: type) -> Any:
        value = values.get(key)
        return None if value is None else kind(value)

    return FinalRecord(
        outcome=Outcome(values["outcome"]),
        exit_code=int(values["exit_code"]),
        message=str(values.get("message") or ""),
        time=float(values["time"]),
        iteration=number("iteration", int),
        timesteps_total=number("timesteps_total", int),
        episode_return_mean=number("episode_return_mean", float),
        evaluation_return_mean=number("evaluation_return_mean", float),
        time_total_s=number("time_total_s", float),
        checkpoint=values.get("checkpoint") or None,
        policy=values.get("policy") or None,
        cpu_hours=number("cpu_hours", float),
        gpu_hours=number("gpu_hours", float),
        dollars=number("dollars", float),
    )
