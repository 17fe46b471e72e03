"""What every loaded policy shares, whatever it was loaded from (a checkpoint: inference.py; a file
of `kuberl export`: exported.py): acting (`predict`), evaluating on seeded episodes of its env, the
rules for making that env from a file anyone may have written (envs/trust.py), and the errors of
loading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import TypeAdapter

from kuberl_contract.config import TrainerConfig
from kuberl_trainer.envs.encoding import as_structured_batch
from kuberl_trainer.envs.making import EnvError, make_vector_env
from kuberl_trainer.envs.space_record import space_kind
from kuberl_trainer.envs.trust import EnvCode, env_code, on_named_env
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.policies.interface import EpisodeStarts
from kuberl_trainer.rollouts.rollout_worker import run_episodes
from kuberl_trainer.trained.video import Recording, Video

_TRAINER_CONFIG = TypeAdapter(TrainerConfig)


class LoadError(InvalidJobError):
    """What was named holds no policy kuberl can load, and why."""


LOAD_OPT_IN = (
    "load(path, env=ID) plays it on an env you name, load(path, trust_env_code=True) trusts it"
)
"""How a caller of `load` opts in to a file's env that runs code."""


class UntrustedEnvError(LoadError):
    """The policy file's env would run code that the file names (see envs/trust.py), and the caller
    has not said to trust the file. `explained` says so ending with how to opt in, as the
    caller's interface spells it (`kuberl evaluate` has flags, `load` arguments)."""

    def __init__(self, source: str, asked: list[EnvCode], why_made: str = ""):
        self.source = source
        self.asked = asked
        self.why_made = why_made
        super().__init__(self.explained(LOAD_OPT_IN))

    def explained(self, opt_in: str) -> str:
        """One line: the file, why its env would be made, what it asks for, and `opt_in`."""
        asked = " and ".join(map(str, self.asked))
        return f"{self.source}: {self.why_made}it asks for {asked}; {opt_in}"


@dataclass(frozen=True)
class Evaluation:
    """Whole episodes of a policy on its env, each on an env of its own, seeded."""

    returns: np.ndarray
    lengths: np.ndarray
    seed: int
    deterministic: bool
    video: Video | None = None  # when the episodes were recorded

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": len(self.returns),
            "return_mean": self.mean,
            "return_std": self.std,
            "length_mean": float(np.mean(self.lengths)),
            "seed": self.seed,
            "deterministic": self.deterministic,
            "returns": [float(r) for r in self.returns],
            "lengths": [int(n) for n in self.lengths],
            **({"video": self.video.as_dict()} if self.video is not None else {}),
        }

    def summary(self) -> str:
        mode = "greedy" if self.deterministic else "stochastic"
        return (
            f"return {self.mean:.2f} ± {self.std:.2f} over {len(self.returns)} {mode} episodes "
            f"(seed {self.seed}), mean length {np.mean(self.lengths):.1f}"
        )


