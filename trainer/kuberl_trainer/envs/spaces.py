"""An env's spaces as the networks take them: `space_info` checks that the model
(spec.trainer.model) can take them and describes them (SpaceInfo: flat or image observations,
Discrete, MultiDiscrete or Box actions, an action mask), the CNN's sizes follow from an image's
layout, and `encode_obs` turns the envs' observations into what the model takes.

Observations may be a Box, a Discrete, or (flat, for the MLP: encoding.py) a MultiDiscrete, a
MultiBinary, a Dict or a Tuple; a top-level Dict's `action_mask` masks the actions. Actions may be
Discrete, MultiDiscrete or Box. Anything else is an EnvError naming the field of spec.trainer,
reported when the job is validated, not mid-run (problems.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from kuberl_trainer.envs.encoding import (
    ACTION_MASK,
    encode_structured,
    encoded_width,
    holds_image,
    is_structured,
    mask_space,
    structure_problem,
)
from kuberl_trainer.envs.making import EnvError

if TYPE_CHECKING:  # a remote worker imports this module, not the config (frozen.py says why)
    from kuberl_contract.config import ModelConfig

MODEL_ENCODER = "model.encoder"
"""The field under spec.trainer that picks the encoder."""


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

    obs_dim: int  # columns of an encoded flat observation, an action mask's included
    obs_discrete_n: int | None  # set when observations are Discrete and get one-hot encoded
    action_discrete_n: int | None  # Discrete actions: n; MultiDiscrete: sum(nvec), the logits
    action_dim: int  # 1 for Discrete, k for MultiDiscrete, the flat size for Box
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    image: ImageLayout | None = None  # set when a CNN encodes the observations
    obs_discrete_start: int = 0  # Discrete observations: the first one's value (Discrete.start)
    structured: gym.Space | None = None  # an observation space encoding.py encodes
    action_nvec: tuple[int, ...] | None = None  # MultiDiscrete actions: each component's n
    action_mask_n: int | None = None  # the legal actions' mask: the last n observation columns

    @property
    def discrete_actions(self) -> bool:
        """Discrete or MultiDiscrete actions: logits, no Gaussian."""
        return self.action_discrete_n is not None

    @property
    def multi_discrete_actions(self) -> bool:
        return self.action_nvec is not None

    @property
    def feature_dim(self) -> int:
        """Columns of a flat observation the networks take: the mask's left out."""
        return self.obs_dim - (self.action_mask_n or 0)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation as the model takes it: flat for the MLP, the env's image for the
        CNN."""
        return (self.obs_dim,) if self.image is None else self.image.shape

    @property
    def obs_dtype(self) -> np.dtype:
        """uint8 for uint8 images, which stay uint8 up to the CNN; float32 otherwise."""
        return np.dtype(np.uint8 if self.image is not None and self.image.uint8 else np.float32)


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
    image, structured = None, None
    if isinstance(obs_space, gym.spaces.Box):
        obs_dim, obs_n = int(np.prod(obs_space.shape)), None
        image = image_layout(obs_space, model, images)
    elif isinstance(obs_space, gym.spaces.Discrete):
        obs_dim, obs_n = int(obs_space.n), int(obs_space.n)
        if model.encoder == "cnn":
            raise EnvError(f"the observation space {obs_space} is no image", MODEL_ENCODER)
    elif is_structured(obs_space):
        obs_dim, obs_n, structured = _structured_dim(obs_space, model), None, obs_space
    else:
        raise EnvError(
            f"observation space {obs_space} is not supported: use Box, Discrete, MultiDiscrete, "
            "MultiBinary, or a Dict or Tuple of them"
        )
    obs_start = int(obs_space.start) if isinstance(obs_space, gym.spaces.Discrete) else 0
    observations = {
        "obs_dim": obs_dim,
        "obs_discrete_n": obs_n,
        "image": image,
        "obs_discrete_start": obs_start,
        "structured": structured,
    }
    if isinstance(act_space, gym.spaces.Discrete):
        if act_space.start != 0:
            raise EnvError(
                f"action space {act_space} starts at {act_space.start}: kuberl's policies choose "
                f"actions 0 to n-1; wrap the env (wrappers: [{{name: module:Class}}]) so that its "
                "actions start at 0"
            )
        mask_n = _mask_n(obs_space, act_space, int(act_space.n))
        return SpaceInfo(
            **observations,
            action_discrete_n=int(act_space.n),
            action_dim=1,
            action_low=None,
            action_high=None,
            action_mask_n=mask_n,
        )
    if isinstance(act_space, gym.spaces.MultiDiscrete):
        if act_space.nvec.ndim != 1 or np.any(act_space.start != 0):
            raise EnvError(
                f"action space {act_space} is not supported: kuberl's policies choose a vector "
                "of components 0 to nvec[i]-1; use a one-dimensional MultiDiscrete starting at 0"
            )
        nvec = tuple(int(n) for n in act_space.nvec)
        return SpaceInfo(
            **observations,
            action_discrete_n=sum(nvec),
            action_dim=len(nvec),
            action_low=None,
            action_high=None,
            action_nvec=nvec,
            action_mask_n=_mask_n(obs_space, act_space, sum(nvec)),
        )
    if isinstance(act_space, gym.spaces.Box):
        if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
            raise EnvError(f"action space {act_space} must have finite bounds")
        _mask_n(obs_space, act_space, None)
        return SpaceInfo(
            **observations,
            action_discrete_n=None,
            action_dim=int(np.prod(act_space.shape)),
            action_low=act_space.low.astype(np.float32).ravel(),
            action_high=act_space.high.astype(np.float32).ravel(),
        )
    raise EnvError(f"action space {act_space} is not supported: use Box, Discrete or MultiDiscrete")


def _structured_dim(obs_space: gym.Space, model: ModelConfig) -> int:
    """The flat width of a structured observation space; an EnvError where it cannot be
    encoded, or holds images while the model asks for the CNN."""
    if problem := structure_problem(obs_space):
        raise EnvError(f"observation space {obs_space}: {problem}")
    if model.encoder == "cnn":
        image = " (images in it are flattened)" if holds_image(obs_space) else ""
        raise EnvError(
            f"the observation space {obs_space} is a {type(obs_space).__name__}: the CNN takes "
            f"one image, and such spaces are encoded flat for the MLP{image}; use encoder: mlp",
            MODEL_ENCODER,
        )
    return encoded_width(obs_space)


def _mask_n(obs_space: gym.Space, act_space: gym.Space, logits: int | None) -> int | None:
    """The width of the observations' action mask, None without one; an EnvError when the mask
    does not fit the actions (`logits`: their count, sum(nvec) for MultiDiscrete; None for Box
    actions, which no mask can mask)."""
    mask = mask_space(obs_space)
    if mask is None:
        return None
    shape = tuple(mask.shape) if isinstance(mask, gym.spaces.Box | gym.spaces.MultiBinary) else ()
    if logits is None or len(shape) != 1 or shape[0] != logits:
        wanted = "no mask (Box actions)" if logits is None else f"MultiBinary({logits})"
        raise EnvError(
            f"the observations' {ACTION_MASK!r} {mask} does not fit the action space "
            f"{act_space}: it must be {wanted}, 1 where an action is legal"
            + (", the components' masks concatenated" if logits and act_space.shape else "")
        )
    return shape[0]


def job_space_info(envs: gym.vector.VectorEnv, config: Any) -> SpaceInfo:
    """The spaces of a job's envs as its networks take them (`config` is a trainer's config, or
    its Frozen copy)."""
    return space_info(
        envs.single_observation_space,
        envs.single_action_space,
        config.model,
        config.image_observations,
    )


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


def encode_obs(obs: Any, info: SpaceInfo) -> np.ndarray:
    """A (batch, *info.obs_shape) array: images as the envs return them (uint8 ones without a
    copy), other Box observations flattened to float32, Discrete ones one-hot, the structured
    ones flat (encoding.py: the action mask last)."""
    if info.structured is not None:
        return encode_structured(info.structured, obs)
    if info.image is not None:
        return np.asarray(obs, dtype=info.obs_dtype)
    if info.obs_discrete_n is not None:
        indices = np.asarray(obs, dtype=np.int64) - info.obs_discrete_start
        return np.eye(info.obs_discrete_n, dtype=np.float32)[indices]
    return np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
