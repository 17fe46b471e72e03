"""Making environments from an RLJob's `env`, `envConfig` and `wrappers`.

`env` is a gymnasium id (`CartPole-v1`) or an import path `module:Class` naming a gymnasium.Env
subclass; `envConfig` goes to the constructor as keyword arguments. `wrappers` are put around the
env in order, each a class of gymnasium.wrappers or a `module:Class` path, made with its `kwargs`.
Only Box and Discrete spaces are supported (after the wrappers), and anything else is reported
when the job is validated, not mid-run, as are unknown wrapper names and keyword arguments.

A rollout worker steps its envs as one vector env. An id whose gymnasium spec has a vector entry
point (CartPole) is made natively vectorized when the job names no wrappers: one numpy computation
steps every copy, so a worker can step thousands. Wrappers wrap single envs, so with any, such an
id is made one by one like other ids and `module:Class` envs, and stepped in turn.

These functions make what they are given: a `module:Class` is imported and called. A job's own
manifest is made as it says; what may be made from a policy file someone else wrote (a
checkpoint's or an exported file's spec.trainer) is decided in env_trust.py.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

from kuberl_trainer.envs import atari, mujoco_logging
from kuberl_trainer.errors import InvalidJobError

if TYPE_CHECKING:  # a remote worker imports this module, not the config (frozen.py says why)
    from kuberl_contract.config import ModelConfig, WrapperConfig


@dataclass(frozen=True)
class ImageLayout:
    """How one image observation is laid out, for the CNN: the env's own shape, (C, H, W),
    (H, W, C) or (H, W), and whether its pixels are uint8 (scaled to [0, 1] in the first layer)."""

    shape: tuple[int, ...]
    channels_last: bool
    uint8: bool

    @property
    def channels(self) -> int:
        if len(self.shape) == 2:
            return 1
        return self.shape[-1] if self.channels_last else self.shape[0]

    @property
    def height_width(self) -> tuple[int, int]:
        if len(self.shape) == 2:
            return self.shape[0], self.shape[1]
        return (self.shape[0], self.shape[1]) if self.channels_last else self.shape[1:]


@dataclass(frozen=True)
class SpaceInfo:
    """What the networks need to know about an env's spaces."""

    obs_dim: int
    obs_discrete_n: int | None  # set when observations are Discrete and get one-hot encoded
    action_discrete_n: int | None  # set for Discrete actions
    action_dim: int  # 1 for Discrete, the flat size for Box
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    image: ImageLayout | None = None  # set when a CNN encodes the observations
    obs_discrete_start: int = 0  # Discrete observations: the first one's value (Discrete.start)

    @property
    def discrete_actions(self) -> bool:
        return self.action_discrete_n is not None

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation as the model takes it: flat for the MLP, the env's image for the
        CNN."""
        return (self.obs_dim,) if self.image is None else self.image.shape

    @property
    def obs_dtype(self) -> np.dtype:
        """uint8 for uint8 images, which stay uint8 up to the CNN; float32 otherwise."""
        return np.dtype(np.uint8 if self.image is not None and self.image.uint8 else np.float32)


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


class EnvProblem(NamedTuple):
    """Why the job's env cannot be trained on: where in spec.trainer (an EnvError's field) and
    why."""

    field: str
    message: str


def _did_you_mean(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _imported(path: str, field: str) -> Callable[..., Any]:
    """The callable a `module:attr` path names."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
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
    if ":" in env and env.split(":", 1)[0] not in gym.registry:
        return _imported(env, "env")
    if env not in gym.registry:
        raise EnvError(
            f"{env!r} is not a registered gymnasium id nor a module:Class path"
            + _did_you_mean(env, list(gym.registry))
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
        wrap = _imported(wrapper.name, f"{field}.name")
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
            + _did_you_mean(wrapper.name, gymnasium_wrapper_names()),
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
            hint = _did_you_mean(key, names) or f"; {takes}"
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


def space_info(
    obs_space: gym.Space,
    act_space: gym.Space,
    model: ModelConfig | None = None,
    images: bool = True,
) -> SpaceInfo:
    """Checks the spaces are supported by the model (`spec.trainer.model`, its defaults when
    None) and describes them; `images` is False for an algorithm whose networks take flat
    observations only."""
    if model is None:
        from kuberl_contract.config import ModelConfig

        model = ModelConfig()
    image = None
    if isinstance(obs_space, gym.spaces.Box):
        obs_dim, obs_n = int(np.prod(obs_space.shape)), None
        image = image_layout(obs_space, model, images)
    elif isinstance(obs_space, gym.spaces.Discrete):
        obs_dim, obs_n = int(obs_space.n), int(obs_space.n)
        if model.encoder == "cnn":
            raise EnvError(f"the observation space {obs_space} is no image", MODEL_ENCODER)
    else:
        raise EnvError(
            f"observation space {obs_space} is not supported: use Box or Discrete "
            "(wrappers: [{name: FlattenObservation}] flattens Dict and Tuple spaces into a Box)"
        )
    obs_start = int(obs_space.start) if isinstance(obs_space, gym.spaces.Discrete) else 0
    if isinstance(act_space, gym.spaces.Discrete):
        if act_space.start != 0:
            raise EnvError(
                f"action space {act_space} starts at {act_space.start}: kuberl's policies choose "
                f"actions 0 to n-1; wrap the env (wrappers: [{{name: module:Class}}]) so that its "
                "actions start at 0"
            )
        return SpaceInfo(obs_dim, obs_n, int(act_space.n), 1, None, None, image, obs_start)
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
            image,
            obs_start,
        )
    raise EnvError(f"action space {act_space} is not supported: use Box or Discrete")


