"""A2C's and PPO's acting half with a memory (spec.trainer.model.recurrent), in numpy: what a
remote worker that only acts computes, as the torch RecurrentActorCritic does (recurrent.py), at
a fraction of a torch call's overhead per env step. It never imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.acting import ActingPolicy
from kuberl_trainer.policies.distributions import features_of, legal_only
from kuberl_trainer.policies.interface import Weights
from kuberl_trainer.policies.numpy_mlp import linear_layers
from kuberl_trainer.policies.sequences import EPISODE_STARTS, STATE_IN, recurrent_training_rows

if TYPE_CHECKING:  # a remote worker gets a Frozen copy, the config never imported (frozen.py)
    from kuberl_contract.config import AnyTrainerConfig


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # no overflow, unlike 1 / (1 + exp(-x))


class ActingRecurrentPolicy(ActingPolicy):
    """The encoder's layers, the LSTM's or GRU's gates and the linear heads in numpy, and the
    lanes' memory carried between steps (recurrent.py's LaneMemory, as arrays)."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        recurrent = config.model.recurrent
        self.kind, self.size = recurrent.type, recurrent.size
        self.sequence_length = recurrent.max_seq_len or self.hp.rollout_length
        self.LEARNS_ON_WHOLE_ROLLOUTS = True
        self.encoder: list[tuple[np.ndarray, np.ndarray]] = []
        self.state: np.ndarray | None = None
        self.starts: np.ndarray | None = None

    def set_weights(self, weights: Weights) -> None:
        super().set_weights(weights)
        self.encoder = linear_layers(weights, "encoder")
        self.input_t = np.ascontiguousarray(weights["memory.rnn.weight_ih_l0"].T)
        self.hidden_t = np.ascontiguousarray(weights["memory.rnn.weight_hh_l0"].T)
        self.input_bias = weights["memory.rnn.bias_ih_l0"]
        self.hidden_bias = weights["memory.rnn.bias_hh_l0"]

    # -- the memory -------------------------------------------------------------------------------

    def begin_episodes(self, starts: np.ndarray) -> None:
        self.starts = starts.copy() if self.starts is None else self.starts | starts

    def get_memory(self) -> Any:
        return None if self.state is None else (self.state.copy(), self.starts)

    def set_memory(self, memory: Any) -> None:
        self.state, self.starts = (None, None) if memory is None else memory

    def _current(self, lanes: int) -> tuple[np.ndarray, np.ndarray]:
        """As LaneMemory.current: the state to act on, the starts applied, and those starts."""
        width = 2 * self.size if self.kind == "lstm" else self.size
        if self.state is None or len(self.state) != lanes:
            self.state = np.zeros((lanes, width), dtype=np.float32)
            starts = np.ones(lanes, dtype=bool)
        else:
            starts = np.zeros(lanes, dtype=bool) if self.starts is None else self.starts
            if starts.any():
                self.state = self.state * ~starts[:, None]
        self.starts = None
        return self.state, starts

    def _step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The memory's output and next state for the lanes' observations (Memory.step)."""
        x = features_of(obs, self.spaces.action_mask_n)
        if self.encoder:
            x = self._forward(self.encoder, np.array(x, dtype=np.float32), last_activated=True)
        from_input = x @ self.input_t + self.input_bias
        if self.kind == "lstm":
            hidden, cell = state[:, : self.size], state[:, self.size :]
            gates = from_input + hidden @ self.hidden_t + self.hidden_bias
            forget_in, forget, candidate, out = np.split(gates, 4, axis=-1)
            cell = sigmoid(forget) * cell + sigmoid(forget_in) * np.tanh(candidate)
            hidden = sigmoid(out) * np.tanh(cell)
            return hidden, np.concatenate([hidden, cell], axis=-1)
        reset_i, update_i, new_i = np.split(from_input, 3, axis=-1)
        reset_h, update_h, new_h = np.split(state @ self.hidden_t + self.hidden_bias, 3, axis=-1)
        update = sigmoid(update_i + update_h)
        new = np.tanh(new_i + sigmoid(reset_i + reset_h) * new_h)
        hidden = (1.0 - update) * new + update * state
        return hidden, hidden

    # -- acting and postprocessing ----------------------------------------------------------------

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        state, starts = self._current(len(obs))
        hidden, self.state = self._step(obs, state)
        out = legal_only(np, self._forward(self.actor, hidden), obs, self.spaces.action_mask_n)
        actions = self.distribution.actions(np, out, self.noise if explore else None, self.std)
        columns = {
            "actions": actions,
            "dist_inputs": out,
            "values": self._forward(self.critic, hidden)[:, 0],
            STATE_IN: state,
            EPISODE_STARTS: starts,
        }
        return self.distribution.env_actions(np, actions), columns

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        last_obs = rollout["next_obs"][-1]
        state, starts = self._current(len(last_obs))
        self.begin_episodes(starts)  # still to apply on the next step, which records them
        last_values = self._forward(self.critic, self._step(last_obs, state)[0])[:, 0]
        return recurrent_training_rows(self, rollout, last_values)
