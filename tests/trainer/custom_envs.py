"""Envs for tests, importable as `custom_envs:Class` (module:Class env names)."""

import time

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


class SlowCartPole(gym.Wrapper):
    """CartPole-v1 whose steps after the first `fast_steps` each sleep `step_seconds`: iterations
    as long as a test needs from the one it chooses on. The first slow step touches `slow_file`
    (when given), so a test knows the long iteration has begun."""

    def __init__(self, step_seconds: float = 600.0, fast_steps: int = 0, slow_file: str = ""):
        super().__init__(gym.make("CartPole-v1"))
        self.step_seconds = step_seconds
        self.fast_steps = fast_steps
        self.slow_file = slow_file
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.fast_steps:
            if self.slow_file:
                open(self.slow_file, "a").close()
            time.sleep(self.step_seconds)
        return self.env.step(action)


class ScaledReward(gym.RewardWrapper):
    """Rewards times `scale`: a wrapper named as `custom_envs:ScaledReward`, with keyword
    arguments."""

    def __init__(self, env: gym.Env, scale: float = 1.0):
        super().__init__(env)
        self.scale = scale

    def reward(self, reward):
        return self.scale * reward


def scaled_reward(env: gym.Env, **kwargs) -> gym.Env:
    """ScaledReward made by a factory that takes any keyword arguments."""
    return ScaledReward(env, **kwargs)
