"""Envs for tests, importable as `custom_envs:Class` (module:Class env names)."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor of `length` cells; reward 1 at the end. Discrete observations
    (the cell index) exercise one-hot encoding; envConfig sets the length."""

    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = gym.spaces.Discrete(length)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right
        self.position = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self.position, {}

    def step(self, action):
        self.position = int(np.clip(self.position + (1 if action == 1 else -1), 0, self.length - 1))
        done = self.position == self.length - 1
        return self.position, float(done), done, False, {}
