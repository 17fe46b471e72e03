"""Envs for measuring what surrounds the env.

`trivial_env:Trivial` does almost nothing: a step costs a few microseconds, so a rollout worker
stepping it spends its time in the policy's forward pass and the sample batch, and a driver
feeding many of them spends its time on bookkeeping: what bench/driver_overhead.py measures.

`trivial_env:SlowCartPole` is CartPole-v1 waiting a fixed time per step without using the CPU:
what bench/async_scaling.py --step-ms runs to see an optimizer's scaling apart from the cores.
"""

from __future__ import annotations

import time

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


class SlowCartPole(gym.Wrapper):
    """CartPole-v1 whose every step also waits `step_ms` milliseconds without using the CPU, like
    a simulator in another process or on another machine: the workers' throughput is then bound
    by the env's latency, not by the cores, so adding a worker adds a worker's rate only if the
    optimizer keeps every worker busy (bench/async_scaling.py --step-ms)."""

    def __init__(self, step_ms: float = 1.0):
        super().__init__(gym.make("CartPole-v1"))
        self.step_seconds = step_ms / 1000

    def step(self, action):
        time.sleep(self.step_seconds)
        return self.env.step(action)
