"""Proximal policy optimization: several epochs of minibatch SGD on the clipped surrogate."""

from __future__ import annotations

import torch

from kuberl_contract.progress_row import (
    CLIP_FRACTION,
    ENTROPY,
    GRAD_NORM,
    KL,
    POLICY_LOSS,
    SGD_STEPS,
    VF_LOSS,
)
from kuberl_trainer.policies.actor_critic import ActorCriticPolicy
from kuberl_trainer.policies.base import TensorStats, mean_stats
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.sample_batch import VALID, SampleBatch


class PPOPolicy(ActorCriticPolicy):
    TAKES_MEMORY = True
    STAT_KEYS = (POLICY_LOSS, VF_LOSS, ENTROPY, KL, CLIP_FRACTION, GRAD_NORM, SGD_STEPS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_range = self.hp.clip_range

    def set_global_timesteps(self, timesteps: int) -> None:
        super().set_global_timesteps(timesteps)
        if self.hp.schedule == "linear":
            remaining = max(0.0, 1.0 - timesteps / self.config.stop.timesteps)
            self.set_learning_rate(self.hp.learning_rate * remaining)
            self.clip_range = self.hp.clip_range * remaining

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        steps: list[TensorStats] = []
        # One transfer of the batch to the device; the minibatches are cut there.
        tensors = self.as_tensors(batch.columns)
        count = max(1, len(batch) // self.hp.minibatch_size)
        for _ in range(self.hp.num_epochs):
            # The rows SampleBatch.minibatches would give: a shuffled pass in `count` parts.
            epoch = [
                self.sgd_step(self.standardized({k: v[rows] for k, v in tensors.items()}))
                for rows in self.minibatch_rows(len(batch), count)
            ]
            steps += epoch
            # the one wait for the device per epoch, and only with a target_kl
            if self.hp.target_kl is not None and mean_stats(epoch)[KL] > self.hp.target_kl:
                break  # the policy moved far enough for this batch
        return mean_stats(steps) | {SGD_STEPS: float(len(steps))}

    def standardized(self, minibatch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The minibatch with its advantages standardized if normalize_advantages: over the whole
        minibatch, before towers split it (the loss is then a plain mean over rows)."""
        advantages = minibatch["advantages"]
        if not self.hp.normalize_advantages or len(advantages) < 2:
            return minibatch
        # over the rows learned from: a recurrent policy's sequences keep reset steps and padding
        learned = advantages[minibatch[VALID]] if VALID in minibatch else advantages
        normalized = (advantages - learned.mean()) / (learned.std() + 1e-8)
        return minibatch | {"advantages": normalized}

    def loss(self, batch: dict[str, torch.Tensor]):
        batch, logp, entropy, values = self.logp_entropy_value(batch)
        advantages = batch["advantages"]
        log_ratio = logp - batch["logp"]
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.clip_range, 1.0 + self.clip_range)
        policy_loss = -torch.min(ratio * advantages, clipped * advantages).mean()

        if self.hp.vf_clip_range is not None:
            old = batch["values"]
            values = old + (values - old).clamp(-self.hp.vf_clip_range, self.hp.vf_clip_range)
        vf_loss = (values - batch["value_targets"]).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + self.hp.vf_coeff * vf_loss - self.hp.entropy_coeff * entropy
        with torch.no_grad():
            kl = ((ratio - 1.0) - log_ratio).mean()  # the low-variance k3 estimator
            clip_fraction = ((ratio - 1.0).abs() > self.clip_range).float().mean()
        return total, {
            POLICY_LOSS: policy_loss.detach(),
            VF_LOSS: vf_loss.detach(),
            ENTROPY: entropy.detach(),
            KL: kl,
            CLIP_FRACTION: clip_fraction,
        }
