"""Acting and postprocessing shared by the on-policy policies (PG, A2C, PPO)."""

from __future__ import annotations

import numpy as np
import torch

from kuberl_trainer.config import AnyTrainerConfig
from kuberl_trainer.envs import SpaceInfo
from kuberl_trainer.models import ActorCritic
from kuberl_trainer.policy.base import TorchPolicy, flatten_time_major
from kuberl_trainer.postprocessing import compute_gae


class ActorCriticPolicy(TorchPolicy):
    """A stochastic policy network plus (optionally) a value network, with GAE advantages."""

    with_critic = True

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = ActorCritic(
            spaces,
            hp.hidden_sizes,
            hp.activation,
            self.with_critic,
            getattr(hp, "initial_log_std", 0.0),
        )
        super().__init__(spaces, config, seed, model)
        self.model: ActorCritic

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        with torch.inference_mode():
            actions, logp = self.model.sample(torch.from_numpy(obs), self.generator, explore)
        actions_np = actions.numpy()
        if self.spaces.discrete_actions:
            return actions_np, {"actions": actions_np, "logp": logp.numpy()}
        # The loss needs the unclipped sample; the env gets it inside its bounds.
        env_actions = np.clip(actions_np, self.spaces.action_low, self.spaces.action_high)
        return env_actions, {"actions": actions_np, "logp": logp.numpy()}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values, next_values = self._values(rollout["obs"]), self._values(rollout["next_obs"])
        advantages, targets = compute_gae(
            rollout["rewards"],
            values,
            next_values,
            rollout["terminateds"],
            rollout["truncateds"],
            self.hp.gamma,
            self.hp.gae_lambda,
        )
        return flatten_time_major(
            {
                "obs": rollout["obs"],
                "actions": rollout["actions"],
                "logp": rollout["logp"],
                "values": values,
                "advantages": advantages,
                "value_targets": targets,
            }
        )

    def _values(self, obs: np.ndarray) -> np.ndarray:
        """V for (T, N, obs_dim) observations in one batched forward pass."""
        with torch.inference_mode():
            flat = torch.from_numpy(obs.reshape(-1, obs.shape[-1]))
            return self.model.value(flat).numpy().reshape(obs.shape[:2])
