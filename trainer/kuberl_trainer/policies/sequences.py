"""Training rows of a recurrent policy: a rollout's lanes cut into sequences of fixed length, each
with the memory the lane acted with at its first step (RLlib's and SB3-contrib's layout).

Pure numpy, as postprocessing.py. A sequence keeps the envs' reset steps (marked by `valid`) so
that it stays whole; `episode_starts` marks the steps whose memory starts at zero, and a window
that does not fill its last sequence is padded with invalid rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuberl_trainer.policies.postprocessing import gae_window
from kuberl_trainer.policies.sample_batch import VALID

STATE_IN = "state_in"
"""The memory a lane acted on a step with (its starts applied): a (rows, state_size) column of
which the learner reads each sequence's first row."""
EPISODE_STARTS = "episode_starts"
"""True on a lane's first step of an episode: its memory starts at zero there."""


def sequence_rows(columns: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """Time-major (T, N, ...) columns as env-major sequences of `length` steps: row
    (n * K + k) * length + i holds step k * length + i of lane n, K = ceil(T / length). Steps past
    T are padding: zeros, and False in `valid` (which `columns` must hold)."""
    horizon = len(columns[VALID])
    count = -(-horizon // length)
    padded = count * length
    rows = {}
    for key, column in columns.items():
        if padded > horizon:
            pad = np.zeros((padded - horizon, *column.shape[1:]), dtype=column.dtype)
            column = np.concatenate([column, pad])
        # (K * L, N, ...) -> (N, K * L, ...) -> (N * K * L, ...): lane by lane, in time order
        rows[key] = column.swapaxes(0, 1).reshape(-1, *column.shape[2:])
    return rows


def recurrent_gae_columns(
    rollout: dict[str, np.ndarray],
    last_values: np.ndarray,
    logp: np.ndarray,
    gamma: float,
    lam: float,
    length: int,
) -> dict[str, np.ndarray]:
    """gae_columns' rows for a recurrent policy: GAE over the whole (T, N) window (values recorded
    while acting, with the memory), then the lanes cut into sequences of `length` steps with their
    memory (`state_in`) and episode starts; the reset steps stay, invalid."""
    window = gae_window(rollout, rollout["values"], last_values[None], logp, gamma, lam)
    memory = {key: rollout[key] for key in (STATE_IN, EPISODE_STARTS, VALID)}
    return sequence_rows(window | memory, length)


def shuffled_sequences(
    rows: int, length: int, parts: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """One shuffled pass over the sequences of `rows` rows (of `length` each) in `parts`
    minibatches of whole sequences, as row indices."""
    count = rows // length
    order = rng.permutation(count)
    steps = np.arange(length)
    return [
        (chunk[:, None] * length + steps).reshape(-1)
        for chunk in np.array_split(order, max(1, min(parts, count)))
    ]


def recurrent_training_rows(policy: Any, rollout: dict[str, np.ndarray], last_values) -> dict:
    """A recurrent actor-critic's training rows (torch's or numpy's): `recurrent_gae_columns`
    with the policy's log-probabilities of the actions taken, its gamma, lambda and sequence
    length."""
    return recurrent_gae_columns(
        rollout,
        last_values,
        policy._logp(rollout["dist_inputs"], rollout["actions"]),
        policy.hp.gamma,
        policy.hp.gae_lambda,
        policy.sequence_length,
    )
