"""Torch networks and action distributions shared by the policies."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from kuberl_contract.config import ModelConfig
from kuberl_trainer.envs.spaces import ImageLayout, SpaceInfo, conv_multiply_adds, conv_output_size
from kuberl_trainer.policies.distributions import (
    NOISE_CHUNK,
    Noise,
    action_distribution,
    features_of,
    gumbel_of,
    legal_only,
)

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
BFLOAT16_MIN_MULTIPLY_ADDS = 1_000_000
"""The smallest CNN (multiply-adds per image) that `precision: auto` runs in bfloat16: below it
the casts cost more than bfloat16 saves (a CNN of 10x10 images, 0.3 million, acted 20% slower
at 8 images and 1.2x faster at 64; the Nature CNN, 9 million, 1.6x and 2.8x faster)."""


def mlp(
    in_dim: int, hidden_sizes: list[int], out_dim: int, activation: str, out_gain: float = 1.0
) -> nn.Sequential:
    """A fully connected network with orthogonal initialisation (the PPO implementation details
    of Engstrom et al. 2020: sqrt(2) gain in the body, a small gain on policy heads)."""
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden_sizes]
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [_orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), ACTIVATIONS[activation]()]
    layers.append(_orthogonal(nn.Linear(sizes[-1], out_dim), out_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear | nn.Conv2d, gain: float) -> nn.Linear | nn.Conv2d:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class PixelConv2d(nn.Conv2d):
    """The first convolution over uint8 pixels, which scales them to [0, 1] through its weight
    (the Nature CNN's first has 8,192 values) rather than the images (28,224 values per frame);
    its weight and bias are a Conv2d's, as checkpoints hold them."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(images, self.weight * (1.0 / 255.0), self.bias)


class ConvEncoder(nn.Module):
    """The CNN: `model.conv_filters` convolutions and a dense layer of `model.features` units,
    each followed by `model.conv_activation` (the Nature CNN by default). It takes images as the
    envs return them, uint8 ones scaled to [0, 1] by its first convolution, so that they travel
    as uint8 up to this layer, and (H, W, C) ones transposed here, a view and no copy.

    Convolutions run on channels-last tensors (weights included): oneDNN's CPU kernels take them
    directly, and a forward and backward pass of the Nature CNN on 64 frames takes 0.22 s instead
    of 0.35 on two cores."""

    def __init__(self, image: ImageLayout, model: ModelConfig):
        super().__init__()
        self.image = image
        activation = ACTIVATIONS[model.conv_activation]
        layers: list[nn.Module] = []
        channels = image.channels
        for index, (out_channels, kernel, stride) in enumerate(model.conv_filters):
            kind = PixelConv2d if index == 0 and image.uint8 else nn.Conv2d
            conv = kind(channels, out_channels, kernel, stride)
            layers += [_orthogonal(conv, math.sqrt(2)), activation()]
            channels = out_channels
        flat = conv_output_size(image, model.conv_filters)
        layers += [nn.Flatten(), _orthogonal(nn.Linear(flat, model.features), math.sqrt(2))]
        self.net = nn.Sequential(*layers, activation()).to(memory_format=torch.channels_last)
        self.features = model.features
        self.bfloat16_on = bfloat16_devices(model, image)
        """The device types on which this CNN computes in bfloat16 (model.precision)."""
        self._acting_weights: tuple[tuple[tuple[int, int], ...], dict[str, torch.Tensor]] | None
        self._acting_weights = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features in float32 for the heads, whatever the CNN computed in."""
        bfloat16 = obs.device.type in self.bfloat16_on
        images = obs
        if len(self.image.shape) == 2:
            images = images.unsqueeze(1)
        elif self.image.channels_last:
            images = images.permute(0, 3, 1, 2)  # already channels-last in memory
        # Laid out channels-last while still uint8 (a quarter of the bytes to move), then cast
        # as it is: a third of the time of casting first at 256 frames.
        images = images.contiguous(memory_format=torch.channels_last)
        images = images.to(torch.bfloat16 if bfloat16 else torch.float32)
        if not bfloat16:
            return self.net(images)
        if torch.is_grad_enabled():  # learning: float32 weights, cast by autocast as they are used
            with torch.autocast(obs.device.type, dtype=torch.bfloat16):
                return self.net(images).float()
        # Acting: a bfloat16 copy of the weights, cast once per weight update rather than for
        # every forward pass (at 64 frames, 2x the rate of autocast's per-call casts).
        return functional_call(self.net, self._bfloat16_weights(), (images,)).float()

    def _bfloat16_weights(self) -> dict[str, torch.Tensor]:
        """The weights in bfloat16, cast again whenever one changed: in place (an optimizer
        step, load_state_dict) bumps a tensor's version, a move to a device replaces it."""
        weights = dict(self.net.named_parameters())
        stamp = tuple((weight.data_ptr(), weight._version) for weight in weights.values())
        if self._acting_weights is None or self._acting_weights[0] != stamp:
            cast = {name: weight.detach().to(torch.bfloat16) for name, weight in weights.items()}
            self._acting_weights = (stamp, cast)
        return self._acting_weights[1]


def bfloat16_devices(model: ModelConfig, image: ImageLayout) -> frozenset[str]:
    """Where a CNN of `model` over `image` computes in bfloat16 (`model.precision`): everywhere
    when asked; with auto, on a CPU that has native bfloat16, for a CNN large enough to gain."""
    if model.precision == "bfloat16":
        return frozenset({"cpu", "cuda", "mps", "xpu", "meta"})
    if model.precision == "auto" and native_bfloat16_cpu():
        size = conv_multiply_adds(image, model.conv_filters, model.features)
        if size >= BFLOAT16_MIN_MULTIPLY_ADDS:
            return frozenset({"cpu"})
    return frozenset()


@functools.cache
def native_bfloat16_cpu() -> bool:
    """Whether this CPU computes bfloat16 natively (oneDNN's AVX512-BF16 or AMX kernels);
    elsewhere bfloat16 is emulated, slower than float32."""
    try:
        return bool(
            torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )
    except (AttributeError, RuntimeError):
        return False


def use_float32(module: nn.Module) -> nn.Module:
    """`module` with every CNN in it computing in float32, whatever model.precision says: what an
    exported policy does, which a loaded policy must act as."""
    for encoder in module.modules():
        if isinstance(encoder, ConvEncoder):
            encoder.bfloat16_on = frozenset()
    return module


def encoder_and_features(
    spaces: SpaceInfo, model: ModelConfig, hidden_sizes: list[int], activation: str
) -> tuple[nn.Module, int]:
    """The trunk that encodes observations and the width of what it outputs: the CNN for
    images, the hidden layers of an MLP (each followed by `activation`) otherwise."""
    if spaces.image is not None:
        encoder = ConvEncoder(spaces.image, model)
        return encoder, encoder.features
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise([spaces.feature_dim, *hidden_sizes]):
        layers += [_orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers), hidden_sizes[-1]


def shares_encoder(spaces: SpaceInfo, model: ModelConfig) -> bool:
    """Whether the policy and the value function share one encoder (model.vf_share_layers)."""
    if model.vf_share_layers is None:
        return spaces.image is not None
    return model.vf_share_layers


class ActorCritic(nn.Module):
    """A policy network and an optional value network (PG has none), separate or sharing one
    encoder (`model.vf_share_layers`).

    Separate MLPs are `actor` and `critic`, each observation-to-output; separate CNNs the same,
    each its own CNN and a linear head. Shared, `encoder` is the one trunk and `actor` and
    `critic` are linear heads on its features.

    With an action mask (`SpaceInfo.action_mask_n`), both networks take the observations without
    its columns, and the logits of the actions it rules out are ILLEGAL (distributions.py)
    wherever they come out: acting, sampling, log-probabilities and entropies all follow."""

    def __init__(
        self,
        spaces: SpaceInfo,
        hidden_sizes: list[int],
        activation: str,
        with_critic: bool,
        initial_log_std: float = 0.0,
        model: ModelConfig | None = None,
    ):
        super().__init__()
        model = model or ModelConfig()
        self.discrete = spaces.discrete_actions
        self.mask_n = spaces.action_mask_n
        self.distribution = action_distribution(spaces)
        out = spaces.action_discrete_n if self.discrete else spaces.action_dim
        self.encoder: nn.Module | None = None
        if with_critic and shares_encoder(spaces, model):
            self.encoder, features = encoder_and_features(spaces, model, hidden_sizes, activation)
            self.actor = mlp(features, [], out, activation, out_gain=0.01)
            self.critic = mlp(features, [], 1, activation)
        elif spaces.image is not None:
            self.actor = _headed(spaces, model, out, out_gain=0.01)
            self.critic = _headed(spaces, model, 1) if with_critic else None
        else:
            features = spaces.feature_dim
            self.actor = mlp(features, hidden_sizes, out, activation, out_gain=0.01)
            self.critic = mlp(features, hidden_sizes, 1, activation) if with_critic else None
        # Separate MLPs are called without nn.Module dispatch when acting and predicting values
        # without gradients: at a batch of 8 observations the per-module Python overhead costs
        # as much as the matrix products. (A CNN's convolutions dwarf that overhead.)
        self._fast = self.encoder is None and spaces.image is None
        if self._fast:
            self._actor_layers = _linear_layers(self.actor)
            self._critic_layers = _linear_layers(self.critic) if with_critic else []
            self._activation = {"tanh": tanh_in_place, "relu": torch.relu_}[activation]
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((spaces.action_dim,), float(initial_log_std)))

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        obs = features_of(obs, self.mask_n)
        return obs if self.encoder is None else self.encoder(obs)

    def _legal(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The logits `out` with the actions `obs`'s mask rules out made ILLEGAL."""
        return legal_only(torch, out, obs, self.mask_n)

    def dist_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The action distribution's inputs (logits, or the Gaussian's mean), with gradients."""
        return self._legal(self.actor(self._features(obs)), obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        assert self.critic is not None
        return self.critic(self._features(obs)).squeeze(-1)

    def predict_value(self, obs: torch.Tensor) -> torch.Tensor:
        """`value` for observations that need no gradient (postprocessing), faster."""
        if not self._fast:
            return self.value(obs)
        return self._forward(self._critic_layers, features_of(obs, self.mask_n)).squeeze(-1)

    def _forward(self, layers: list[tuple[torch.Tensor, torch.Tensor]], obs: torch.Tensor):
        out = obs
        for index, (weight, bias) in enumerate(layers):
            out = F.linear(out, weight, bias)
            if index < len(layers) - 1:
                out = self._activation(out)
        return out

    def sample(self, obs: torch.Tensor, noise: Noise | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions for a batch of observations (sampled with `noise`, greedy without) and the
        distribution's inputs (logits, or the Gaussian's mean). Log-probabilities are left to
        one batched `logp_of` call after the rollout, so a step costs one forward pass."""
        if self._fast:
            out = self._legal(self._forward(self._actor_layers, features_of(obs, self.mask_n)), obs)
        else:
            out = self.dist_inputs(obs)
        return self._act(out, noise), out

    def sample_and_value(
        self, obs: torch.Tensor, noise: Noise | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`sample` and the values of the same observations, from one pass of the encoder."""
        features = self._features(obs)
        out = self._legal(self.actor(features), obs)
        assert self.critic is not None
        return self._act(out, noise), out, self.critic(features).squeeze(-1)

    def _act(self, out: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        """Actions from the distribution's inputs: sampled with `noise`, greedy without."""
        std = None if self.discrete or noise is None else self.log_std.exp()
        return self.distribution.actions(torch, out, noise, std)

    def logp_of(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of actions under distributions given by `sample`'s inputs."""
        if self.discrete:
            return self._categorical(dist_inputs, actions)[0]
        return gaussian_logp(dist_inputs, self.log_std, actions)

    def _categorical(
        self, logits: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of taken actions and entropies of (masked) logits, each summed over
        the components of MultiDiscrete actions: a product of Categoricals."""
        logp, entropy = 0.0, 0.0
        parts = self.distribution.parts(logits)
        for part, taken in zip(parts, self.distribution.components(actions), strict=True):
            logp_all = torch.log_softmax(part, dim=-1)
            logp = logp + logp_all.gather(-1, taken.long()[..., None]).squeeze(-1)
            entropy = entropy - (logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def logp_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of taken actions and the policy's entropy, with gradients."""
        return self._logp_entropy_of(self.dist_inputs(obs), actions)

    def logp_entropy_value(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`logp_entropy` and `value` of the same observations, encoding them once where the
        encoder is shared."""
        features = self._features(obs)
        assert self.critic is not None
        values = self.critic(features).squeeze(-1)
        return *self._logp_entropy_of(self._legal(self.actor(features), obs), actions), values

    def _logp_entropy_of(
        self, out: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            return self._categorical(out, actions)
        entropy = (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum().expand(len(out))
        return gaussian_logp(out, self.log_std, actions), entropy


def _headed(spaces: SpaceInfo, model: ModelConfig, out: int, out_gain: float = 1.0) -> nn.Module:
    """A CNN of its own with a linear head of `out` units."""
    assert spaces.image is not None
    encoder = ConvEncoder(spaces.image, model)
    head = _orthogonal(nn.Linear(encoder.features, out), out_gain)
    return nn.Sequential(encoder, head)


def _linear_layers(network: nn.Sequential) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(m.weight, m.bias) for m in network if isinstance(m, nn.Linear)]


def tanh_in_place(x: torch.Tensor) -> torch.Tensor:
    """tanh of an intermediate result that needs no gradient, overwriting it. From a few thousand
    elements on, numpy's vectorized tanh computes it on the CPU: torch 2.13's CPU tanh is several
    times slower (a 1024x64 batch: 175 µs against 25), and at a thousand envs the activations would
    be most of a step's cost."""
    if x.device.type == "cpu" and x.numel() >= 4096:
        array = x.numpy()
        np.tanh(array, out=array)
        return x
    return x.tanh_()


def gaussian_logp(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor):
    """log N(actions; mean, exp(log_std)^2), summed over the action dimensions."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class NoiseSource(Noise):
    """Gumbel and standard normal draws from a torch generator, handed out on `device`.

    The draws come from a CPU generator whatever `device` is and each chunk moves there in one
    transfer: a seed gives the same noise on every machine."""

    def __init__(self, generator: torch.Generator, chunk: int = NOISE_CHUNK):
        super().__init__(chunk)
        self.generator = generator
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> None:
        """Hand out noise on `device`, starting with what is left of the current chunks."""
        self.device = device
        self._buffers = {
            key: (buffer.to(device), position) for key, (buffer, position) in self._buffers.items()
        }

    def _draw(self, kind: str, size: tuple[int, ...]) -> torch.Tensor:
        if kind == "normal":
            return torch.randn(size, generator=self.generator).to(self.device)
        return gumbel_of(torch, torch.rand(size, generator=self.generator)).to(self.device)
