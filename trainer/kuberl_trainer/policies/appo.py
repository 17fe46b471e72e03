"""Asynchronous PPO: PPO's clipped surrogate on IMPALA's execution, with V-trace targets, and
optionally IMPACT's target network (Luo et al. 2020), as RLlib's APPO.

By default the surrogate's ratio is taken against the behaviour policy that sampled the batch
(recorded by the worker), and V-trace corrects that policy towards the one being learned. With a
target_update_interval, the ratio is taken against a target network instead, a copy of the policy
refreshed every target_update_interval learner steps: V-trace then corrects the behaviour policy
towards the target network, and the ratio from behaviour to target is capped at 2 (as in RLlib's
APPO), so the surrogate of a stale batch stays bounded.

IMPACT's other half, a circular buffer from which each train batch is drawn K times, is
num_epochs here: the learner takes its batches in order, so each one is learned on num_epochs
times either way (a buffer would only interleave them, and drop the oldest when the learner falls
behind, which maxPolicyLag does here). Each pass recomputes the V-trace targets with the current
value network, on the whole batch, since V-trace needs whole sequences.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from kuberl_contract.config import AnyTrainerConfig
from kuberl_contract.progress_row import CLIP_FRACTION, ENTROPY, KL, POLICY_LOSS, VF_LOSS
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.base import numpy_weights
from kuberl_trainer.policies.impala import IMPALAPolicy, vtrace_stats
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.sample_batch import SampleBatch

# RLlib's APPO: importance ratios from the behaviour policy to the target network are capped here.
_MAX_BEHAVIOUR_RATIO = 2.0


class APPOPolicy(IMPALAPolicy):
    STAT_KEYS = (*IMPALAPolicy.STAT_KEYS, KL, CLIP_FRACTION)
    one_forward = False

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.target_model: nn.Module | None = None
        if self.hp.target_update_interval is not None:
            self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.num_updates = 0  # learn calls: they drive the target network's schedule

    def to(self, device: str | torch.device) -> APPOPolicy:
        super().to(device)
        if self.target_model is not None:
            self.target_model.to(self.device)
        return self

    @property
    def reference_policy(self) -> nn.Module:
        return self.model if self.target_model is None else self.target_model

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        stats = super().learn_on_batch(batch)
        self.num_updates += 1
        if self.target_model is not None and self.num_updates % self.hp.target_update_interval == 0:
            self.target_model.load_state_dict(self.model.state_dict())
        return stats

    def loss(self, batch: dict[str, torch.Tensor]):
        logp, entropy, values = self.model.logp_entropy_value(batch["obs"], batch["actions"])
        advantages = self.advantages(batch)
        ratio = (logp - batch["logp"]).exp()  # pi/mu
        if self.target_model is not None:
            # pi/pi_target, except where the behaviour policy was twice as likely as the target
            # to take the action: there 2 pi/mu
            behaviour_ratio = (batch["logp"] - batch["reference_logp"]).exp()
            ratio = ratio * behaviour_ratio.clamp(max=_MAX_BEHAVIOUR_RATIO)
        clip = self.hp.clip_range
        clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
        policy_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
        vf_loss = 0.5 * (batch["value_targets"] - values).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + self.hp.vf_coeff * vf_loss - self.hp.entropy_coeff * entropy
        with torch.no_grad():
            # from the reference policy (the behaviour one, or the target network) to the
            # current one, the k3 estimator
            log_ratio = logp - batch["reference_logp" if self.target_model else "logp"]
            kl = ((log_ratio.exp() - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
        return total, {
            POLICY_LOSS: policy_loss.detach(),
            VF_LOSS: vf_loss.detach(),
            ENTROPY: entropy.detach(),
            KL: kl,
            CLIP_FRACTION: clip_fraction,
            **vtrace_stats(batch),
        }

    def get_state(self) -> dict[str, Any]:
        state = super().get_state() | {"num_updates": self.num_updates}
        if self.target_model is not None:
            state["target_weights"] = numpy_weights(self.target_model)
        return state

    def warm_start(self, state: dict[str, Any]) -> None:
        super().warm_start(state)
        if self.target_model is not None:  # the reference starts as the policy it starts from
            self.target_model.load_state_dict(self.model.state_dict())

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.num_updates = state.get("num_updates", 0)
        if self.target_model is None:
            return
        if "target_weights" in state:
            weights = {k: torch.from_numpy(v) for k, v in state["target_weights"].items()}
            self.target_model.load_state_dict(weights)
        else:  # a checkpoint of a job without a target network: it starts from the policy
            self.target_model.load_state_dict(self.model.state_dict())
