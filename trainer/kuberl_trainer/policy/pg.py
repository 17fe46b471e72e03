"""Vanilla policy gradient: REINFORCE on returns-to-go."""

from __future__ import annotations

import numpy as np
import torch

from kuberl_trainer.policy.actor_critic import ActorCriticPolicy
from kuberl_trainer.policy.base import flatten_time_major
from kuberl_trainer.postprocessing import discounted_returns
from kuberl_trainer.progress_row import ENTROPY, GRAD_NORM, POLICY_LOSS
from kuberl_trainer.sample_batch import VALID


class PGPolicy(ActorCriticPolicy):
    STAT_KEYS = (POLICY_LOSS, ENTROPY, GRAD_NORM)
    with_critic = False

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        returns = discounted_returns(
            rollout["rewards"], rollout["terminateds"], rollout["truncateds"], self.hp.gamma
        )
        columns = flatten_time_major(
            {"obs": rollout["obs"], "actions": rollout["actions"], "advantages": returns},
            rollout[VALID],
        )
        if self.hp.normalize_returns:
            returns = columns["advantages"]
            columns["advantages"] = (returns - returns.mean()) / (returns.std() + 1e-8)
        return columns

    def loss(self, batch: dict[str, torch.Tensor]):
        logp, entropy = self.model.logp_entropy(batch["obs"], batch["actions"])
        policy_loss = -(logp * batch["advantages"]).mean()
        entropy = entropy.mean()
        total = policy_loss - self.hp.entropy_coeff * entropy
        return total, {POLICY_LOSS: policy_loss.detach(), ENTROPY: entropy.detach()}
