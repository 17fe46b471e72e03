"""Deep Q-learning (Mnih et al. 2015) with the Rainbow pieces that pay off on small problems:
double Q (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step returns and
importance-weighted updates for prioritized replay."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl_trainer.config import AnyTrainerConfig
from kuberl_trainer.envs import EnvError, SpaceInfo
from kuberl_trainer.models import ACTIVATIONS, mlp
from kuberl_trainer.policy.base import Stats, TorchPolicy, flatten_time_major, numpy_weights
from kuberl_trainer.postprocessing import compute_n_step
from kuberl_trainer.sample_batch import VALID, SampleBatch


class QNetwork(nn.Module):
    """Q-values of every action for a batch of observations: (B, obs_dim) → (B, num_actions)."""

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: list[int],
        activation: str,
        dueling: bool,
    ):
        super().__init__()
        self.dueling = dueling
        if not dueling:
            self.q = mlp(obs_dim, hidden_sizes, num_actions, activation)
            return
        *body_sizes, features = hidden_sizes
        self.body = nn.Sequential(
            mlp(obs_dim, body_sizes, features, activation, out_gain=math.sqrt(2)),
            ACTIVATIONS[activation](),
        )
        self.value = mlp(features, [], 1, activation)
        self.advantage = mlp(features, [], num_actions, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            return self.q(obs)
        features = self.body(obs)
        advantages = self.advantage(features)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al., eq. 9).
        return self.value(features) + advantages - advantages.mean(dim=-1, keepdim=True)


class DQNPolicy(TorchPolicy):
    """An online Q-network that acts epsilon-greedily and learns from replayed transitions
    against a periodically copied target network."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        if not spaces.discrete_actions:
            raise EnvError("DQN needs a Discrete action space; use PPO for continuous actions")
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = QNetwork(
            spaces.obs_dim, spaces.action_discrete_n, hp.hidden_sizes, hp.activation, hp.dueling
        )
        super().__init__(spaces, config, seed, model)
        self.model: QNetwork
        self.target_model = copy.deepcopy(model).requires_grad_(False)
        self.num_gradient_steps = 0  # drives the target network's copy schedule

    def to(self, device: str | torch.device) -> DQNPolicy:
        super().to(device)
        self.target_model.to(self.device)
        return self

    @property
    def epsilon(self) -> float:
        """Exploration rate: linear from epsilon_initial to epsilon_final over
        epsilon_timesteps env steps, then constant."""
        progress = min(1.0, self.global_timesteps / self.hp.epsilon_timesteps)
        return self.hp.epsilon_initial + progress * (
            self.hp.epsilon_final - self.hp.epsilon_initial
        )

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.inference_mode():
            actions = self.model(self.as_tensor(obs)).argmax(dim=-1).numpy(force=True)
        if explore:
            random_actions = self.rng.integers(0, self.spaces.action_discrete_n, len(actions))
            actions = np.where(
                self.rng.random(len(actions)) < self.epsilon, random_actions, actions
            )
        return actions, {"actions": actions}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """n-step transitions: the discounted sum of up to n rewards, the observation to
        bootstrap from, and its discount (0 when the episode terminated inside the window)."""
        returns, last_step, bootstrap_discounts = compute_n_step(
            rollout["rewards"],
            rollout["terminateds"],
            rollout["truncateds"],
            self.hp.gamma,
            self.hp.n_step,
        )
        envs = np.arange(last_step.shape[1])[None, :]
        return flatten_time_major(
            {
                "obs": rollout["obs"],
                "actions": rollout["actions"],
                "rewards": returns,
                "next_obs": rollout["next_obs"][last_step, envs],
                "bootstrap_discounts": bootstrap_discounts,
            },
            rollout[VALID],
        )

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        stats, _ = self.learn_on_replay_batch(batch.columns)
        return stats

    def learn_on_replay_batch(self, columns: dict[str, np.ndarray]) -> tuple[Stats, np.ndarray]:
        """One gradient step on replayed transitions (with importance `weights` when the buffer
        is prioritized). Returns the statistics and the per-transition TD errors, from which a
        prioritized buffer computes the new priorities."""
        loss, stats, td_errors = self._q_loss(self.as_tensors(columns))
        stats = self.backward(loss, stats)
        self.optimizer.step()
        self._count_gradient_step()
        return stats, td_errors.numpy(force=True)

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        super().apply_gradients(gradients)
        self._count_gradient_step()

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, stats, _ = self._q_loss(batch)
        return loss, stats

    def td_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """r_t + ... + gamma^(n-1) r_(t+n-1) + gamma^n Q_target(s_(t+n), a*), where a* is the
        target network's argmax (vanilla DQN) or the online network's (double DQN, which stops
        the max from picking actions whose value the target overestimates)."""
        with torch.no_grad():
            next_q = self.target_model(batch["next_obs"])
            chooser = self.model(batch["next_obs"]) if self.hp.double_q else next_q
            next_actions = chooser.argmax(dim=-1, keepdim=True)
            next_values = next_q.gather(1, next_actions).squeeze(1)
            return batch["rewards"] + batch["bootstrap_discounts"] * next_values

    def update_target(self) -> None:
        self.target_model.load_state_dict(self.model.state_dict())

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

    def _q_loss(
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
            "loss": loss.detach(),
            "q_mean": q_taken.detach().mean(),
            "td_error_mean": td_errors.abs().mean(),
        }
        return loss, stats, td_errors

    def _count_gradient_step(self) -> None:
        self.num_gradient_steps += 1
        if self.num_gradient_steps % self.hp.target_update_interval == 0:
            self.update_target()
