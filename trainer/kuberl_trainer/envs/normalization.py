"""Observation normalization and reward scaling (`spec.trainer.normalization`), with
Stable-Baselines3 VecNormalize's formulas and RLlib's MeanStdFilter's way of keeping one filter
for many rollout workers.

- `RunningMeanStd`: the count, mean and M2 (sum of squared deviations) of a stream of values;
  two of them merge exactly, whatever order the values came in (Chan, Golub and LeVeque's
  parallel algorithm), so the statistics of every worker's samples merged are those of one
  stream of them all.
- `NormalizationStats`: the statistics of observations and of discounted returns, together.
- `Normalizer`: a rollout worker's filter. It normalizes with the global statistics it last
  received (`stats`) and accumulates what it samples meanwhile (`delta`), which it hands over
  with each batch (`hand_over`). The driver's WorkerSet merges every worker's delta into the
  global statistics and sends them to the workers with the weights, so every worker acts with the
  same filter between two syncs, and nothing of its own.

ES standardizes its observations itself, inside its policy (policy/es.py: sums of the
observations in the network's state dict, which travel with its parameters); this is for the
algorithms that learn from samples, whose filter belongs to the rollout worker, not the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.problems import NORMALIZED_OBSERVATIONS, observation_normalization_problem
from kuberl_trainer.envs.spaces import SpaceInfo

if TYPE_CHECKING:
    from kuberl_contract.config import NormalizationConfig

DEFAULT_GAMMA = 0.99  # VecNormalize's, for an algorithm without a discount of its own


class RunningMeanStd:
    """Count, mean and M2 of the rows seen (float64); the variance is M2 / count (the population
    variance, as VecNormalize's), 1 before any row, so that the first normalization divides by
    one."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.count = 0.0
        self.mean = np.zeros(shape, dtype=np.float64)
        self.m2 = np.zeros(shape, dtype=np.float64)

    @property
    def var(self) -> np.ndarray:
        if self.count <= 0:
            return np.ones_like(self.mean)
        return self.m2 / self.count

    def update(self, rows: np.ndarray) -> None:
        """Add the rows of `rows` (its first axis)."""
        if len(rows) == 0:
            return
        rows = np.asarray(rows, dtype=np.float64)
        batch = RunningMeanStd(self.mean.shape)
        batch.count = float(len(rows))
        batch.mean = rows.mean(axis=0)
        batch.m2 = np.square(rows - batch.mean).sum(axis=0)
        self.merge(batch)

    def merge(self, other: RunningMeanStd) -> None:
        """Add the rows `other` has seen (Chan et al.'s pairwise update, exact)."""
        if other.count <= 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + np.square(delta) * (self.count * other.count / total)
        self.count = total

    def state(self) -> dict[str, Any]:
        """Plain data: a float and two arrays (what a checkpoint and Ray's object store carry)."""
        return {"count": self.count, "mean": self.mean.copy(), "m2": self.m2.copy()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunningMeanStd:
        stats = cls()
        stats.count = float(state["count"])
        stats.mean = np.array(state["mean"], dtype=np.float64)
        stats.m2 = np.array(state["m2"], dtype=np.float64)
        return stats


@dataclass
class NormalizationStats:
    """The statistics normalization needs: of observations (one per observation feature) and of
    each env's discounted return (a scalar)."""

    obs: RunningMeanStd
    returns: RunningMeanStd = field(default_factory=RunningMeanStd)

    @classmethod
    def empty(cls, obs_dim: int) -> NormalizationStats:
        return cls(RunningMeanStd((obs_dim,)))

    def merge(self, other: NormalizationStats | dict[str, Any]) -> None:
        """Add what `other` (statistics, or their `state()`) has seen."""
        if isinstance(other, dict):
            other = NormalizationStats.from_state(other)
        self.obs.merge(other.obs)
        self.returns.merge(other.returns)

    def state(self) -> dict[str, Any]:
        return {"obs": self.obs.state(), "returns": self.returns.state()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NormalizationStats:
        return cls(
            RunningMeanStd.from_state(state["obs"]), RunningMeanStd.from_state(state["returns"])
        )


class Normalizer:
    """A rollout worker's filter (see the module's docstring): normalizes observations and scales
    rewards with `stats`, the global statistics last received, and accumulates the statistics of
    what it samples in `delta`. With normalization off it passes everything through and keeps no
    statistics.

    The driver's local worker holds the global statistics themselves (the WorkerSet sets
    `keeps_global`): what it samples is merged into them at once, and the WorkerSet merges the
    remote workers' deltas into them.

    `obs_dim` counts the features only: an observation's columns after them (`kept`, an action
    mask's) are neither counted nor normalized, and pass as they are."""

    def __init__(
        self,
        config: NormalizationConfig,
        obs_dim: int,
        num_envs: int,
        gamma: float,
        keeps_global: bool = False,
        kept: int = 0,
    ):
        self.config = config
        self.features = obs_dim
        self.kept = kept
        self.gamma = gamma
        self.keeps_global = keeps_global
        self.stats = NormalizationStats.empty(obs_dim)
        self.delta = NormalizationStats.empty(obs_dim)
        self.discounted_returns = np.zeros(num_envs, dtype=np.float64)  # VecNormalize's `returns`

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def observe(self, obs: np.ndarray) -> None:
        """Count observations the envs returned (a (N, obs_dim) batch)."""
        if self.config.observations:
            self.delta.obs.update(obs[:, : self.features] if self.kept else obs)

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """clip((obs - mean) / sqrt(var + epsilon), +-clipObservations), as float32; `obs` itself
        when observations are not normalized."""
        if not self.config.observations:
            return obs
        stats, clip = self.stats.obs, self.config.clip_observations
        features = obs[..., : self.features] if self.kept else obs
        normalized = (features - stats.mean) / np.sqrt(stats.var + self.config.epsilon)
        normalized = np.clip(normalized, -clip, clip).astype(np.float32)
        if not self.kept:
            return normalized
        return np.concatenate([normalized, obs[..., self.features :]], axis=-1)

    def scale_rewards(
        self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray
    ) -> np.ndarray:
        """The rewards of a (T, N) window of N envs, scaled step by step as VecNormalize scales
        them: each env's discounted return takes the step's reward (return = return * gamma +
        reward) and is counted in the return statistics, the reward is divided by the returns'
        standard deviation, and the return of an env whose episode ended (`dones`) starts again.
        A step that only resets an env (not `valid`) is no transition: its return, 0, is not
        counted. `rewards` itself when rewards are not scaled.

        The returns are counted once for the window, in one exact merge (RunningMeanStd.update):
        a merge per step cost 0.75 us per env step with 8 envs, against 0.2 us now."""
        if not self.config.rewards:
            return rewards
        returns = np.empty(rewards.shape, dtype=np.float64)
        running = self.discounted_returns
        for t in range(len(rewards)):
            running = running * self.gamma + rewards[t]  # a new array: returns[t] keeps it
            returns[t] = running
            running[dones[t]] = 0.0
        self.discounted_returns = running
        self.delta.returns.update(returns[valid])
        return self.scaled(rewards)

    def scaled(self, rewards: np.ndarray) -> np.ndarray:
        """clip(reward / sqrt(var + epsilon), +-clipRewards), with the variance of the returns in
        the global statistics."""
        clip = self.config.clip_rewards
        std = np.sqrt(self.stats.returns.var + self.config.epsilon)
        return np.clip(rewards / std, -clip, clip).astype(np.float32)

    def take_delta(self) -> dict[str, Any]:
        """The statistics of what was sampled since the last call, as plain data; starts anew."""
        delta = self.delta
        self.delta = NormalizationStats.empty(len(delta.obs.mean))
        return delta.state()

    def hand_over(self) -> dict[str, Any] | None:
        """What a batch carries to the driver: the statistics of what was sampled since the last
        batch (see take_delta). None with normalization off, and on the local worker, whose
        samples go into the global statistics here."""
        if not self.enabled:
            return None
        if self.keeps_global:
            self.merge(self.take_delta())
            return None
        return self.take_delta()

    def merge(self, delta: dict[str, Any] | None) -> None:
        """Fold a worker's delta (a batch's `normalization`) into the statistics held here."""
        if delta is not None:
            self.stats.merge(delta)

    def set_stats(self, state: dict[str, Any]) -> None:
        """Normalize with these global statistics (a `NormalizationStats.state()`) from now on."""
        self.stats = NormalizationStats.from_state(state)


class GlobalNormalization:
    """The driver's side: the global statistics, which are the local worker's normalizer's (its
    own samples update them), merged with each remote result's delta, and put in the object store
    beside each weights put, for the weight calls to hand to the workers. Inert with
    normalization off (and for workers without a normalizer, as the optimizers' test mocks)."""

    def __init__(self, local_worker: Any) -> None:
        normalizer = getattr(local_worker, "normalizer", None)
        self.normalizer = normalizer if normalizer is not None and normalizer.enabled else None
        if self.normalizer is not None:
            self.normalizer.keeps_global = True
        self._ref = None  # the statistics put with the newest weights

    def state(self) -> dict[str, Any] | None:
        """The global statistics as plain data (None with normalization off)."""
        return None if self.normalizer is None else self.normalizer.stats.state()

    def load(self, state: dict[str, Any]) -> None:
        """Take these global statistics (a checkpoint's); the remote workers get them with their
        next weights."""
        if self.normalizer is not None:
            self.normalizer.set_stats(state)

    def merge_from(self, result: Any) -> None:
        """Fold the statistics a remote worker's result carries into the global ones."""
        delta = getattr(result, "normalization", None)
        if delta is not None and self.normalizer is not None:
            self.normalizer.merge(delta)

    def put(self) -> None:
        """A copy of the global statistics as they are now, into the object store."""
        import ray

        state = self.state()
        self._ref = None if state is None else ray.put(state)

    def with_weights(self) -> tuple:
        """What a weight call passes after the weights: the statistics put last, if any."""
        return () if self._ref is None else (self._ref,)


def make_normalizer(config: Any, spaces: SpaceInfo, num_envs: int) -> Normalizer:
    """A rollout worker's normalizer for `config` (a trainer's config). Observations are
    normalized only where they are not a one-hot encoded Discrete one (refused, naming the
    field) nor images; an action mask's columns never."""
    settings = config.normalization
    if settings.observations and (problem := observation_normalization_problem(spaces)):
        raise EnvError(problem, NORMALIZED_OBSERVATIONS)
    gamma = discount(config.hyperparameters)
    return Normalizer(settings, spaces.feature_dim, num_envs, gamma, kept=spaces.action_mask_n or 0)


def discount(hyperparameters: Any) -> float:
    """The discount of the returns that rewards are scaled by: the algorithm's gamma, where it
    has one."""
    return float(getattr(hyperparameters, "gamma", DEFAULT_GAMMA))