class LoadedPolicy:
    """What every loaded policy has, whatever its file: where it comes from (`meta`: the
    checkpoint's, or the metadata an exported file carries, which copies it), the job's
    spec.trainer (`config`), its spaces, and the env it plays on.

    The spec.trainer is the file's, which anyone may have written: its env is made only when
    envs/trust.py finds no code in it, or when the caller trusts the file (`trust_env_code`). An
    `env` the caller names replaces the file's env, envConfig and wrappers; it is the caller's
    own, made as they name it."""

    meta: dict[str, Any]
    observation_space: gym.Space | None  # None only for a file exported by an older kuberl
    action_space: gym.Space | None
    observation_shape: tuple[int, ...] | None  # one observation's, no batch axis; Dict, Tuple: None
    state_size: int = 0  # a recurrent policy's memory per lane (spec.trainer.model.recurrent)

    def __init__(self, trained_on: Any, trust_env_code: bool = False, env: str | None = None):
        self.config = trained_on if env is None else on_named_env(trained_on, env)
        self.env_trusted = trust_env_code or env is not None

    @property
    def iteration(self) -> int:
        return int(self.meta["iteration"])

    @property
    def timesteps(self) -> int:
        return int(self.meta["timesteps"])

    @property
    def uri(self) -> str:
        """The checkpoint's location."""
        return self.meta["checkpoint"]

    @property
    def trained_as(self) -> str:
        """`PPO on CartPole-v1`: the algorithm and the env it trained on."""
        return f"{self.config.algorithm} on {self.config.env}"

    def describe(self) -> str:
        """`PPO on CartPole-v1, iteration 60, 15,172 env steps (CHECKPOINT)`."""
        return (
            f"{self.trained_as}, iteration {self.iteration}, {self.timesteps:,} env steps "
            f"({self.uri})"
        )

    def close(self) -> None:
        """Nothing to release (no env is held): for code that closes what `load` returned."""

    def env_to_make(self, why_made: str = "") -> Any:
        """The spec.trainer whose env this policy plays on, once that env may be made; an
        UntrustedEnvError naming the code it would run otherwise. `why_made`: why the env is
        needed, where that is not to play on it."""
        if not self.env_trusted and (asked := env_code(self.config.env, self.config.wrappers)):
            raise UntrustedEnvError(self.source, asked, why_made)
        return self.config

    @property
    def source(self) -> str:
        """What was loaded: the checkpoint here, the file for an exported policy."""
        return self.uri

    def predict(
        self,
        obs: Any,
        deterministic: bool = True,
        *,
        state: Any = None,
        episode_start: Any = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions for one observation or a batch of them (a leading axis), as Stable-Baselines3's
        `predict`: the greedy ones by default (the distribution's mode, DQN's argmax, SAC's
        squashed mean), sampled with `deterministic=False` (a checkpoint's policy only: an
        exported one is greedy only, a ValueError). Returns `(actions, state)`, as SB3-contrib's
        RecurrentPPO: for a recurrent policy the memory after this step, (batch, state_size)
        float32, to pass as `state` with the next observations (None: a fresh memory), the rows
        where `episode_start` (batch,) is true starting afresh; None for any other policy, which
        takes `state` and `episode_start` and, as SB3's feed-forward policies do, ignores them."""
        self.check_mode(deterministic)
        batch, single = self.as_batch(obs)
        if not self.state_size:
            actions = self._act(batch, explore=not deterministic)
            return (actions[0] if single else actions), None
        lanes = len(_first_array(batch))
        memory = np.zeros((lanes, self.state_size), np.float32)
        if state is not None:
            memory[:] = np.asarray(state, dtype=np.float32).reshape(lanes, self.state_size)
        if episode_start is not None:
            memory *= ~np.asarray(episode_start, dtype=bool).reshape(lanes, 1)
        actions, memory = self._step(batch, memory, explore=not deterministic)
        return (actions[0] if single else actions), memory

    def evaluate(
        self,
        episodes: int = 10,
        seed: int = 0,
        deterministic: bool = True,
        video: str | Path | None = None,
        video_episodes: int | None = None,
    ) -> Evaluation:
        """`episodes` whole episodes, env k seeded with `seed + k`: the same arguments give the
        same episodes; greedy unless `deterministic=False` (as `predict`). With `video` (.mp4 or
        .gif), the first `video_episodes` (default: all, at most 10) are recorded there, on envs
        that render (see video.py; a RecordingError where the env cannot render). An
        UntrustedEnvError when the env would run code the file names (see `load`), an EnvError
        when it cannot be made or does not fit the policy."""
        self.check_mode(deterministic)
        explore = not deterministic
        return self.play(
            self._acting(explore),
            episodes,
            seed,
            deterministic,
            video,
            video_episodes,
        )

    def check_mode(self, deterministic: bool) -> None:
        """A ValueError where the policy cannot act as asked (greedy, or sampling)."""

    def _act(self, batch: np.ndarray, explore: bool) -> np.ndarray:
        """The actions for a batch of observations as the env returns them, sampled when
        `explore`."""
        raise NotImplementedError

    def _step(self, batch: Any, state: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """A recurrent policy's `_act` from the lanes' memory `state`: the actions, the next
        memory."""
        raise NotImplementedError

    def _acting(self, explore: bool) -> Callable[[Any, np.ndarray], np.ndarray]:
        """run_episodes' `act`: a recurrent policy's with a memory per lane, fresh with each of
        the lane's episodes."""
        if not self.state_size:
            return lambda obs, _: self._act(obs, explore)
        starts, memory = EpisodeStarts(), np.zeros((0, self.state_size), np.float32)

        def act(obs: Any, episodes: np.ndarray) -> np.ndarray:
            nonlocal memory
            fresh = starts(episodes)
            if len(memory) != len(episodes):
                memory = np.zeros((len(episodes), self.state_size), np.float32)
            actions, memory = self._step(obs, memory * ~fresh[:, None], explore)
            return actions

        return act

    def as_batch(self, obs: Any) -> tuple[Any, bool]:
        """`obs` as a batch, and whether it was one observation; ValueError for another shape. A
        Dict's or Tuple's observations are as the env gives them (a mapping or a tuple of arrays),
        a batch's with a leading axis on each."""
        if self.observation_shape is None:
            return as_structured_batch(self.observation_space, obs)
        obs = np.asarray(obs)
        single_shape = self.observation_shape
        single = obs.shape == single_shape
        if not single and obs.shape[1:] != single_shape:
            raise ValueError(
                f"predict: an observation of {self.config.env} has shape {single_shape} (a "
                f"batch of N: {(-1, *single_shape)} with N for -1), got {obs.shape}"
            )
        return (obs[None] if single else obs), single

    def play(
        self,
        act: Callable[[np.ndarray, np.ndarray], np.ndarray],
        episodes: int,
        seed: int,
        deterministic: bool,
        video: str | Path | None = None,
        video_episodes: int | None = None,
    ) -> Evaluation:
        """`episodes` whole episodes acted by `act` (run_episodes'), on envs of their own made as
        evaluation makes them, env k seeded with `seed + k`; recorded to `video` when given (see
        video.py). The env is made once it may be (env_to_make), and must fit the policy."""
        if episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {episodes}")
        config = self.env_to_make()
        if video is None:
            envs = make_vector_env(config.env, config.env_config, episodes, config.wrappers)
            try:
                self.check_fits(envs)
                returns, lengths = run_episodes(envs, episodes, act, seed)
            finally:
                envs.close()
            return Evaluation(returns, lengths, seed, deterministic)
        with Recording(
            video, config, episodes, video_episodes, self.observation_shape
        ) as recording:
            self.check_fits(recording.envs)
            returns, lengths = run_episodes(
                recording.envs, episodes, act, seed, observe=recording.record
            )
            return Evaluation(returns, lengths, seed, deterministic, video=recording.save())

    def check_fits(self, envs: gym.vector.VectorEnv) -> None:
        """EnvError unless the envs' spaces are of the kinds the policy takes and gives (an env
        named to play on may be any)."""
        pairs = {
            "observations": (self.observation_space, envs.single_observation_space),
            "actions": (self.action_space, envs.single_action_space),
        }
        misfits = [
            f"its {what} are {space_kind(env_space)}, the policy's {space_kind(own)}"
            for what, (own, env_space) in pairs.items()
            if own is not None and space_kind(own) != space_kind(env_space)
        ]
        shape = shape_of(envs.single_observation_space)
        if not misfits and shape != self.observation_shape:  # an older export knows no spaces
            misfits.append(
                f"its observations have shape {shape}, the policy's {self.observation_shape}"
            )
        if misfits:
            raise EnvError(f"{self.config.env} does not fit the policy: {'; '.join(misfits)}")


def shape_of(space: gym.Space) -> tuple[int, ...] | None:
    """One observation's shape, None for a Dict or a Tuple (no one array)."""
    return None if space.shape is None else tuple(space.shape)


def _first_array(batch: Any) -> np.ndarray:
    """A batch's array, or a structured batch's first one: its length is the batch's."""
    if isinstance(batch, dict):
        return _first_array(next(iter(batch.values())))
    if isinstance(batch, tuple):
        return _first_array(batch[0])
    return batch
