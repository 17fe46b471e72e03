"""Data-parallel SGD on the learner's devices: each minibatch split across towers, replicas of a
policy's model, one per device (RLlib's multi-GPU towers).

The policy's own model is the first tower; every other device holds a replica. A minibatch is cut
into one contiguous shard per tower (its rows are already shuffled), each tower computes the loss
on its shard with its own model, and each shard's loss counts by its share of the rows. The sum is
the whole minibatch's mean loss, so one backward pass gives every tower its share of the gradient;
`gather_gradients` adds the replicas' shares into the policy's model, where they are clipped and
applied once. The replicas take the policy's weights before every loss, so they follow its steps
and anything that sets its weights (a restored checkpoint).

The policy's loss must be a mean over rows that reads its settings and writes nothing: a statistic
of the whole minibatch (standardized advantages) is computed before the split. One backward pass
over towers on several GPUs runs on each device in parallel; CPU towers take turns, and are there
to run the same numerics on a machine without GPUs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Protocol, TypeVar

import torch
from torch import nn


class TowerPolicy(Protocol):
    """What towers need of a policy (TorchPolicy has it): its model, the device the model is on,
    and its loss on a minibatch. A protocol, so that towers.py needs nothing of base.py, which
    builds on it."""

    model: nn.Module
    device: torch.device

    def loss(
        self, minibatch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


P = TypeVar("P", bound=TowerPolicy)


class Towers:
    def __init__(self, policy: TowerPolicy, devices: Sequence[str | torch.device]):
        """Replicas of `policy`'s model on `devices`: the towers besides the policy's own, which
        stays on its device."""
        self.policy = policy
        self.replicas: list[nn.Module] = []
        for device in devices:
            replica = copy.deepcopy(policy.model).to(device)
            replica.zero_grad(set_to_none=True)  # a deep copy carries the model's gradients
            self.replicas.append(replica)

    def __len__(self) -> int:
        return 1 + len(self.replicas)

    def loss(
        self, minibatch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy's loss and statistics on `minibatch`, computed in one shard per tower and
        weighted by the shards' rows: equal to the loss on the whole minibatch at once."""
        policy = self.policy
        models = [policy.model, *self.replicas]
        for replica in self.replicas:
            replica.load_state_dict(policy.model.state_dict())
        rows = len(next(iter(minibatch.values())))
        order = torch.arange(rows, device=policy.device)
        total = torch.zeros((), device=policy.device)
        stats: dict[str, torch.Tensor] = {}
        for model, shard_rows in zip(models, torch.tensor_split(order, len(models)), strict=True):
            if not len(shard_rows):  # fewer rows than towers: the last ones have none
                continue
            device = next(model.parameters()).device
            shard = {k: v[shard_rows].to(device, non_blocking=True) for k, v in minibatch.items()}
            loss, shard_stats = _on(policy, model, device).loss(shard)
            share = len(shard_rows) / rows
            total = total + share * loss.to(policy.device)
            for key, value in shard_stats.items():
                stats[key] = stats.get(key, 0.0) + share * value.to(policy.device)
        return total, stats

    def gather_gradients(self) -> None:
        """Add the replicas' gradients (after a backward pass of `loss`) into the policy's
        model, and clear them for the next minibatch."""
        for replica in self.replicas:
            for param, share in zip(
                self.policy.model.parameters(), replica.parameters(), strict=True
            ):
                if share.grad is None:  # a parameter this loss does not use
                    continue
                grad = share.grad.to(param.device)
                param.grad = grad if param.grad is None else param.grad + grad
                share.grad = None


def _on(policy: P, model: nn.Module, device: torch.device) -> P:
    """`policy` computing with `model` on `device`: a shallow copy that shares everything else
    (hyperparameters, schedules), taken anew for every loss so that it sees their current
    values."""
    if model is policy.model:
        return policy
    view = copy.copy(policy)
    view.model, view.device = model, device
    return view
