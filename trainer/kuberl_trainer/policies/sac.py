"""Soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"): a
squashed-Gaussian actor, twin Q critics with polyak-averaged targets, and an entropy coefficient
alpha learned towards a target entropy.

Box action spaces only. The actor's samples are squashed into [-1, 1] by tanh; the replay buffer
and the critics see them there, and the env gets them rescaled to its bounds.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from kuberl_contract.config import AnyTrainerConfig
from kuberl_contract.progress_row import (
    ALPHA,
    ALPHA_LOSS,
    ENTROPY,
    GRAD_NORM,
    POLICY_LOSS,
    Q_MEAN,
    TD_ERROR_MEAN,
    TD_LOSS,
)
from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.distributions import SquashedGaussian, mean_and_log_std
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.models import NoiseSource, gaussian_logp, mlp
from kuberl_trainer.policies.replay import ReplayPolicy


def squashed_gaussian_logp(
    mean: torch.Tensor, log_std: torch.Tensor, pre_tanh: torch.Tensor
) -> torch.Tensor:
    """Log-density of a = tanh(u), u ~ N(mean, exp(log_std)), summed over action dimensions:
    the Gaussian's log-density of u minus log |da/du| = log(1 - tanh(u)^2), written as
    2 (log 2 - u - softplus(-2u)), which stays finite where tanh(u) rounds to 1."""
    log_abs_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return gaussian_logp(mean, log_std, pre_tanh) - log_abs_det.sum(-1)


class SquashedGaussianActor(nn.Module):
    """The policy: a Gaussian over (B, obs_dim) observations whose samples tanh squashes."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: list[int], activation: str):
        super().__init__()
        # A small last layer starts every state near mean 0, std 1: broad, unbiased exploration.
        self.net = mlp(obs_dim, hidden_sizes, 2 * action_dim, activation, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and log standard deviation, before squashing."""
        return mean_and_log_std(torch, self.net(obs))

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed actions tanh(mean + std * noise) and their log-densities, differentiable
        through the sample (the reparameterisation trick)."""
        mean, log_std = self(obs)
        pre_tanh = mean + log_std.exp() * noise
        return torch.tanh(pre_tanh), squashed_gaussian_logp(mean, log_std, pre_tanh)


class TwinQ(nn.Module):
    """Two independent Q-networks: (B, obs_dim), (B, action_dim) → (B, 2). Bootstrapping from
    the smaller of two estimates counters the overestimation a maximising actor breeds
    (clipped double Q, Fujimoto et al. 2018)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: list[int], activation: str):
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, hidden_sizes, 1, activation)
        self.q2 = mlp(obs_dim + action_dim, hidden_sizes, 1, activation)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        inputs = torch.cat([obs, actions], dim=-1)
        return torch.cat([self.q1(inputs), self.q2(inputs)], dim=-1)


class SACModel(nn.Module):
    """Everything SAC learns, under one Adam: each parameter gets the gradient of its own loss
    only (the losses are built so), which is what three optimizers with one step size do."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: list[int],
        activation: str,
        initial_alpha: float,
    ):
        super().__init__()
        self.actor = SquashedGaussianActor(obs_dim, action_dim, hidden_sizes, activation)
        self.critics = TwinQ(obs_dim, action_dim, hidden_sizes, activation)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))


