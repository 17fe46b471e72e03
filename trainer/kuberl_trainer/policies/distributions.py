"""The action distributions, each written once: how a policy network's outputs become actions,
greedy or sampled, and what the env gets of them. The torch policies act through them, the numpy
policies of the rollout workers that only act (acting.py) too, and the exported greedy graph
(trained/export.py) is the torch trace of their `greedy_env_actions`: a distribution changes here,
and all three change with it.

Each method computes with the array module it is given, `xp` (numpy, or torch), and calls only
what both name alike: the functions clip, exp, log and tanh, the method argmax (numpy's method
skips its function's dispatch, a microsecond of a numpy worker's few per step), arithmetic and
slicing. This module imports no torch: the numpy workers import it.
"""

from __future__ import annotations

import dataclasses
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kuberl_trainer.envs.spaces import SpaceInfo

Array = Any
"""A numpy array or a torch tensor, as `xp` computes."""

ILLEGAL = -1e9
"""The logit (or Q-value) of an action an observation's mask rules out: far below any a network
outputs, so it is never chosen while any action is legal, yet finite, so that a row where every
action is masked still gives finite probabilities, entropies and losses."""
SAC_LOG_STD_MIN, SAC_LOG_STD_MAX = -20.0, 2.0
"""SAC's clamp of its actor's log standard deviation (Stable-Baselines3's and RLlib's)."""
NOISE_CHUNK = 256
"""Env steps of noise drawn per generator call: one call per chunk rather than one per step,
which would cost as much as the forward pass at CartPole's step cost."""


class ActionDistribution(ABC):
    """Actions from a network's outputs `out`: `actions` as the policy records them (what its loss
    takes), `env_actions` as the env gets them."""

    @abstractmethod
    def greedy(self, xp: Any, out: Array) -> Array:
        """The most likely action (the mode)."""

    @abstractmethod
    def sample(self, xp: Any, out: Array, noise: Noise, std: Array | None) -> Array:
        """A draw, from `noise`'s standard draws; `std`: the policy's own standard deviation,
        where the distribution has one apart from `out`."""

    @abstractmethod
    def env_actions(self, xp: Any, actions: Array) -> Array:
        """The recorded actions as the env takes them."""

    def actions(self, xp: Any, out: Array, noise: Noise | None, std: Array | None = None) -> Array:
        """Sampled with `noise`, greedy without."""
        return self.greedy(xp, out) if noise is None else self.sample(xp, out, noise, std)

    def greedy_env_actions(self, xp: Any, out: Array) -> Array:
        """The greedy action as the env takes it: what an exported policy computes."""
        return self.env_actions(xp, self.greedy(xp, out))


@dataclass(frozen=True)
class Categorical(ActionDistribution):
    """Discrete actions from logits: their argmax when greedy, a Gumbel-max draw when sampling
    (the argmax of logits + Gumbel noise is distributed as the softmax of the logits)."""

    def greedy(self, xp: Any, out: Array) -> Array:
        return out.argmax(-1)

    def sample(self, xp: Any, out: Array, noise: Noise, std: Array | None) -> Array:
        return (out + noise.gumbel(out.shape)).argmax(-1)

    def env_actions(self, xp: Any, actions: Array) -> Array:
        return actions

    def parts(self, out: Array) -> list[Array]:
        """The logits of each component: one here."""
        return [out]

    def components(self, actions: Array) -> list[Array]:
        """The recorded actions of each component, as `parts` splits the logits."""
        return [actions]


@dataclass(frozen=True)
class MultiCategorical(Categorical):
    """MultiDiscrete actions: one Categorical per component, component i's logits the next
    `nvec[i]` outputs. Greedy: the argmax of each; sampled: a Gumbel-max draw of each; the policy
    records them as (..., k) int64, as the env takes them."""

    nvec: tuple[int, ...]

    def parts(self, out: Array) -> list[Array]:
        bounds = np.cumsum((0, *self.nvec)).tolist()
        return [out[..., start:end] for start, end in itertools.pairwise(bounds)]

    def components(self, actions: Array) -> list[Array]:
        return [actions[..., i] for i in range(len(self.nvec))]

    def greedy(self, xp: Any, out: Array) -> Array:
        return xp.stack([part.argmax(-1) for part in self.parts(out)], -1)

    def sample(self, xp: Any, out: Array, noise: Noise, std: Array | None) -> Array:
        return self.greedy(xp, out + noise.gumbel(out.shape))


