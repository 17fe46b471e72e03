"""Asynchronous PPO: PPO's clipped surrogate on IMPALA's execution, with V-trace targets.

The ratio is taken against the behaviour policy that sampled the batch (recorded by the worker),
and the advantages are V-trace's (which already weight each step by min(pg_rho_bar, pi/mu), as
RLlib's APPO does). Every epoch recomputes the V-trace targets with the current networks on the
whole batch, since V-trace needs whole sequences; its minibatches can then take any rows.
"""

from __future__ import annotations

import torch

from kuberl_trainer.policy.impala import IMPALAPolicy


class APPOPolicy(IMPALAPolicy):
    def loss(self, batch: dict[str, torch.Tensor]):
        logp, entropy = self.model.logp_entropy(batch["obs"], batch["actions"])
        advantages = self.advantages(batch)
        log_ratio = logp - batch["logp"]
        ratio = log_ratio.exp()
        clip = self.hp.clip_range
        clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
        policy_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
        vf_loss = 0.5 * (batch["value_targets"] - self.model.value(batch["obs"])).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + self.hp.vf_coeff * vf_loss - self.hp.entropy_coeff * entropy
        with torch.no_grad():
            kl = ((ratio - 1.0) - log_ratio).mean()  # behaviour to current, the k3 estimator
            clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
        return total, {
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
            "kl": kl,
            "clip_fraction": clip_fraction,
        }
