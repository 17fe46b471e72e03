"""Making environments from an RLJob's `env`, `envConfig` and `wrappers`.

`env` is a gymnasium id (`CartPole-v1`) or an import path `module:Class` naming a gymnasium.Env
subclass (its module installed, or next to the job's manifest or in the working directory: see
search_path.py); `envConfig` goes to the constructor as keyword arguments. `wrappers` are put
around the env in order, each a class of gymnasium.wrappers or a `module:Class` path, made with
its `kwargs`. Unknown wrapper names and keyword arguments are reported when the job is validated,
not mid-run (problems.py), as are spaces the networks cannot take (spaces.py).

A rollout worker steps its envs as one vector env. An id whose gymnasium spec has a vector entry
point (CartPole) is made natively vectorized when the job names no wrappers: one numpy computation
steps every copy, so a worker can step thousands. Wrappers wrap single envs, so with any, such an
id is made one by one like other ids and `module:Class` envs, and stepped in turn.

These functions make what they are given: a `module:Class` is imported and called. A job's own
manifest is made as it says; what may be made from a policy file someone else wrote (a
checkpoint's or an exported file's spec.trainer) is decided in trust.py.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from kuberl_trainer.envs import atari, mujoco_logging
from kuberl_trainer.envs.search_path import import_env_module
from kuberl_trainer.errors import InvalidJobError

if TYPE_CHECKING:  # a remote worker imports this module, not the config (frozen.py says why)
    from kuberl_contract.config import WrapperConfig


MULTI_AGENT_PREFIX = "pettingzoo:"
"""The prefix of `env` naming a PettingZoo env (envs/multi_agent.py makes those)."""
EPISODE_ENDED = "episode_ended"
"""A vector env step's info key saying which lanes' episodes ended, where that is not each lane's
own termination or truncation (a multi-agent env's lanes end together with their copy's episode,
and an agent may be done before it)."""


class EnvError(InvalidJobError):
    """The env named in the job cannot be made or has spaces kuberl cannot train on. `field` says
    where in spec.trainer: `env`, or a wrapper's (`wrappers[0]`, `wrappers[0].name`,
    `wrappers[0].kwargs.key`), which the message then starts with."""

    def __init__(self, message: str, field: str = "env") -> None:
        super().__init__(message, field)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message if self.field == "env" else f"{self.field}: {self.message}"


def did_you_mean(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def imported(path: str, field: str) -> Callable[..., Any]:
    """The callable a `module:attr` path names, its module looked for as search_path.py says."""
    module_name, _, attr = path.partition(":")
    try:
        module = import_env_module(module_name)
    except (ImportError, ValueError) as exc:
        raise EnvError(f"cannot import module {module_name!r}: {exc}", field) from exc
    try:
        value = getattr(module, attr)
    except AttributeError as exc:
        raise EnvError(f"module {module_name!r} has no attribute {attr!r}", field) from exc
    if not callable(value):
        raise EnvError(f"{path} is not a class or factory", field)
    return value


def env_creator(env: str) -> Callable[..., gym.Env]:
    """A callable building the env from keyword arguments."""
    atari.register(env)
    if env.startswith(MULTI_AGENT_PREFIX):
        raise EnvError(
            f"{env!r} is a multi-agent env, which a job trains as its agents' lanes; evaluating "
            "or exporting a policy on it from its checkpoint comes with a later kuberl (the policy "
            "of a job of one shared policy is exported as policy.onnx at the end of its run)"
        )
    if ":" in env and env.split(":", 1)[0] not in gym.registry:
        return imported(env, "env")
    if (legacy := atari.legacy_suggestion(env)) is not None:  # known or not, as ale-py was loaded
        raise EnvError(f"{env!r} is gym's old Atari id, which kuberl does not make{legacy}")
    if env not in gym.registry:
        raise EnvError(
            f"{env!r} is not a registered gymnasium id nor a module:Class path"
            + did_you_mean(env, list(gym.registry))
        )
    mujoco_logging.route_warnings(env)
    return lambda **kwargs: gym.make(env, **kwargs)


def gymnasium_wrapper_names() -> list[str]:
    """The classes of gymnasium.wrappers, by name (its vector wrappers are elsewhere)."""
    return [name for name in gym.wrappers.__all__ if name[:1].isupper()]


def wrapper_creator(wrapper: WrapperConfig, field: str) -> Callable[..., gym.Env]:
    """The class or callable `wrapper.name` names, once its kwargs are known to be keyword
    arguments it takes. `field` is the wrapper's place in spec.trainer (`wrappers[0]`)."""
    if ":" in wrapper.name:
        wrap = imported(wrapper.name, f"{field}.name")
        if (
            isinstance(wrap, type)
            and issubclass(wrap, gym.Env)
            and not issubclass(wrap, gym.Wrapper)
        ):
            raise EnvError(
                f"{wrapper.name} is an env, not a gymnasium.Wrapper: name it in env",
                f"{field}.name",
            )
    elif wrapper.name not in gymnasium_wrapper_names():
        raise EnvError(
            f"{wrapper.name!r} is not a class of gymnasium.wrappers nor a module:Class path"
            + did_you_mean(wrapper.name, gymnasium_wrapper_names()),
            f"{field}.name",
        )
    else:
        try:
            wrap = getattr(gym.wrappers, wrapper.name)
        except ImportError as exc:  # the data converters need jax or torch's array API
            raise EnvError(
                f"gymnasium.wrappers.{wrapper.name} cannot be imported: {exc}", f"{field}.name"
            ) from exc
    _check_kwargs(wrap, wrapper, field)
    return wrap


