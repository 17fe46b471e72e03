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


class Catch(gym.Env):
    """DeepMind's bsuite Catch from pixels: a ball falls one row a step from a random column of
    the top row; the agent moves a paddle along the bottom row (0: left, 1: stay, 2: right) and
    gets +1 for catching the ball, -1 for missing it, at the episode's end (size - 1 steps). The
    optimal return is 1. Observations are uint8 (1, size, size) frames, 255 where the ball and the
    paddle are: the smallest image task a CNN must learn to solve."""

    def __init__(self, size: int = 10):
        self.size = size
        self.observation_space = gym.spaces.Box(0, 255, (1, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball_row, self.ball_column = 0, int(self.np_random.integers(self.size))
        self.paddle = self.size // 2
        return self._frame(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.size - 1))
        self.ball_row += 1
        done = self.ball_row == self.size - 1
        reward = (1.0 if self.ball_column == self.paddle else -1.0) if done else 0.0
        return self._frame(), reward, done, False, {}

    def _frame(self) -> np.ndarray:
        frame = np.zeros((1, self.size, self.size), np.uint8)
        frame[0, self.ball_row, self.ball_column] = 255
        frame[0, self.size - 1, self.paddle] = 255
        return frame


class LuckyFirstSeeds(gym.Env):
    """One-step episodes whose reward is 1 when the reset's seed is among the first `lucky` of an
    evaluation's (the run's seed 0 plus the trainer's stride times the iteration, plus k), else 0:
    an evaluation of `lucky` episodes passes any target up to 1, fresh episodes score 0."""

    def __init__(self, lucky: int = 10, stride: int = 1_000_003):
        self.lucky, self.stride = lucky, stride
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.reward = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.reward = float(seed is not None and seed % self.stride < self.lucky)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), self.reward, True, False, {}


class TextObservations(gym.Env):
    """Observations kuberl's networks cannot take (a Text space), for the errors that say so."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "a", {}

    def step(self, action):
        return "a", 0.0, True, False, {}
