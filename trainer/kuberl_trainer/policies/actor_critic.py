"""Acting and postprocessing shared by the on-policy policies (PG, A2C, PPO)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from kuberl_contract.config import AnyTrainerConfig
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.policies.models import ActorCritic, NoiseSource
from kuberl_trainer.policies.postprocessing import gae_columns


class ActorCriticPolicy(TorchPolicy):
    """A stochastic policy network plus (optionally) a value network, with GAE advantages."""

    with_critic = True
    values_while_acting: ClassVar[bool] = True
    """Whether acting also records V of the observations for postprocessing, where one encoder is
    under both heads (the CNN's default): the value head on the features the acting pass computed
    costs one small layer, and saves postprocessing a second pass over every observation (a
    third of a PPO worker's sampling time on Atari frames)."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = ActorCritic(
            spaces,
            hp.hidden_sizes,
            hp.activation,
            self.with_critic,
            getattr(hp, "initial_log_std", 0.0),
            config.model,
        )
        super().__init__(spaces, config, seed, model)
        self.model: ActorCritic
        if self.model.critic is not None:  # see CriticHyperparameters.vf_learning_rate_ratio
            self.optimizer.scale_steps(self.model.critic.parameters(), hp.vf_learning_rate_ratio)
        self.noise = NoiseSource(self.generator)
        self.records_values = (
            self.values_while_acting and self.with_critic and self.model.encoder is not None
        )

    def to(self, device: str | torch.device) -> ActorCriticPolicy:
        super().to(device)
        self.noise.to(self.device)
        return self

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        noise = self.noise if explore else None
        values = None
        with torch.inference_mode():
            if self.records_values:
                actions, dist_inputs, values = self.model.sample_and_value(
                    self.as_tensor(obs), noise
                )
            else:
                actions, dist_inputs = self.model.sample(self.as_tensor(obs), noise)
        columns = {
            "actions": actions.numpy(force=True),
            "dist_inputs": dist_inputs.numpy(force=True),
        }
        if values is not None:
            columns["values"] = values.numpy(force=True)
        return self.model.distribution.env_actions(np, columns["actions"]), columns

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = rollout["values"] if "values" in rollout else self._values(rollout["obs"])
        return gae_columns(
            rollout,
            values,
            self._values(rollout["next_obs"][-1:]),
            self._logp(rollout["dist_inputs"], rollout["actions"]),
            self.hp.gamma,
            self.hp.gae_lambda,
        )

    def _logp(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(a|s) of the rollout's actions, from the distribution inputs recorded while
        sampling (the policy did not change within the rollout)."""
        with torch.inference_mode():
            flat_inputs = self.as_tensor(dist_inputs.reshape(-1, dist_inputs.shape[-1]))
            flat_actions = self.as_tensor(actions.reshape(len(flat_inputs), *actions.shape[2:]))
            logp = self.model.logp_of(flat_inputs, flat_actions)
        return logp.numpy(force=True).reshape(actions.shape[:2])

    def _values(self, obs: np.ndarray) -> np.ndarray:
        """V for (T, N, *obs_shape) observations, in forward passes of a few thousand rows (of a
        few hundred images): a pass over a whole window of a thousand envs would spill its
        activations out of the cache and take half as long again."""
        rows_per_pass = 4096 if self.spaces.image is None else 256
        with torch.inference_mode():
            flat = self.as_tensor(obs.reshape(-1, *obs.shape[2:]))
            values = torch.cat(
                [self.model.predict_value(rows) for rows in flat.split(rows_per_pass)]
            )
            return values.numpy(force=True).reshape(obs.shape[:2])
