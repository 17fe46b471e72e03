"""Advantage and return estimators on time-major (T, N) arrays: T steps of N envs.

Pure numpy so they can be checked against hand-computed values. An episode boundary inside the
window stops every recursion; a truncated episode is bootstrapped from its final observation's
value, a terminated one is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuberl_trainer.policies.sample_batch import VALID

# What V-trace's learner needs of each step (IMPALA, APPO); next_obs for every step (not only where
# an episode was cut or the window ends) keeps the layout plain, and costs one critic pass without
# gradients.
SEQUENCE_COLUMNS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", VALID)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al. 2016).

    `next_values[t]` is V of the observation after step t (the final observation when the episode
    ended at t; the next start otherwise has no business in the estimate). Returns (advantages,
    value targets), both (T, N) float32.
    """
    not_terminated = 1.0 - terminateds.astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminated - values
    # The recursion's factor per step: gamma*lambda, or 0 where an episode ended.
    decay = (gamma * lam) * (~(terminateds | truncateds)).astype(np.float32)
    advantages = np.empty_like(deltas, dtype=np.float32)
    running = np.zeros(deltas.shape[1:], dtype=np.float32)
    for t in range(len(deltas) - 1, -1, -1):
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, (advantages + values).astype(np.float32)


def discounted_returns(
    rewards: np.ndarray, terminateds: np.ndarray, truncateds: np.ndarray, gamma: float
) -> np.ndarray:
    """Rewards-to-go within each episode, cut at the end of the window (REINFORCE's return)."""
    zeros = np.zeros_like(rewards, dtype=np.float32)
    returns, _ = compute_gae(rewards, zeros, zeros, terminateds, truncateds, gamma, 1.0)
    return returns


def compute_n_step(
    rewards: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    gamma: float,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns for every step of a (T, N) window.

    For step t the window covers up to n rewards, ending early at an episode's end or at the end
    of the sampled window. Returns (returns, last_step, bootstrap_discounts): the discounted reward
    sum, the index of the window's last step (the target bootstraps from that step's next
    observation), and gamma**steps, zeroed when the window ended in a termination.
    """
    horizon, num_envs = rewards.shape
    done = terminateds | truncateds
    start = np.arange(horizon)[:, None]
    returns = np.zeros((horizon, num_envs), dtype=np.float32)
    last_step = np.broadcast_to(start, (horizon, num_envs)).copy()
    steps = np.zeros((horizon, num_envs), dtype=np.int64)
    ended_terminated = np.zeros((horizon, num_envs), dtype=bool)
    open_window = np.ones((horizon, num_envs), dtype=bool)
    cols = np.arange(num_envs)[None, :]
    for k in range(n):
        index = start + k
        in_range = index < horizon
        index = np.minimum(index, horizon - 1)
        active = open_window & in_range
        returns += np.where(active, (gamma**k) * rewards[index, cols], 0.0)
        last_step = np.where(active, index, last_step)
        steps = np.where(active, k + 1, steps)
        ended_terminated = np.where(active, terminateds[index, cols], ended_terminated)
        open_window = active & ~done[index, cols]
    discounts = (gamma**steps) * (~ended_terminated)
    return returns, last_step, discounts.astype(np.float32)


def flatten_time_major(columns: dict[str, np.ndarray], valid: np.ndarray) -> dict[str, np.ndarray]:
    """(T, N, ...) → (rows, ...): the steps where `valid` (T, N) holds, in time-major order
    (reset steps, which are no transitions, left out)."""
    return {k: v[valid] for k, v in columns.items()}


def gae_window(
    rollout: dict[str, np.ndarray],
    values: np.ndarray,
    last_values: np.ndarray,
    logp: np.ndarray,
    gamma: float,
    lam: float,
) -> dict[str, np.ndarray]:
    """The (T, N) columns A2C, A3C and PPO learn from, before they become rows: `values` (T, N)
    are V of each step's observation and `last_values` (1, N) V of the observation the next window
    starts from, `logp` (T, N) the log-probabilities of the actions taken."""
    # V of every step's next observation: the next step's own, also where an episode ended (the
    # envs return its final observation and reset a step later).
    next_values = np.concatenate([values[1:], last_values])
    advantages, targets = compute_gae(
        rollout["rewards"],
        values,
        next_values,
        rollout["terminateds"],
        rollout["truncateds"],
        gamma,
        lam,
    )
    return {
        "obs": rollout["obs"],
        "actions": rollout["actions"],
        "logp": logp,
        "values": values,
        "advantages": advantages,
        "value_targets": targets,
    }


def gae_columns(rollout: dict[str, np.ndarray], *window: Any) -> dict[str, np.ndarray]:
    """The training rows of A2C, A3C and PPO from a rollout: the valid steps of
    `gae_window(rollout, *window)` (values, last_values, logp, gamma, lam)."""
    return flatten_time_major(gae_window(rollout, *window), rollout[VALID])


def returns_to_go_columns(
    rollout: dict[str, np.ndarray], gamma: float, normalize: bool
) -> dict[str, np.ndarray]:
    """PG's training rows: each step's discounted return to the end of its episode or window as
    its advantage, standardized over the batch when `normalize`."""
    returns = discounted_returns(
        rollout["rewards"], rollout["terminateds"], rollout["truncateds"], gamma
    )
    columns = flatten_time_major(
        {"obs": rollout["obs"], "actions": rollout["actions"], "advantages": returns},
        rollout[VALID],
    )
    if normalize:
        returns = columns["advantages"]
        columns["advantages"] = (returns - returns.mean()) / (returns.std() + 1e-8)
    return columns


def sequence_columns(rollout: dict[str, np.ndarray], logp: np.ndarray) -> dict[str, np.ndarray]:
    """V-trace's training rows (IMPALA, APPO): whole sequences, env-major (row n*T + t for env n and
    step t), with the behaviour policy's log-probabilities `logp` (T, N): these weights sampled
    the whole rollout."""
    columns = {key: rollout[key] for key in SEQUENCE_COLUMNS} | {"logp": logp}
    return {k: v.swapaxes(0, 1).reshape(-1, *v.shape[2:]) for k, v in columns.items()}


def n_step_columns(rollout: dict[str, np.ndarray], gamma: float, n: int) -> dict[str, np.ndarray]:
    """The replay policies' n-step transitions (DQN, Ape-X, SAC): the discounted sum of up to n
    rewards, the observation to bootstrap from, and its discount (0 when the episode terminated
    inside the window)."""
    returns, last_step, bootstrap_discounts = compute_n_step(
        rollout["rewards"], rollout["terminateds"], rollout["truncateds"], gamma, n
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