def job_space_info(envs: gym.vector.VectorEnv, config: Any) -> SpaceInfo:
    """The spaces of a job's envs as its networks take them (`config` is a trainer's config, or
    its Frozen copy)."""
    return space_info(
        envs.single_observation_space,
        envs.single_action_space,
        config.model,
        config.image_observations,
    )


MODEL_ENCODER = "model.encoder"
NORMALIZED_OBSERVATIONS = "normalization.observations"
"""The field under spec.trainer that turns observation normalization on."""
"""The field under spec.trainer that picks the encoder."""


def image_layout(obs_space: gym.spaces.Box, model: ModelConfig, images: bool) -> ImageLayout | None:
    """The layout of the Box's images when the model encodes them with the CNN, None for the
    MLP; an encoder that does not fit the space, or convolutions that shrink its images to
    nothing, are refused naming the field."""
    shape, uint8 = tuple(obs_space.shape), obs_space.dtype == np.uint8
    rank_fits = len(shape) in (2, 3)
    if model.encoder == "mlp" or (model.encoder == "auto" and not (uint8 and rank_fits)):
        return None
    if not rank_fits:
        raise EnvError(
            f"the observation space {obs_space} is no image: the CNN takes (C, H, W), (H, W, C) "
            "or (H, W) observations; use encoder: mlp",
            MODEL_ENCODER,
        )
    if not images:
        raise EnvError(
            f"the observations are images {shape}, and this algorithm's networks take flat "
            "observations only; set encoder: mlp to flatten them",
            MODEL_ENCODER,
        )
    # (H, W, C) when the last axis is the smallest, as a raw frame's colour channels are
    layout = ImageLayout(shape, len(shape) == 3 and shape[-1] < shape[0], uint8)
    height, width = layout.height_width
    for index, (_, kernel, stride) in enumerate(model.conv_filters):
        if kernel > min(height, width):  # the convolution would leave less than 1x1
            raise EnvError(
                f"its {kernel}x{kernel} kernel does not fit the {height}x{width} image "
                f"{'observations' if index == 0 else 'that the convolutions before it leave'} "
                f"(observations {shape}); use smaller kernels or strides",
                f"model.convFilters[{index}]",
            )
        height, width = _convolved(height, kernel, stride), _convolved(width, kernel, stride)
    return layout


def conv_output_size(layout: ImageLayout, conv_filters: Sequence[Sequence[int]]) -> int:
    """Values per image the convolutions leave (channels x height x width)."""
    *_, (_, out_channels, _, height, width) = _convolutions(layout, conv_filters)
    return out_channels * height * width


