"""The episodes running in a rollout worker's lanes: their returns and lengths so far, and those
of the episodes that ended.

A single-agent job's lane is an env, and its episode is the lane's. A multi-agent job's lanes are
its agents (envs/multi_agent.py), `lanes_per_episode` of them per copy of the env: an episode's
return is the sum of its agents' (RLlib's episode return), its length the most steps an agent
took, and each agent's own return counts for its policy (`policy_returns`) when it took part.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


class EpisodeTracker:
    def __init__(
        self, lanes: int, lanes_per_episode: int = 1, lane_policies: list[str] | None = None
    ):
        """`lane_policies`: the policy of each of the first lanes, a pattern that repeats (over
        one copy of the env, or two where self-play alternates seats), for a multi-agent job of
        several policies; None otherwise."""
        self.returns = np.zeros(lanes, dtype=np.float64)
        self.lengths = np.zeros(lanes, dtype=np.int64)
        self.per_episode = lanes_per_episode
        self.lane_policies = lane_policies
        self._finished: list[tuple[np.ndarray, np.ndarray]] = []
        self._policy_returns: dict[str, list[np.ndarray]] = defaultdict(list)

    def step(self, rewards: np.ndarray, counted: np.ndarray, ended: np.ndarray) -> None:
        """One step: each lane's reward to add (0 on a reset step), which lanes' steps count
        (they acted), and which lanes' episodes ended with it."""
        self.returns += rewards
        self.lengths += counted
        if ended.any():
            self._end(np.flatnonzero(ended))

    def _end(self, lanes: np.ndarray) -> None:
        returns, lengths = self.returns[lanes], self.lengths[lanes]
        if self.per_episode == 1:
            self._finished.append((returns, lengths))
        else:  # whole copies end together: their lanes are consecutive
            episodes = len(lanes) // self.per_episode
            self._finished.append(
                (
                    returns.reshape(episodes, -1).sum(axis=1),
                    lengths.reshape(episodes, -1).max(axis=1),
                )
            )
            if self.lane_policies is not None:
                for lane, value, length in zip(lanes, returns, lengths, strict=True):
                    if length:  # the agent took part
                        name = self.lane_policies[lane % len(self.lane_policies)]
                        self._policy_returns[name].append(np.array([value]))
        self.returns[lanes] = 0.0
        self.lengths[lanes] = 0

    def reset(self) -> None:
        """Forget the episodes running (the envs were reset)."""
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def take(self) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The returns and lengths of the episodes that ended since the last call, and each
        policy's agents' returns in them (multi-agent jobs of several policies only)."""
        returns = np.concatenate([np.zeros(0), *(r for r, _ in self._finished)])
        lengths = np.concatenate([np.zeros(0, np.int64), *(n for _, n in self._finished)])
        policies = {
            name: np.concatenate(values).astype(np.float32)
            for name, values in self._policy_returns.items()
        }
        self._finished.clear()
        self._policy_returns.clear()
        return returns.astype(np.float32), lengths, policies
