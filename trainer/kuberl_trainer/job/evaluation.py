"""The driver's greedy evaluation (spec.trainer.evaluation), and the confirmation that a stop on
evaluation return (stop.evaluationReturnMean) rests on: a mean of a few episodes is noisy, so an
evaluation that reaches the target is played again on many fresh episodes before training stops.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

EVALUATION_SEED_STRIDE = 1_000_003
"""An iteration's evaluation episodes start from seeds of their own: the run's seed plus this many
per iteration, more than an evaluation and its confirmation play (1,000 each at most)."""


def greedy_evaluation(
    worker: Any, config: Any, seed: int, iteration: int
) -> tuple[float, bool | None]:
    """The mean return of the iteration's greedy evaluation on `worker` (the driver's local
    rollout worker), and whether it held on confirmation (None when none was played). One that
    reaches stop.evaluationReturnMean is confirmed on evaluation.confirm_episodes more, whose mean
    it becomes (see `holds`). Each iteration's episodes start from seeds of their own, never those
    of another evaluation (nor the first seeds `kuberl evaluate` plays), and the same ones when a
    run is replayed or resumed."""
    evaluation, target = config.evaluation, config.stop.evaluation_return_mean
    start = seed + EVALUATION_SEED_STRIDE * iteration
    mean = worker.evaluate(evaluation.episodes, start)
    if target is None or mean < target or not evaluation.confirm_episodes:
        return mean, None
    returns, _ = worker.evaluation_episodes(
        evaluation.confirm_episodes, start + evaluation.episodes
    )
    held = holds(returns, target)
    log.info(
        "evaluation: %.1f on %d episodes reached the target %g; %.1f ± %.1f (standard error) on "
        "%d fresh ones: %s",
        mean,
        evaluation.episodes,
        target,
        returns.mean(),
        standard_error(returns),
        len(returns),
        "confirmed" if held else "not confirmed, training goes on",
    )
    return float(returns.mean()), held


def holds(returns: np.ndarray, target: float) -> bool:
    """Whether the returns' mean less its standard error reaches `target`: a policy whose mean is
    just below it rarely passes on a lucky draw, one well above it always does."""
    return float(returns.mean()) - standard_error(returns) >= target


def standard_error(returns: np.ndarray) -> float:
    """The standard error of the returns' mean (0 for one return)."""
    if len(returns) < 2:
        return 0.0
    return float(returns.std(ddof=1)) / math.sqrt(len(returns))
