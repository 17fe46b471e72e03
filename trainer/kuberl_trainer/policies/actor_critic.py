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
from kuberl_trainer.policies.recurrent import LaneMemory, RecurrentActorCritic
from kuberl_trainer.policies.sample_batch import VALID
from kuberl_trainer.policies.sequences import (
    EPISODE_STARTS,
    STATE_IN,
    recurrent_training_rows,
    shuffled_sequences,
)


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
        initial_log_std = getattr(hp, "initial_log_std", 0.0)
        recurrent = config.model.recurrent
        if recurrent is not None and self.TAKES_MEMORY:
            model = RecurrentActorCritic(
                spaces, hp.hidden_sizes, hp.activation, initial_log_std, config.model
            )
        else:
            model = ActorCritic(
                spaces, hp.hidden_sizes, hp.activation, self.with_critic, initial_log_std,
                config.model,
            )  # fmt: skip
        super().__init__(spaces, config, seed, model)
        self.model: ActorCritic
        self.memory = LaneMemory(model) if isinstance(model, RecurrentActorCritic) else None
        if self.memory is not None:
            # Sequences are cut from whole rollouts: each worker samples whole ones.
            self.LEARNS_ON_WHOLE_ROLLOUTS = True
            self.sequence_length = recurrent.max_seq_len or hp.rollout_length
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
        if self.memory is not None:
            return self._act_with_memory(obs, noise)
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

    def _act_with_memory(
        self, obs: np.ndarray, noise: NoiseSource | None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """compute_actions with the lanes' memory, which it steps; the memory each lane acted
        with and the lanes that began an episode are recorded for the learner's sequences."""
        assert self.memory is not None
        state, starts = self.memory.current(len(obs), self.device)
        with torch.inference_mode():
            model: RecurrentActorCritic = self.model  # type: ignore[assignment]
            actions, dist_inputs, values, self.memory.state = model.act(
                self.as_tensor(obs), state, noise
            )
        columns = {
            "actions": actions.numpy(force=True),
            "dist_inputs": dist_inputs.numpy(force=True),
            "values": values.numpy(force=True),
            STATE_IN: state.numpy(force=True),
            EPISODE_STARTS: starts,
        }
        return self.model.distribution.env_actions(np, columns["actions"]), columns

    def begin_episodes(self, starts: np.ndarray) -> None:
        if self.memory is not None:
            self.memory.begin(starts)

    def get_memory(self):
        return None if self.memory is None else self.memory.get()

    def set_memory(self, memory) -> None:
        if self.memory is not None:
            self.memory.set(memory)

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.memory is not None:
            return self._sequences(rollout)
        values = rollout["values"] if "values" in rollout else self._values(rollout["obs"])
        return gae_columns(
            rollout,
            values,
            self._values(rollout["next_obs"][-1:]),
            self._logp(rollout["dist_inputs"], rollout["actions"]),
            self.hp.gamma,
            self.hp.gae_lambda,
        )

    def _sequences(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A recurrent policy's training rows: GAE over the window, bootstrapped from the memory
        the lanes carry now, cut into sequences (sequences.py)."""
        assert self.memory is not None
        model: RecurrentActorCritic = self.model  # type: ignore[assignment]
        last_obs = rollout["next_obs"][-1]
        state, starts = self.memory.current(len(last_obs), self.device)
        self.memory.begin(starts)  # still to apply on the next step, which records them
        with torch.inference_mode():
            last_values = model.next_value(self.as_tensor(last_obs), state).numpy(force=True)
        return recurrent_training_rows(self, rollout, last_values)

    def logp_entropy_value(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch's rows to learn from, and their log-probabilities, entropies and values with
        gradients: all rows; a recurrent policy's unrolled over their sequences, then its
        invalid rows (reset steps, padding) left out."""
        if self.memory is None:
            return batch, *self.model.logp_entropy_value(batch["obs"], batch["actions"])
        model: RecurrentActorCritic = self.model  # type: ignore[assignment]
        length = self.sequence_length
        logp, entropy, values = model.logp_entropy_value_of_sequences(
            batch["obs"], batch["actions"], batch[STATE_IN][::length], batch[EPISODE_STARTS], length
        )
        valid = batch[VALID]
        rows = {key: column[valid] for key, column in batch.items()}
        return rows, logp[valid], entropy[valid], values[valid]

    def minibatch_rows(self, rows: int, count: int) -> list[torch.Tensor]:
        """One shuffled pass over a batch's rows in `count` minibatches; a recurrent policy's in
        whole sequences."""
        if self.memory is not None:
            parts = shuffled_sequences(rows, self.sequence_length, count, self.rng)
            return [self.as_tensor(part) for part in parts]
        return list(torch.tensor_split(self.as_tensor(self.rng.permutation(rows)), count))

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
