"""Recurrent actor-critics (spec.trainer.model.recurrent): an LSTM or GRU between the encoder and
the policy and value heads, and the memory a policy carries for its lanes between env steps.

The memory of a lane is one (state_size,) vector: an LSTM's hidden and cell states side by side,
a GRU's hidden state. Acting steps it once per env step (`RecurrentActorCritic.act`); learning
unrolls it over stored sequences from the memory the lane acted with at their first step
(`unrolled`), zeroing it wherever an episode starts, so that both compute the same outputs.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kuberl_contract.config import ModelConfig
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.errors import IncompatibleCheckpointError
from kuberl_trainer.policies.distributions import Noise, features_of, legal_only
from kuberl_trainer.policies.interface import Weights
from kuberl_trainer.policies.models import ActorCritic, mlp

MEMORY_PREFIX = "memory."
"""Where a recurrent model's memory weights are named in its state dict (and checkpoints)."""


class Memory(nn.Module):
    """An LSTM or GRU over (N, features) inputs, its state one (N, state_size) tensor: torch's
    fused nn.LSTM/nn.GRU over sequences (6x the speed of a step at a time in a learning pass),
    and its gate equations written out for one step (a third of nn.LSTM's time per call at 8
    lanes, and plain operators in an exported policy)."""

    def __init__(self, kind: str, features: int, size: int):
        super().__init__()
        self.kind = kind
        self.size = size
        self.rnn: nn.LSTM | nn.GRU
        if kind == "lstm":
            self.rnn = nn.LSTM(features, size, batch_first=True)
            # a forget gate biased open (Jozefowicz et al. 2015): memories last from the start
            nn.init.ones_(self.rnn.bias_hh_l0[size : 2 * size])
        else:
            self.rnn = nn.GRU(features, size, batch_first=True)
        self.state_size = 2 * size if kind == "lstm" else size

    def forward(
        self, inputs: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The outputs (B, T, size) of sequences of inputs (B, T, features) from `state`, and the
        state after them."""
        if self.kind == "lstm":
            hidden = state[None, :, : self.size].contiguous()
            cell = state[None, :, self.size :].contiguous()
            outputs, (hidden, cell) = self.rnn(inputs, (hidden, cell))
            return outputs, torch.cat([hidden[0], cell[0]], dim=-1)
        outputs, hidden = self.rnn(inputs, state[None].contiguous())
        return outputs, hidden[0]

    def step(self, inputs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The output (N, size) and the next state of one step, as `forward` computes it."""
        rnn = self.rnn
        from_input = F.linear(inputs, rnn.weight_ih_l0, rnn.bias_ih_l0)
        if self.kind == "lstm":
            hidden, cell = state[:, : self.size], state[:, self.size :]
            gates = from_input + F.linear(hidden, rnn.weight_hh_l0, rnn.bias_hh_l0)
            forget_in, forget, candidate, out = gates.chunk(4, dim=-1)  # torch's gate order
            cell = forget.sigmoid() * cell + forget_in.sigmoid() * candidate.tanh()
            hidden = out.sigmoid() * cell.tanh()
            return hidden, torch.cat([hidden, cell], dim=-1)
        from_hidden = F.linear(state, rnn.weight_hh_l0, rnn.bias_hh_l0)
        reset_i, update_i, new_i = from_input.chunk(3, dim=-1)
        reset_h, update_h, new_h = from_hidden.chunk(3, dim=-1)
        update = (update_i + update_h).sigmoid()
        new = (new_i + (reset_i + reset_h).sigmoid() * new_h).tanh()
        hidden = (1.0 - update) * new + update * state
        return hidden, hidden


class RecurrentActorCritic(ActorCritic):
    """An actor-critic whose policy and value heads read a memory of the shared encoder's
    features: encoder (MLP or CNN) -> LSTM/GRU -> linear heads."""

    def __init__(
        self,
        spaces: SpaceInfo,
        hidden_sizes: list[int],
        activation: str,
        initial_log_std: float,
        model: ModelConfig,
    ):
        assert model.recurrent is not None
        shared = model.model_copy(update={"vf_share_layers": True})
        super().__init__(spaces, hidden_sizes, activation, True, initial_log_std, shared)
        features = self.actor[0].in_features
        out = self.actor[0].out_features
        size = model.recurrent.size
        self.memory = Memory(model.recurrent.type, features, size)
        self.actor = mlp(size, [], out, activation, out_gain=0.01)
        self.critic = mlp(size, [], 1, activation)

    @property
    def state_size(self) -> int:
        return self.memory.state_size

    def initial_state(self, lanes: int, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.zeros(lanes, self.state_size, device=device)

    def act(
        self, obs: torch.Tensor, state: torch.Tensor, noise: Noise | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One env step of N lanes: actions (sampled with `noise`, greedy without), the
        distribution's inputs, the values and the next state."""
        hidden, state = self.memory.step(self._features(obs), state)
        out = self._legal(self.actor(hidden), obs)
        values = self.critic(hidden).squeeze(-1)
        return self._act(out, noise), out, values, state

    def next_value(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """V of the lanes' observations with their memory `state` (a window's bootstrap)."""
        hidden, _ = self.memory.step(self._features(obs), state)
        return self.critic(hidden).squeeze(-1)

    def unrolled(
        self, obs: torch.Tensor, initial: torch.Tensor, starts: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The distribution's inputs and the values of sequences of `length` rows (B * length
        rows, see sequences.py), each unrolled from its `initial` state (B, state_size), the state
        zeroed on rows where `starts` (an episode's first step)."""
        features = self._features(obs)
        steps = features.reshape(-1, length, features.shape[-1])
        starts = starts.reshape(-1, length)
        keep = (~starts).to(features.dtype)[..., None]
        # The fused RNN runs from one step where a sequence's episode starts to the next (a
        # sequence's own first step included), its state zeroed there where one starts.
        cuts = (torch.nonzero(starts[:, 1:].any(dim=0)).flatten() + 1).tolist()
        state, outputs = initial, []
        for begin, end in itertools.pairwise([0, *cuts, length]):
            output, state = self.memory(steps[:, begin:end], state * keep[:, begin])
            outputs.append(output)
        hidden = torch.cat(outputs, dim=1).reshape(len(obs), -1)
        return self._legal(self.actor(hidden), obs), self.critic(hidden).squeeze(-1)

    def logp_entropy_value_of_sequences(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        initial: torch.Tensor,
        starts: torch.Tensor,
        length: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`logp_entropy_value` of sequences, with gradients through the memory."""
        out, values = self.unrolled(obs, initial, starts, length)
        return *self._logp_entropy_of(out, actions), values


class LaneMemory:
    """The memory a policy carries for its N lanes between `compute_actions` calls, and the lanes
    told to begin an episode, whose memory starts at zero on their next step."""

    def __init__(self, model: RecurrentActorCritic):
        self.model = model
        self.state: torch.Tensor | None = None
        self.starts: np.ndarray | None = None

    def begin(self, starts: np.ndarray) -> None:
        self.starts = starts.copy() if self.starts is None else self.starts | starts

    def current(self, lanes: int, device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
        """The state to act on for `lanes` lanes, the starts applied, and those starts (a fresh
        memory, all zero, where the lanes are new)."""
        if self.state is None or len(self.state) != lanes:
            self.state = self.model.initial_state(lanes, device)
            starts = np.ones(lanes, dtype=bool)
        else:
            starts = np.zeros(lanes, dtype=bool) if self.starts is None else self.starts
            if starts.any():
                self.state = self.state * torch.as_tensor(~starts, device=device)[:, None]
        self.starts = None
        return self.state, starts

    def get(self) -> Any:
        return None if self.state is None else (self.state.clone(), self.starts)

    def set(self, memory: Any) -> None:
        """Carry `memory`: a `get()`, a (state, starts) pair whose state may be a numpy array, or
        None for a fresh one."""
        state, self.starts = (None, None) if memory is None else memory
        self.state = None if state is None else torch.as_tensor(state)


def check_memory_fits(recurrent: bool, weights: Weights) -> None:
    """IncompatibleCheckpointError naming spec.trainer.model.recurrent where a checkpoint's policy
    has a memory and this job's none, or the other way round (check_weights_fit then names the
    tensors where both have one of other sizes)."""
    has_memory = any(name.startswith(MEMORY_PREFIX) for name in weights)
    if recurrent and not has_memory:
        raise IncompatibleCheckpointError(
            "spec.trainer.model.recurrent: this job's policy has a memory, the checkpoint's was "
            "trained without one; start from a checkpoint of a recurrent policy, or remove "
            "model.recurrent"
        )
    if has_memory and not recurrent:
        raise IncompatibleCheckpointError(
            "spec.trainer.model.recurrent: the checkpoint's policy has a memory (LSTM or GRU), "
            "this job's none; set model.recurrent as the checkpoint's job did"
        )


class GreedyMemoryActions(nn.Module):
    """A recurrent policy's greedy step as an exported graph computes it: (normalized
    observations, memory) in, (the distribution's greedy env actions, the next memory) out. The
    networks are copies of `model`'s; the `distribution` is the caller's copy, its bounds
    constants of the graph."""

    def __init__(self, model: RecurrentActorCritic, distribution: Any):
        super().__init__()
        self.encoder = copy.deepcopy(model.encoder)
        self.memory = copy.deepcopy(model.memory)
        self.actor = copy.deepcopy(model.actor)
        self.distribution = distribution
        self.mask_n = model.mask_n

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = features_of(obs, self.mask_n)
        if self.encoder is not None:
            features = self.encoder(features)
        hidden, state = self.memory.step(features, state)
        out = legal_only(torch, self.actor(hidden), obs, self.mask_n)
        return self.distribution.greedy_env_actions(torch, out), state
