"""Advantage actor-critic: one gradient step per synchronous batch."""

from __future__ import annotations

import torch

from kuberl_contract.progress_row import ENTROPY, GRAD_NORM, POLICY_LOSS, VF_LOSS
from kuberl_trainer.policies.actor_critic import ActorCriticPolicy


class A2CPolicy(ActorCriticPolicy):
    TAKES_MEMORY = True
    STAT_KEYS = (POLICY_LOSS, VF_LOSS, ENTROPY, GRAD_NORM)

    def loss(self, batch: dict[str, torch.Tensor]):
        batch, logp, entropy, values = self.logp_entropy_value(batch)
        advantages = batch["advantages"]
        if self.hp.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(logp * advantages).mean()
        vf_loss = (values - batch["value_targets"]).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + self.hp.vf_coeff * vf_loss - self.hp.entropy_coeff * entropy
        return total, {
            POLICY_LOSS: policy_loss.detach(),
            VF_LOSS: vf_loss.detach(),
            ENTROPY: entropy.detach(),
        }
