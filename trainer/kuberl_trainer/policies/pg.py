"""Vanilla policy gradient: REINFORCE on returns-to-go."""

from __future__ import annotations

import numpy as np
import torch

from kuberl_contract.progress_row import ENTROPY, GRAD_NORM, POLICY_LOSS
from kuberl_trainer.policies.actor_critic import ActorCriticPolicy
from kuberl_trainer.policies.postprocessing import returns_to_go_columns


class PGPolicy(ActorCriticPolicy):
    STAT_KEYS = (POLICY_LOSS, ENTROPY, GRAD_NORM)
    with_critic = False

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return returns_to_go_columns(rollout, self.hp.gamma, self.hp.normalize_returns)

    def loss(self, batch: dict[str, torch.Tensor]):
        logp, entropy = self.model.logp_entropy(batch["obs"], batch["actions"])
        policy_loss = -(logp * batch["advantages"]).mean()
        entropy = entropy.mean()
        total = policy_loss - self.hp.entropy_coeff * entropy
        return total, {POLICY_LOSS: policy_loss.detach(), ENTROPY: entropy.detach()}
