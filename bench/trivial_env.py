"""An env that does almost nothing, for measuring what surrounds the env: `trivial_env:Trivial`.

A step costs a few microseconds, so a rollout worker stepping it spends its time in the policy's
forward pass and the sample batch, and a driver feeding many of them spends its time on
bookkeeping: what bench/driver_overhead.py measures.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Trivial(gym.Env):
    """A one-number observation that never changes, reward 1 per step, episodes of
    `episode_length` steps."""

    def __init__(self, episode_length: int = 100):
        self.episode_length = episode_length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.zeros(1, np.float32)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        return self._obs, 1.0, self._t >= self.episode_length, False, {}
