"""Torch networks and action distributions shared by the policies."""

from __future__ import annotations

import itertools
import math

import torch
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
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((spaces.action_dim,), float(initial_log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        assert self.critic is not None
        return self.critic(obs).squeeze(-1)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator, explore: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities for a batch of observations."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            if explore:  # Gumbel-max: one uniform draw per logit, cheaper than a Categorical
                noise = torch.rand(out.shape, generator=generator).clamp_(1e-10, 1.0)
                actions = torch.argmax(logp_all - torch.log(-torch.log(noise)), dim=-1)
            else:
                actions = torch.argmax(out, dim=-1)
            return actions, logp_all.gather(1, actions[:, None]).squeeze(1)
        if explore:
            noise = torch.randn(out.shape, generator=generator)
            actions = out + noise * self.log_std.exp()
        else:
            actions = out
        return actions, _gaussian_logp(out, self.log_std, actions)

    def logp_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of taken actions and the policy's entropy, with gradients."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(1, actions.long()[:, None]).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        entropy = (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum().expand(len(obs))
        return _gaussian_logp(out, self.log_std, actions), entropy


def _gaussian_logp(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor):
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
