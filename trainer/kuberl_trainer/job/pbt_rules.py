"""Population-based training's rules, pure functions of the trials' rows and a random generator:
which trial is best (`best_of`), which trials exploit which (`exploit_pairs`) and how a trial
explores (`explore`). population.py applies them to trials in Ray actors; trained/inference.py
ranks a checkpoint's trials with `best_of` to load the best one's policy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kuberl_contract.hyperparameters import Mutation
from kuberl_contract.progress_row import EPISODE_RETURN_MEAN


def best_of(rows: list[dict[str, Any]]) -> int:
    """The index of the best trial, by their newest rows (ties: the first)."""
    return int(np.argmax([score(row) for row in rows]))


def score(row: dict[str, Any]) -> float:
    """What trials are ranked by: the mean return of their recent episodes (-inf before any)."""
    value = row.get(EPISODE_RETURN_MEAN)
    return value if value is not None and math.isfinite(value) else -math.inf


def exploit_pairs(
    scores: list[float], quantile_fraction: float, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """(trial, donor) for every trial of the bottom quantile, its donor drawn from the top
    quantile, as Ray Tune's PBT ranks them: the quantile is the population's fraction rounded up,
    at most half of it. A trial no worse than its donor keeps its own."""
    count = min(math.ceil(len(scores) * quantile_fraction), len(scores) // 2)
    order = sorted(range(len(scores)), key=lambda index: scores[index])
    bottom, top = order[:count], order[len(order) - count :]
    pairs = []
    for trial in bottom:
        donor = int(rng.choice(top))
        if scores[donor] > scores[trial]:
            pairs.append((trial, donor))
    return pairs


def explore(
    values: dict[str, Any],
    mutations: dict[str, Mutation],
    factors: list[float],
    resample_probability: float,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """New values of the mutated hyperparameters (see Mutation): each resampled with
    `resample_probability`, else perturbed. Integers stay integers."""
    explored = {}
    for name, mutation in mutations.items():
        value = values[name]
        resample = rng.random() < resample_probability
        if mutation.values is not None:
            choices = mutation.values
            if resample or value not in choices:
                new = choices[int(rng.integers(len(choices)))]
            else:
                index = choices.index(value) + int(rng.choice([-1, 1]))
                new = choices[min(max(index, 0), len(choices) - 1)]
        else:
            low, high = mutation.min, mutation.max
            if resample and mutation.log:
                new = math.exp(rng.uniform(math.log(low), math.log(high)))
            elif resample:
                new = rng.uniform(low, high)
            else:
                new = min(max(value * float(rng.choice(factors)), low), high)
            if isinstance(value, int) and not isinstance(value, bool):
                new = round(new)
        explored[name] = new
    return explored
