"""What ES's torch policy (es.py) and its numpy twin (acting.py's ActingESPolicy) share, written
once and without torch: the noise table and the antithetic perturbations drawn from it, the
counting of the observations a worker saw, and the observation standardizer's statistics (which
the exported graph freezes too, trained/export.py)."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kuberl_trainer.envs.spaces import SpaceInfo

NOISE_SEED = 123
"""ES's noise table is the same in every process and every run: only where a perturbation starts
travels."""
STANDARDIZED_CLIP = 5.0
"""Standardized observations are clipped to this many standard deviations either side."""

Seen = tuple[int, np.ndarray, np.ndarray]
"""Observations counted: their count, sum and sum of squares."""


def noise_table(size: int) -> np.ndarray:
    """`size` standard normal float32 numbers, the same for every caller."""
    return np.random.default_rng(NOISE_SEED).standard_normal(size, dtype=np.float32)


def noise_rows(noise: np.ndarray, indices: np.ndarray, dim: int) -> np.ndarray:
    """The perturbations starting at `indices`, one per row: row i is
    noise[indices[i] : indices[i] + dim]."""
    return np.lib.stride_tricks.sliding_window_view(noise, dim)[indices]


def nothing_seen(obs_dim: int) -> Seen:
    """No observation counted yet: count, sum and sum of squares."""
    return 0, np.zeros(obs_dim), np.zeros(obs_dim)


def seen_with(seen: Seen, obs: np.ndarray) -> Seen:
    """The count, sum and sum of squares `seen` with the (K, obs_dim) observations `obs` added."""
    count, total, sumsq = seen
    return count + len(obs), total + obs.sum(0), sumsq + np.square(obs).sum(0)


def standardizer(xp: Any, count: Any, total: Any, sumsq: Any) -> tuple[Any, Any] | None:
    """The standardizer's mean and standard deviation from the count, sum and sum of squares of
    the observations (float64; `xp`: numpy, or torch, whose arrays they are); None before two
    were counted, when observations pass unchanged."""
    if count < 2:
        return None
    mean = total / count
    return mean, xp.sqrt(xp.clip(sumsq / count - mean**2, 1e-8, None))


class PerturbedActing:
    """ES's acting around its forward passes, alike in both policies: the perturbations a worker
    acts with (antithetic pairs from the shared noise table, drawn with the policy's generator:
    every worker has its own seed), and the observations it saw, counted for the
    standardizer."""

    spaces: SpaceInfo
    hp: Any
    rng: np.random.Generator
    num_params: int
    seen: Seen
    """The observations act_perturbed saw since take_observation_stats()."""

    @abstractmethod
    def flat_parameters(self) -> np.ndarray:
        """theta: every parameter in one float32 vector, layer by layer, weight then bias."""

    def draw_noise_indices(self, noise_size: int, count: int) -> np.ndarray:
        """Where `count` perturbations start in a table of `noise_size` numbers."""
        return self.rng.integers(0, noise_size - self.num_params + 1, size=count)

    def perturbed_parameters(self, noise: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """The antithetic pairs, as rows: theta + noise_stdev * eps_i, then theta - noise_stdev *
        eps_i, for each index i in turn."""
        eps = self.hp.noise_stdev * noise_rows(noise, indices, self.num_params)
        theta = self.flat_parameters()
        return np.stack([theta + eps, theta - eps], axis=1).reshape(-1, self.num_params)

    def count_observations(self, obs: np.ndarray) -> None:
        """Count `obs`, which act_perturbed acts on, where the standardizer is in use."""
        if self.hp.normalize_observations:  # the features only: an action mask is no feature
            self.seen = seen_with(self.seen, obs[:, : self.spaces.feature_dim])

    def take_observation_stats(self) -> Seen:
        """The count, sum and sum of squares of the observations act_perturbed saw since the last
        call (what a worker reports for the standardizer)."""
        seen, self.seen = self.seen, nothing_seen(self.spaces.feature_dim)
        return seen