@dataclass(frozen=True)
class EpsilonGreedy(Categorical):
    """DQN's actions from Q-values: their argmax, replaced when exploring by one of the `n`
    actions drawn uniformly (among the legal ones, with a mask), with probability epsilon."""

    n: int

    def explore(
        self,
        rng: np.random.Generator,
        greedy: np.ndarray,
        epsilon: float,
        legal: np.ndarray | None = None,
    ) -> np.ndarray:
        """`greedy`'s actions, each replaced with probability `epsilon`; with `legal` (B, n), the
        observations' masks, by a legal one (the argmax of uniform draws over the legal ones).
        In numpy in every policy: the torch one draws from its numpy generator too, so both
        draw alike."""
        if legal is None:
            random_actions = rng.integers(0, self.n, len(greedy))
        else:
            random_actions = np.where(legal > 0.5, rng.random(legal.shape), -1.0).argmax(-1)
        return np.where(rng.random(len(greedy)) < epsilon, random_actions, greedy)


@dataclass(frozen=True, eq=False)
class Gaussian(ActionDistribution):
    """Box actions from a Gaussian's mean, its standard deviation the policy's own (`std`, not a
    network output): the mean when greedy. The policy records the draw as it is, and the env
    gets it clipped to its bounds."""

    low: Array
    high: Array

    def greedy(self, xp: Any, out: Array) -> Array:
        return out

    def sample(self, xp: Any, out: Array, noise: Noise, std: Array | None) -> Array:
        return out + noise.normal(out.shape) * std

    def env_actions(self, xp: Any, actions: Array) -> Array:
        return xp.clip(actions, self.low, self.high)


