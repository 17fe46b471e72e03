"""status.progress from a progress row: the one way every backend turns what the driver reported
into the job's progress, so that a job reads alike wherever it runs. The operator's rows come from
the driver's metrics while it runs and from its final record once it has ended; the API's local
backend's from the newest line of the trainer's progress.jsonl (and its final record)."""

from __future__ import annotations

from typing import Any

from kuberl_contract.json_values import finite_or_none
from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
)
from kuberl_operator.spec import Progress
from kuberl_operator.status.observed import ObservedProgress


def progress_from_row(current: Progress, observed: ObservedProgress) -> Progress:
    """The progress once the row `observed` is taken in, after `current`.

    A figure the row does not carry keeps its last value (a final record has no throughput: the
    last iteration's stays), and so does the evaluation when the row has none (the latest greedy
    evaluation still stands). A figure that is not a finite number is unknown (null), and so is a
    negative rate: a rate that is not a rate says nothing."""
    row = observed.row
    samples = _figure(row, SAMPLES_PER_S, current.samples_per_second)
    evaluation = row.get(EVALUATION_RETURN_MEAN)
    return Progress(
        iteration=_count(row, ITERATION, current.iteration),
        timesteps=_count(row, TIMESTEPS_TOTAL, current.timesteps),
        episode_return_mean=_figure(row, EPISODE_RETURN_MEAN, current.episode_return_mean),
        evaluation_return_mean=(
            current.evaluation_return_mean if evaluation is None else finite_or_none(evaluation)
        ),
        last_checkpoint=observed.last_checkpoint or current.last_checkpoint,
        exported_policy=observed.exported_policy or current.exported_policy,
        last_update_time=observed.time,
        samples_per_second=samples if samples is not None and samples >= 0 else None,
    )


def _count(row: dict[str, Any], key: str, last: int) -> int:
    """A count the row carries (a null one says nothing new), else its last value."""
    value = row.get(key)
    return last if value is None else int(value)


def _figure(row: dict[str, Any], key: str, last: float | None) -> float | None:
    """A figure the row carries, null included (none yet, as before the first episode), else its
    last value."""
    return finite_or_none(row[key]) if key in row else last
