"""Deep Q-learning (Mnih et al. 2015) with the Rainbow pieces that pay off on small problems:
double Q (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step returns and
importance-weighted updates for prioritized replay."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl_contract.config import AnyTrainerConfig, ModelConfig
from kuberl_contract.progress_row import EPSILON, GRAD_NORM, Q_MEAN, TD_ERROR_MEAN, TD_LOSS
from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.distributions import (
    EpsilonGreedy,
    features_of,
    legal_columns,
    legal_only,
    linear_epsilon,
)
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.models import ACTIVATIONS, ConvEncoder, mlp
from kuberl_trainer.policies.replay import ReplayPolicy


class QNetwork(nn.Module):
    """Q-values of every action for a batch of observations: (B, *obs_shape) → (B, num_actions).
    An MLP of hidden_sizes, or for images the CNN (`model`) and a linear head; dueling, the last
    hidden layer (the CNN's features) feeds a value head and an advantage head. With an action
    mask (`SpaceInfo.action_mask_n`) it takes the observations without the mask's columns, and
    the Q-values of the actions the mask rules out are ILLEGAL: the greedy action, the target's
    max and the double-Q argmax are then over the legal actions."""

    def __init__(
        self,
        spaces: SpaceInfo,
        hidden_sizes: list[int],
        activation: str,
        dueling: bool,
        model: ModelConfig | None = None,
    ):
        super().__init__()
        self.dueling = dueling
        self.mask_n = spaces.action_mask_n
        num_actions = spaces.action_discrete_n
        assert num_actions is not None
        self.body: nn.Module | None = None
        if spaces.image is not None:
            self.body = ConvEncoder(spaces.image, model or ModelConfig())
            features = self.body.features
            if not dueling:
                self.q = mlp(features, [], num_actions, activation)
                return
        elif not dueling:
            self.q = mlp(spaces.feature_dim, hidden_sizes, num_actions, activation)
            return
        else:
            *body_sizes, features = hidden_sizes
            self.body = nn.Sequential(
                mlp(spaces.feature_dim, body_sizes, features, activation, out_gain=math.sqrt(2)),
                ACTIVATIONS[activation](),
            )
        self.value = mlp(features, [], 1, activation)
        self.advantage = mlp(features, [], num_actions, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return legal_only(torch, self._q_values(features_of(obs, self.mask_n)), obs, self.mask_n)

    def _q_values(self, obs: torch.Tensor) -> torch.Tensor:
        if self.body is None:
            return self.q(obs)
        features = self.body(obs)
        if not self.dueling:
            return self.q(features)
        advantages = self.advantage(features)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al., eq. 9).
        return self.value(features) + advantages - advantages.mean(dim=-1, keepdim=True)


class DQNPolicy(ReplayPolicy):
    """An online Q-network that acts epsilon-greedily and learns from replayed transitions
    against a periodically copied target network."""

    STAT_KEYS = (TD_LOSS, Q_MEAN, TD_ERROR_MEAN, GRAD_NORM)
    EXPLORATION_KEYS = (EPSILON,)

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        if not spaces.discrete_actions or spaces.multi_discrete_actions:
            raise EnvError(
                f"{config.algorithm} needs a Discrete action space; use PPO for continuous or "
                "MultiDiscrete actions"
            )
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = QNetwork(spaces, hp.hidden_sizes, hp.activation, hp.dueling, config.model)
        super().__init__(spaces, config, seed, model, target_source=model)
        self.model: QNetwork
        self.distribution = EpsilonGreedy(spaces.action_discrete_n)

    @property
    def epsilon(self) -> float:
        return linear_epsilon(self.hp, self.global_timesteps)

    def exploration_stats(self) -> Stats:
        return {EPSILON: self.epsilon}

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.inference_mode():
            q_values = self.model(self.as_tensor(obs))
            actions = self.distribution.greedy(torch, q_values).numpy(force=True)
        if explore:
            legal = legal_columns(obs, self.spaces.action_mask_n)
            actions = self.distribution.explore(self.rng, actions, self.epsilon, legal)
        return actions, {"actions": actions}

    def td_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """r_t + ... + gamma^(n-1) r_(t+n-1) + gamma^n Q_target(s_(t+n), a*), where a* is the
        target network's argmax (vanilla DQN) or the online network's (double DQN, which stops
        the max from picking actions whose value the target overestimates). With an action mask
        both are over the next observation's legal actions (its mask is in next_obs's last
        columns); one with no legal action bootstraps from 0, as at an episode's end."""
        with torch.no_grad():
            next_obs = batch["next_obs"]
            next_q = self.target_model(next_obs)
            chooser = self.model(next_obs) if self.hp.double_q else next_q
            next_actions = chooser.argmax(dim=-1, keepdim=True)
            next_values = next_q.gather(1, next_actions).squeeze(1)
            if (legal := legal_columns(next_obs, self.spaces.action_mask_n)) is not None:
                next_values = torch.where((legal > 0.5).any(-1), next_values, 0.0)
            return batch["rewards"] + batch["bootstrap_discounts"] * next_values

    def update_target(self) -> None:
        self.target_model.load_state_dict(self.model.state_dict())

    def td_loss(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Huber loss on the TD error, importance-weighted when the batch carries `weights`."""
        q_values = self.model(batch["obs"])
        q_taken = q_values.gather(1, batch["actions"].long()[:, None]).squeeze(1)
        targets = self.td_targets(batch)
        per_transition = F.smooth_l1_loss(q_taken, targets, reduction="none")
        if "weights" in batch:
            per_transition = per_transition * batch["weights"]
        loss = per_transition.mean()
        td_errors = (q_taken - targets).detach()
        stats = {
            TD_LOSS: loss.detach(),
            Q_MEAN: q_taken.detach().mean(),
            TD_ERROR_MEAN: td_errors.abs().mean(),
        }
        return loss, stats, td_errors