def conv_multiply_adds(
    layout: ImageLayout, conv_filters: Sequence[Sequence[int]], features: int
) -> int:
    """Multiply-adds of a CNN's convolutions and its dense layer of `features` units, per image."""
    convolutions = sum(
        height * width * out_channels * kernel * kernel * in_channels
        for in_channels, out_channels, kernel, height, width in _convolutions(layout, conv_filters)
    )
    return convolutions + conv_output_size(layout, conv_filters) * features


def _convolutions(
    layout: ImageLayout, conv_filters: Sequence[Sequence[int]]
) -> Iterator[tuple[int, int, int, int, int]]:
    """Each convolution's input channels, output channels, kernel, and the height and width of
    what it leaves."""
    height, width = layout.height_width
    in_channels = layout.channels
    for out_channels, kernel, stride in conv_filters:
        height, width = _convolved(height, kernel, stride), _convolved(width, kernel, stride)
        yield in_channels, out_channels, kernel, height, width
        in_channels = out_channels


def _convolved(size: int, kernel: int, stride: int) -> int:
    """A side of an image after a convolution without padding."""
    return (size - kernel) // stride + 1


def env_problem(
    env: str,
    env_config: dict[str, Any],
    discrete_actions_only: bool = False,
    continuous_actions_only: bool = False,
    wrappers: Sequence[WrapperConfig] = (),
    normalize_observations: bool = False,
    model: ModelConfig | None = None,
    images: bool = True,
) -> EnvProblem | None:
    """Why this env cannot be trained on, or None when it can (used by validation). The wrappers'
    names and keyword arguments are checked first, then the env is made and wrapped as the rollout
    workers make it, so an envConfig that only the native vector env rejects is caught here too;
    `model` and `images` are checked against its spaces as `space_info` checks them."""
    try:
        for index, wrapper in enumerate(wrappers):
            wrapper_creator(wrapper, f"wrappers[{index}]")
        envs = make_vector_env(env, env_config, 1, wrappers)
        try:
            info = space_info(
                envs.single_observation_space, envs.single_action_space, model, images
            )
        finally:
            envs.close()
    except EnvError as exc:
        return EnvProblem(exc.field, exc.message)
    if discrete_actions_only and not info.discrete_actions:
        return EnvProblem(
            "env",
            f"action space {envs.single_action_space} is continuous but the algorithm needs "
            "Discrete actions; use PPO, A2C or PG for continuous control",
        )
    if continuous_actions_only and info.discrete_actions:
        return EnvProblem(
            "env",
            f"action space {envs.single_action_space} is discrete but the algorithm needs "
            "Box (continuous) actions; use DQN or PPO for Discrete actions",
        )
    if normalize_observations and (problem := observation_normalization_problem(info)):
        return EnvProblem(NORMALIZED_OBSERVATIONS, problem)
    return None


def observation_normalization_problem(info: SpaceInfo) -> str | None:
    """Why these observations cannot be normalized (only Box ones the MLP encodes are), or
    None."""
    if info.image is not None:
        return (
            f"the observations are images {info.image.shape} that the CNN scales itself; set it "
            "to false (or model.encoder to mlp)"
        )
    if info.obs_discrete_n is None:
        return None
    return (
        f"the observation space is Discrete({info.obs_discrete_n}), and only Box observations "
        "are normalized; set it to false"
    )


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
    ended = terminated | truncated
    if atari.LIFE_LOST in info:
        ended = ended & ~info[atari.LIFE_LOST]
    return info.get(atari.RAW_REWARD, rewards), ended


def encode_obs(obs: np.ndarray, info: SpaceInfo) -> np.ndarray:
    """A (batch, *info.obs_shape) array: images as the envs return them (uint8 ones without a
    copy), other Box observations flattened to float32, Discrete ones one-hot."""
    if info.image is not None:
        return np.asarray(obs, dtype=info.obs_dtype)
    if info.obs_discrete_n is not None:
        indices = np.asarray(obs, dtype=np.int64) - info.obs_discrete_start
        return np.eye(info.obs_discrete_n, dtype=np.float32)[indices]
    return np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
