"""Torch networks and action distributions shared by the policies."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl_trainer.envs import SpaceInfo

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


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


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate policy and value networks; the value network is optional (PG has none)."""

    def __init__(
        self,
        spaces: SpaceInfo,
        hidden_sizes: list[int],
        activation: str,
        with_critic: bool,
        initial_log_std: float = 0.0,
    ):
        super().__init__()
        self.discrete = spaces.discrete_actions
        out = spaces.action_discrete_n if self.discrete else spaces.action_dim
        self.actor = mlp(spaces.obs_dim, hidden_sizes, out, activation, out_gain=0.01)
        self.critic = mlp(spaces.obs_dim, hidden_sizes, 1, activation) if with_critic else None
        # The same parameters, called without nn.Module dispatch when acting and predicting values
        # without gradients: at a batch of 8 observations the per-module Python overhead costs as
        # much as the matrix products.
        self._actor_layers = _linear_layers(self.actor)
        self._critic_layers = _linear_layers(self.critic) if with_critic else []
        self._activation = {"tanh": tanh_in_place, "relu": torch.relu_}[activation]
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((spaces.action_dim,), float(initial_log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        assert self.critic is not None
        return self.critic(obs).squeeze(-1)

    def predict_value(self, obs: torch.Tensor) -> torch.Tensor:
        """`value` for observations that need no gradient (postprocessing), faster."""
        return self._forward(self._critic_layers, obs).squeeze(-1)

    def _forward(self, layers: list[tuple[torch.Tensor, torch.Tensor]], obs: torch.Tensor):
        out = obs
        for index, (weight, bias) in enumerate(layers):
            out = F.linear(out, weight, bias)
            if index < len(layers) - 1:
                out = self._activation(out)
        return out

    def sample(
        self, obs: torch.Tensor, noise: NoiseSource | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions for a batch of observations (sampled with `noise`, greedy without) and the
        distribution's inputs (logits, or the Gaussian's mean). Log-probabilities are left to
        one batched `logp_of` call after the rollout, so a step costs one forward pass."""
        out = self._forward(self._actor_layers, obs)
        if noise is None:
            return (torch.argmax(out, dim=-1) if self.discrete else out), out
        if self.discrete:  # Gumbel-max: argmax(logits + Gumbel noise) ~ Categorical(logits)
            return torch.argmax(out + noise.gumbel(out.shape), dim=-1), out
        return out + noise.normal(out.shape) * self.log_std.exp(), out

    def logp_of(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of actions under distributions given by `sample`'s inputs."""
        if self.discrete:
            logp_all = torch.log_softmax(dist_inputs, dim=-1)
            return logp_all.gather(1, actions.long()[:, None]).squeeze(1)
        return gaussian_logp(dist_inputs, self.log_std, actions)

    def logp_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of taken actions and the policy's entropy, with gradients."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp_all.gather(1, actions.long()[:, None]).squeeze(1), entropy
        entropy = (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum().expand(len(obs))
        return gaussian_logp(out, self.log_std, actions), entropy


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


class NoiseSource:
    """Random draws made a chunk of steps at a time: one generator call per chunk instead of
    several tiny ones per env step, which dominate at CartPole's step cost.

    The draws come from a CPU generator whatever `device` is and each chunk moves there in one
    transfer: a seed gives the same noise on every machine."""

    def __init__(self, generator: torch.Generator, chunk: int = 256):
        self.generator = generator
        self.chunk = chunk
        self.device = torch.device("cpu")
        self._buffers: dict[tuple[str, torch.Size], tuple[torch.Tensor, int]] = {}

    def to(self, device: torch.device) -> None:
        """Hand out noise on `device`, starting with what is left of the current chunks."""
        self.device = device
        self._buffers = {
            key: (buffer.to(device), position) for key, (buffer, position) in self._buffers.items()
        }

    def gumbel(self, shape: torch.Size) -> torch.Tensor:
        return self._next("gumbel", shape)

    def normal(self, shape: torch.Size) -> torch.Tensor:
        return self._next("normal", shape)

    def _next(self, kind: str, shape: torch.Size) -> torch.Tensor:
        buffer, position = self._buffers.get((kind, shape), (None, self.chunk))
        if position == self.chunk:
            size = (self.chunk, *shape)
            if kind == "normal":
                buffer = torch.randn(size, generator=self.generator)
            else:
                uniform = torch.rand(size, generator=self.generator).clamp_(1e-10, 1.0)
                buffer = -torch.log(-torch.log(uniform))
            buffer = buffer.to(self.device)
            position = 0
        self._buffers[(kind, shape)] = (buffer, position + 1)
        return buffer[position]