class SACPolicy(ReplayPolicy):
    """Acts with samples of the squashed Gaussian (its mean when greedy) and learns the critics,
    the actor and alpha in one gradient step per replayed minibatch."""

    STAT_KEYS = (TD_LOSS, POLICY_LOSS, ALPHA_LOSS, ALPHA, ENTROPY, Q_MEAN, TD_ERROR_MEAN, GRAD_NORM)
    EXPLORATION_KEYS = (ALPHA,)

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        if spaces.discrete_actions:
            raise EnvError(
                "SAC needs a Box (continuous) action space; use DQN or PPO for Discrete actions"
            )
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = SACModel(
            spaces.obs_dim, spaces.action_dim, hp.hidden_sizes, hp.activation, hp.initial_alpha
        )
        super().__init__(spaces, config, seed, model, target_source=model.critics)
        self.model: SACModel
        self.target_entropy = (
            -float(spaces.action_dim) if hp.target_entropy is None else hp.target_entropy
        )
        self.noise = NoiseSource(self.generator)
        self.distribution = SquashedGaussian(spaces.action_low, spaces.action_high)

    def to(self, device: str | torch.device) -> SACPolicy:
        super().to(device)
        self.noise.to(self.device)
        return self

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy coefficient, a constant for every loss but its own."""
        return self.model.log_alpha.detach().exp()

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.inference_mode():
            out = self.model.actor.net(self.as_tensor(obs))
            noise = self.noise if explore else None
            actions = self.distribution.actions(torch, out, noise).numpy(force=True)
        return self.distribution.env_actions(np, actions), {"actions": actions}

    def td_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The soft Bellman target r_t + ... + gamma^(n-1) r_(t+n-1) + gamma^n (min_i
        Q_target_i(s', a') - alpha log pi(a'|s')), with a' ~ pi(s'), s' = s_(t+n)."""
        with torch.no_grad():
            next_obs = batch["next_obs"]
            next_actions, next_logp = self.model.actor.sample(next_obs, self._noise(len(next_obs)))
            next_q = self.target_model(next_obs, next_actions).min(dim=-1).values
            soft_values = next_q - self.alpha * next_logp
            return batch["rewards"] + batch["bootstrap_discounts"] * soft_values

    def td_loss(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The critics' squared TD errors (importance-weighted when the batch carries
        `weights`), plus the actor's loss alpha log pi(a|s) - min_i Q_i(s, a) on fresh samples
        a ~ pi(s), plus alpha's loss -log alpha (log pi(a|s) + target entropy), which raises
        alpha while the policy's entropy is below the target and lowers it above."""
        obs = batch["obs"]
        q_values = self.model.critics(obs, batch["actions"])
        td_errors = q_values - self.td_targets(batch)[:, None]
        per_transition = 0.5 * td_errors.pow(2).sum(dim=-1)
        if "weights" in batch:
            per_transition = per_transition * batch["weights"]
        critic_loss = per_transition.mean()

        actions, logp = self.model.actor.sample(obs, self._noise(len(obs)))
        # The critics as constants: the actor's loss must move the actor only.
        frozen = {name: p.detach() for name, p in self.model.critics.named_parameters()}
        q_new = functional_call(self.model.critics, frozen, (obs, actions)).min(dim=-1).values
        policy_loss = (self.alpha * logp - q_new).mean()
        alpha_loss = -(self.model.log_alpha * (logp.detach() + self.target_entropy)).mean()

        td_errors = td_errors.detach()
        stats = {
            TD_LOSS: critic_loss.detach(),
            POLICY_LOSS: policy_loss.detach(),
            ALPHA_LOSS: alpha_loss.detach(),
            ALPHA: self.alpha,
            ENTROPY: -logp.detach().mean(),
            Q_MEAN: q_values.detach().mean(),
            TD_ERROR_MEAN: td_errors.abs().mean(),
        }
        # A transition's TD error for prioritized replay: the mean over the two critics.
        return critic_loss + policy_loss + alpha_loss, stats, td_errors.abs().mean(dim=-1)

    def update_target(self) -> None:
        """Polyak averaging: target <- (1 - tau) target + tau online."""
        with torch.no_grad():
            online = self.model.critics.parameters()
            for target, source in zip(self.target_model.parameters(), online, strict=True):
                target.lerp_(source, self.hp.tau)

    def exploration_stats(self) -> Stats:
        return {ALPHA: float(self.alpha)}

    def _noise(self, rows: int) -> torch.Tensor:
        """Standard normal draws for `rows` reparameterised samples, from the policy's seeded
        generator (on the CPU, so a seed draws the same numbers on every device)."""
        shape = (rows, self.spaces.action_dim)
        return torch.randn(shape, generator=self.generator).to(self.device)
