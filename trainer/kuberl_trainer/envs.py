"""Making environments from an RLJob's `env` and `envConfig`.

`env` is a gymnasium id (`CartPole-v1`) or an import path `module:Class` naming a gymnasium.Env
subclass; `envConfig` goes to the constructor as keyword arguments. Only Box and Discrete spaces are
supported, and anything else is reported when the job is validated, not mid-run.

A rollout worker steps its envs as one vector env. An id whose gymnasium spec has a vector entry
point (CartPole) is made natively vectorized: one numpy computation steps every copy, so a worker
can step thousands. Other ids and `module:Class` envs are made one by one and stepped in turn.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from kuberl_trainer.errors import InvalidJobError


@dataclass(frozen=True)
class SpaceInfo:
    """What the networks need to know about an env's spaces."""

    obs_dim: int
    obs_discrete_n: int | None  # set when observations are Discrete and get one-hot encoded
    action_discrete_n: int | None  # set for Discrete actions
    action_dim: int  # 1 for Discrete, the flat size for Box
    action_low: np.ndarray | None
    action_high: np.ndarray | None

    @property
    def discrete_actions(self) -> bool:
        return self.action_discrete_n is not None


class EnvError(InvalidJobError):
    """The env named in the job cannot be made or has spaces kuberl cannot train on."""


def env_creator(env: str) -> Callable[..., gym.Env]:
    """A callable building the env from keyword arguments."""
    if ":" in env and env.split(":", 1)[0] not in gym.registry:
        module_name, _, attr = env.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EnvError(f"cannot import module {module_name!r}: {exc}") from exc
        try:
            env_class = getattr(module, attr)
        except AttributeError as exc:
            raise EnvError(f"module {module_name!r} has no attribute {attr!r}") from exc
        if not callable(env_class):
            raise EnvError(f"{env} is not a class or factory")
        return env_class
    if env not in gym.registry:
        import difflib

        close = difflib.get_close_matches(env, list(gym.registry), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise EnvError(f"{env!r} is not a registered gymnasium id nor a module:Class path{hint}")
    return lambda **kwargs: gym.make(env, **kwargs)


def make_env(env: str, env_config: dict[str, Any]) -> gym.Env:
    try:
        instance = env_creator(env)(**env_config)
    except EnvError:
        raise
    except Exception as exc:  # any constructor failure is the job's problem to report
        raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
    if not isinstance(instance, gym.Env):
        raise EnvError(f"{env!r} made a {type(instance).__name__}, not a gymnasium.Env")
    return instance


def space_info(obs_space: gym.Space, act_space: gym.Space) -> SpaceInfo:
    """Checks the spaces are supported and describes them."""
    if isinstance(obs_space, gym.spaces.Box):
        obs_dim, obs_n = int(np.prod(obs_space.shape)), None
    elif isinstance(obs_space, gym.spaces.Discrete):
        obs_dim, obs_n = int(obs_space.n), int(obs_space.n)
    else:
        raise EnvError(
            f"observation space {obs_space} is not supported: use Box or Discrete "
            "(wrap the env to flatten Dict or Tuple spaces)"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        return SpaceInfo(obs_dim, obs_n, int(act_space.n), 1, None, None)
    if isinstance(act_space, gym.spaces.Box):
        if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
            raise EnvError(f"action space {act_space} must have finite bounds")
        return SpaceInfo(
            obs_dim,
            obs_n,
            None,
            int(np.prod(act_space.shape)),
            act_space.low.astype(np.float32).ravel(),
            act_space.high.astype(np.float32).ravel(),
        )
    raise EnvError(f"action space {act_space} is not supported: use Box or Discrete")


def env_problem(
    env: str,
    env_config: dict[str, Any],
    discrete_actions_only: bool = False,
    continuous_actions_only: bool = False,
) -> str | None:
    """Why this env cannot be trained on, or None when it can (used by validation). The env is
    made as the rollout workers make it, so an envConfig that only the native vector env rejects
    is caught here too."""
    try:
        envs = make_vector_env(env, env_config, 1)
        try:
            info = space_info(envs.single_observation_space, envs.single_action_space)
        finally:
            envs.close()
    except EnvError as exc:
        return str(exc)
    if discrete_actions_only and not info.discrete_actions:
        return (
            f"action space {envs.single_action_space} is continuous but the algorithm needs "
            "Discrete actions; use PPO, A2C or PG for continuous control"
        )
    if continuous_actions_only and info.discrete_actions:
        return (
            f"action space {envs.single_action_space} is discrete but the algorithm needs "
            "Box (continuous) actions; use DQN or PPO for Discrete actions"
        )
    return None


def has_vector_entry_point(env: str) -> bool:
    """Whether gymnasium can make `env` natively vectorized (`module:Class` envs cannot)."""
    spec = gym.registry.get(env)
    return spec is not None and spec.vector_entry_point is not None


def make_vector_env(env: str, env_config: dict[str, Any], num_envs: int) -> gym.vector.VectorEnv:
    """`num_envs` copies of the env stepped together in this process, natively vectorized where
    gymnasium can, else one by one.

    Either way an env whose episode ended resets on its next step (NEXT_STEP autoreset): that step
    ignores the env's action, returns the new episode's first observation with reward 0, and is no
    transition (rollout workers leave it out). gymnasium's native vector envs reset no other way,
    and resetting the envs made one by one the same way keeps one sampler for both: the episode's
    final observation is simply the observation the done step returns."""
    if has_vector_entry_point(env):
        try:
            envs = gym.make_vec(
                env, num_envs, vectorization_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT, **env_config
            )
        except Exception as exc:  # any constructor failure is the job's problem to report
            raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
        if envs.metadata.get("autoreset_mode") == gym.vector.AutoresetMode.NEXT_STEP:
            return envs
        envs.close()  # a native env resetting some other way: the one-by-one path is always right
    return one_by_one_vector_env(env, env_config, num_envs)


def one_by_one_vector_env(
    env: str, env_config: dict[str, Any], num_envs: int
) -> gym.vector.SyncVectorEnv:
    """The envs made one by one and stepped in turn, resetting as `make_vector_env` says."""
    return gym.vector.SyncVectorEnv(
        [lambda: make_env(env, env_config) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


def encode_obs(obs: np.ndarray, info: SpaceInfo) -> np.ndarray:
    """A float32 (batch, obs_dim) array: Box observations flattened, Discrete ones one-hot."""
    if info.obs_discrete_n is not None:
        return np.eye(info.obs_discrete_n, dtype=np.float32)[np.asarray(obs, dtype=np.int64)]
    return np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