def _check_kwargs(wrap: Callable[..., Any], wrapper: WrapperConfig, field: str) -> None:
    """Every key of `wrapper.kwargs` is a keyword parameter of `wrap` after the env (any is, when
    it takes **kwargs)."""
    try:
        parameters = list(inspect.signature(wrap).parameters.values())
    except (TypeError, ValueError):  # no signature to read: making the wrapper will tell
        return
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    env_parameter = next((p for p in parameters if p.kind in positional), None)
    names = [
        parameter.name
        for parameter in parameters
        if parameter is not env_parameter
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    ]
    for key in wrapper.kwargs:
        if key not in names:
            takes = f"it takes {', '.join(names)}" if names else "it takes none"
            hint = did_you_mean(key, names) or f"; {takes}"
            raise EnvError(
                f"{wrapper.name} takes no keyword argument {key!r}{hint}", f"{field}.kwargs.{key}"
            )


def wrapped(instance: gym.Env, wrappers: Sequence[WrapperConfig]) -> gym.Env:
    """`instance` inside `wrappers`, the first innermost."""
    for index, wrapper in enumerate(wrappers):
        field = f"wrappers[{index}]"
        instance = _made(
            partial(wrapper_creator(wrapper, field), instance, **wrapper.kwargs),
            f"cannot wrap the env in {wrapper.name} with kwargs {wrapper.kwargs}",
            wrapper.name,
            field,
        )
    return instance


def make_env(
    env: str, env_config: dict[str, Any], wrappers: Sequence[WrapperConfig] = ()
) -> gym.Env:
    """The env, made with `env_config` and put inside `wrappers` in order."""
    instance = _made(
        lambda: env_creator(env)(**env_config),
        f"cannot make {env!r} with envConfig {env_config}",
        repr(env),
    )
    return wrapped(instance, wrappers)


def _made(make: Callable[[], Any], failing: str, name: str, field: str = "env") -> gym.Env:
    """The env `make()` returns; a failure is reported as `failing: why`, naming `field`."""
    try:
        instance = make()
    except EnvError:
        raise
    except Exception as exc:  # any constructor failure is the job's problem to report
        raise EnvError(f"{failing}: {exc}", field) from exc
    if not isinstance(instance, gym.Env):
        raise EnvError(f"{name} made a {type(instance).__name__}, not a gymnasium.Env", field)
    return instance


def has_vector_entry_point(env: str) -> bool:
    """Whether gymnasium can make `env` natively vectorized (`module:Class` envs cannot)."""
    atari.register(env)
    spec = gym.registry.get(env)
    return spec is not None and spec.vector_entry_point is not None


def make_vector_env(
    env: str,
    env_config: dict[str, Any],
    num_envs: int,
    wrappers: Sequence[WrapperConfig] = (),
    cpus: int | None = None,
) -> gym.vector.VectorEnv:
    """`num_envs` copies of the env stepped together in this process, natively vectorized where
    gymnasium can and no wrappers are asked for, else one by one, each inside `wrappers`
    (gymnasium's native vector envs take no wrappers of single envs).

    Either way an env whose episode ended resets on its next step (NEXT_STEP autoreset): that step
    ignores the env's action, returns the new episode's first observation with reward 0, and is no
    transition (rollout workers leave it out). gymnasium's native vector envs reset no other way,
    and resetting the envs made one by one the same way keeps one sampler for both: the episode's
    final observation is simply the observation the done step returns.

    An env may say more in a step's info (ale-py's, see atari.py): the game's own rewards where the
    learner's are clipped, and the terminations at a lost life, after which the game goes on
    without a reset step; `episode_steps` reads them.

    `cpus`: the CPUs the caller has for stepping, which a native vector env that steps on threads
    of its own (ale-py's) uses; all this process may use when None."""
    if not wrappers and has_vector_entry_point(env):
        try:
            if atari.is_atari_vector(env):
                return atari.make_atari_vector_env(env, env_config, num_envs, cpus)
            envs = gym.make_vec(
                env, num_envs, vectorization_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT, **env_config
            )
        except Exception as exc:  # any constructor failure is the job's problem to report
            raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
        if envs.metadata.get("autoreset_mode") == gym.vector.AutoresetMode.NEXT_STEP:
            return envs
        envs.close()  # a native env resetting some other way: the one-by-one path is always right
    return one_by_one_vector_env(env, env_config, num_envs, wrappers)


def one_by_one_vector_env(
    env: str, env_config: dict[str, Any], num_envs: int, wrappers: Sequence[WrapperConfig] = ()
) -> gym.vector.SyncVectorEnv:
    """The envs made one by one, each inside `wrappers`, and stepped in turn, resetting as
    `make_vector_env` says."""
    return gym.vector.SyncVectorEnv(
        [lambda: make_env(env, env_config, wrappers) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


def episode_steps(
    rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, info: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """What a vector env's step means for its episodes' statistics: each env's reward to add to
    its episode's return (the game's own, before any clipping), and which envs' episodes ended
    (and reset on their next step): every termination and truncation but those at a lost life
    of a game that goes on."""
    ended = info[EPISODE_ENDED] if EPISODE_ENDED in info else terminated | truncated
    if atari.LIFE_LOST in info:
        ended = ended & ~info[atari.LIFE_LOST]
    return info.get(atari.RAW_REWARD, rewards), ended