@dataclass(eq=False)
class SquashedGaussian(ActionDistribution):
    """SAC's Box actions: tanh of a draw of the Gaussian whose mean and log standard deviation
    the network outputs side by side (`mean_and_log_std`), tanh of the mean when greedy. The
    policy records them in [-1, 1]; the env gets them rescaled to its bounds and clipped to them
    (rounding may land a hair past a bound, which an env is entitled to refuse)."""

    low: Array
    high: Array
    center: Array = dataclasses.field(init=False)
    scale: Array = dataclasses.field(init=False)

    def __post_init__(self) -> None:  # [-1, 1] -> [low, high], once rather than every step
        self.center = (self.high + self.low) / 2
        self.scale = (self.high - self.low) / 2

    def greedy(self, xp: Any, out: Array) -> Array:
        return xp.tanh(out[..., : out.shape[-1] // 2])  # the mean's half only

    def sample(self, xp: Any, out: Array, noise: Noise, std: Array | None) -> Array:
        mean, log_std = mean_and_log_std(xp, out)
        return xp.tanh(mean + xp.exp(log_std) * noise.normal(mean.shape))

    def env_actions(self, xp: Any, actions: Array) -> Array:
        return xp.clip(self.center + self.scale * actions, self.low, self.high)


def mean_and_log_std(xp: Any, out: Array) -> tuple[Array, Array]:
    """The Gaussian's mean and log standard deviation (clamped) from SAC's actor's outputs, its
    first and its second half."""
    half = out.shape[-1] // 2
    return out[..., :half], xp.clip(out[..., half:], SAC_LOG_STD_MIN, SAC_LOG_STD_MAX)


def action_distribution(spaces: SpaceInfo) -> Categorical | Gaussian:
    """The distribution of a network that outputs logits for Discrete (and MultiDiscrete)
    actions and a Gaussian's mean for Box ones: the actor-critics' (PG, A2C, A3C, PPO, IMPALA,
    APPO), and ES's, which acts with its mode."""
    if spaces.action_nvec is not None:
        return MultiCategorical(spaces.action_nvec)
    if spaces.discrete_actions:
        return Categorical()
    return Gaussian(spaces.action_low, spaces.action_high)


def categorical_logp(distribution: Categorical, logits: np.ndarray, actions: np.ndarray):
    """log pi(a|s) in numpy (float32) of actions under (masked) logits, summed over the
    components of MultiDiscrete actions."""
    total = np.zeros(logits.shape[:-1], dtype=np.float32)
    for part, taken in zip(
        distribution.parts(logits), distribution.components(actions), strict=True
    ):
        shifted = part - part.max(-1, keepdims=True)
        log_norm = np.log(np.exp(shifted).sum(-1))
        total += np.take_along_axis(shifted, taken[..., None].astype(np.int64), -1)[..., 0]
        total -= log_norm
    return total


# -- action masks -------------------------------------------------------------------------------


def features_of(obs: Array, mask_n: int | None) -> Array:
    """What the networks take of flat observations: all but the mask's last `mask_n` columns
    (`SpaceInfo.action_mask_n`; None: no mask, `obs` itself)."""
    return obs if mask_n is None else obs[..., :-mask_n]


def masked_forward(xp: Any, network: Callable[[Array], Array], obs: Array, mask_n: int | None):
    """`network`'s outputs (logits, Q-values) for flat observations: it takes their features, and
    the actions their masks rule out come out ILLEGAL."""
    return legal_only(xp, network(features_of(obs, mask_n)), obs, mask_n)


def legal_columns(obs: Array, mask_n: int | None) -> Array | None:
    """The masks of flat observations (1: legal), None without a mask."""
    return None if mask_n is None else obs[..., -mask_n:]


def legal_only(xp: Any, out: Array, obs: Array, mask_n: int | None) -> Array:
    """Logits (or Q-values) `out` with the actions the observations' masks rule out set to
    ILLEGAL; `out` itself without a mask."""
    if mask_n is None:
        return out
    return xp.where(obs[..., -mask_n:] > 0.5, out, ILLEGAL)


def with_arrays(distribution: Any, convert: Callable[[np.ndarray], Array]) -> Any:
    """`distribution` with its numpy arrays (its bounds) converted: to torch tensors for the
    exported graph."""
    arrays = {
        field.name: convert(value)
        for field in dataclasses.fields(distribution)
        if field.init and isinstance(value := getattr(distribution, field.name), np.ndarray)
    }
    return dataclasses.replace(distribution, **arrays)


# -- DQN's and Ape-X's exploration rates ---------------------------------------------------------


def linear_epsilon(hp: Any, timesteps: int) -> float:
    """DQN's exploration rate: linear from epsilon_initial to epsilon_final over
    epsilon_timesteps env steps, then constant."""
    progress = min(1.0, timesteps / hp.epsilon_timesteps)
    return hp.epsilon_initial + progress * (hp.epsilon_final - hp.epsilon_initial)


def worker_epsilon(hp: Any, index: int, num_workers: int) -> float:
    """The Ape-X schedule: remote worker i of N (1..N) explores with
    base ** (1 + alpha * (i - 1) / (N - 1)) (base: hp.worker_epsilon, alpha:
    hp.worker_epsilon_alpha), from base for the first to base ** (1 + alpha) for the last. The
    driver's local worker (index 0) acts greedily: it evaluates, and it samples only while no
    remote worker is up. Without remote workers it is the only sampler, and explores as
    worker 1 of 1."""
    base, alpha = hp.worker_epsilon, hp.worker_epsilon_alpha
    if index == 0:
        return 0.0 if num_workers else base
    return base ** (1 + alpha * (index - 1) / max(1, num_workers - 1))


# -- the noise that sampling draws from ----------------------------------------------------------


class Noise(ABC):
    """Gumbel and standard normal draws for sampling, made `chunk` env steps at a time: one
    generator call per chunk instead of several tiny ones per env step, which dominate at
    CartPole's step cost. Subclasses draw the chunks (numpy's generator, or torch's)."""

    def __init__(self, chunk: int = NOISE_CHUNK):
        self.chunk = chunk
        self._buffers: dict[tuple[str, tuple[int, ...]], tuple[Array, int]] = {}

    def gumbel(self, shape: tuple[int, ...]) -> Array:
        return self._next("gumbel", shape)

    def normal(self, shape: tuple[int, ...]) -> Array:
        return self._next("normal", shape)

    @abstractmethod
    def _draw(self, kind: str, size: tuple[int, ...]) -> Array:
        """A chunk of `size` draws of `kind` ("gumbel" or "normal")."""

    def _next(self, kind: str, shape: tuple[int, ...]) -> Array:
        buffer, position = self._buffers.get((kind, shape), (None, self.chunk))
        if position == self.chunk:
            buffer, position = self._draw(kind, (self.chunk, *shape)), 0
        self._buffers[(kind, shape)] = (buffer, position + 1)
        return buffer[position]


def gumbel_of(xp: Any, uniform: Array) -> Array:
    """Gumbel(0, 1) draws, -log(-log(U)), from uniform ones in [0, 1): U kept above 0."""
    return -xp.log(-xp.log(xp.clip(uniform, 1e-10, 1.0)))


class NumpyNoise(Noise):
    """Gumbel and standard normal draws in float32 from a numpy generator."""

    def __init__(self, rng: np.random.Generator):
        super().__init__()
        self.rng = rng

    def _draw(self, kind: str, size: tuple[int, ...]) -> np.ndarray:
        if kind == "normal":
            return self.rng.standard_normal(size, dtype=np.float32)
        return gumbel_of(np, self.rng.random(size, dtype=np.float32))
