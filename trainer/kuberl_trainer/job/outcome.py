"""How a job's run ends: the stop condition an iteration's progress row meets (spec.trainer.stop),
and what the driver hands back when the run is over (TrainResult)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kuberl_contract.config import StopConditions
from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_CONFIRMED,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
)


@dataclass(frozen=True)
class TrainResult:
    """What a run ended with: where it stopped and why, its totals and its checkpoint."""

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
    policy: str | None = None  # the greedy policy exported when a stop condition ended the job


def confirmed_evaluation(row: dict[str, Any]) -> float | None:
    """The row's evaluation return, unless its confirmation failed (EVALUATION_CONFIRMED)."""
    return None if row.get(EVALUATION_CONFIRMED) is False else row.get(EVALUATION_RETURN_MEAN)


def stop_reason(stop: StopConditions, row: dict[str, Any]) -> str | None:
    """The first stop condition the iteration's row meets, as `name>=target`, or None."""
    checks = (
        ("timesteps", stop.timesteps, row[TIMESTEPS_TOTAL]),
        ("iterations", stop.iterations, row[ITERATION]),
        ("episodeReturnMean", stop.episode_return_mean, row[EPISODE_RETURN_MEAN]),
        ("evaluationReturnMean", stop.evaluation_return_mean, confirmed_evaluation(row)),
        ("wallTimeSeconds", stop.wall_time_seconds, row[TIME_TOTAL_S]),
    )
    for name, target, value in checks:
        if target is not None and value is not None and math.isfinite(value) and value >= target:
            return f"{name}>={target:g}"
    return None
