"""What the policies that learn from replayed transitions share (DQN, Ape-X, SAC): n-step
postprocessing, one gradient step per replayed minibatch with the TD errors a prioritized buffer
needs, and a target network updated on a schedule of gradient steps."""

from __future__ import annotations

import copy
from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from kuberl_contract.config import AnyTrainerConfig
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.base import TorchPolicy, check_weights_fit, mean_stats, numpy_weights
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.postprocessing import n_step_columns
from kuberl_trainer.policies.sample_batch import SampleBatch


class ReplayPolicy(TorchPolicy):
    """A TorchPolicy whose `target_model` starts as a copy of `target_source` (the part of the
    model that bootstraps TD targets) and is updated every target_update_interval gradient
    steps by `update_target`."""

    EXPLORATION_KEYS: ClassVar[tuple[str, ...]] = ()
    """The statistics `exploration_stats` returns."""

    def __init__(
        self,
        spaces: SpaceInfo,
        config: AnyTrainerConfig,
        seed: int,
        model: nn.Module,
        target_source: nn.Module,
    ):
        super().__init__(spaces, config, seed, model)
        self.target_model = copy.deepcopy(target_source).requires_grad_(False)
        self.num_gradient_steps = 0  # drives the target network's schedule

    def to(self, device: str | torch.device) -> ReplayPolicy:
        super().to(device)
        self.target_model.to(self.device)
        return self

    @abstractmethod
    def td_loss(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The loss (importance-weighted when the batch carries `weights`), its statistics, and
        the per-transition TD errors a prioritized buffer turns into priorities."""

    @abstractmethod
    def update_target(self) -> None: ...

    def exploration_stats(self) -> Stats:
        """What sets exploration now, for the progress row (DQN's epsilon, SAC's alpha)."""
        return {}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return n_step_columns(rollout, self.hp.gamma, self.hp.n_step)

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        stats, _ = self.learn_on_replay_batch(batch.columns)
        return stats

    def learn_on_replay_batch(self, columns: dict[str, np.ndarray]) -> tuple[Stats, np.ndarray]:
        """One gradient step on replayed transitions (with importance `weights` when the buffer
        is prioritized). Returns the statistics and the per-transition TD errors, from which a
        prioritized buffer computes the new priorities."""
        loss, stats, td_errors = self.td_loss(self.as_tensors(columns))
        stats = self.backward(loss, stats)
        self.optimizer.step()
        self._count_gradient_step()
        stats = mean_stats([stats], extra=td_errors)  # the step's one wait for the device
        return stats, stats.pop("extra")

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        super().apply_gradients(gradients)
        self._count_gradient_step()

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, stats, _ = self.td_loss(batch)
        return loss, stats

    def get_state(self) -> dict[str, Any]:
        return super().get_state() | {
            "target_weights": numpy_weights(self.target_model),
            "num_gradient_steps": self.num_gradient_steps,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.target_model.load_state_dict(
            {k: torch.from_numpy(v) for k, v in state["target_weights"].items()}
        )
        self.num_gradient_steps = state["num_gradient_steps"]

    def warm_start(self, state: dict[str, Any]) -> None:
        super().warm_start(state)
        check_weights_fit(self.target_model, state.get("target_weights", {}), "target network")
        self.target_model.load_state_dict(
            {k: torch.from_numpy(v) for k, v in state["target_weights"].items()}
        )

    def _count_gradient_step(self) -> None:
        self.num_gradient_steps += 1
        if self.num_gradient_steps % self.hp.target_update_interval == 0:
            self.update_target()
