"""Partially observed control tasks: envs whose observations hide what a policy must remember,
the standard test of a recurrent policy (spec.trainer.model.recurrent)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

VELOCITY_COLUMNS = {
    "CartPole-v1": (1, 3),  # cart velocity, pole angular velocity
    "CartPole-v0": (1, 3),
    "Pendulum-v1": (2,),  # angular velocity
    "MountainCar-v0": (1,),  # velocity
    "MountainCarContinuous-v0": (1,),
    "LunarLander-v3": (2, 3, 5),  # horizontal and vertical speed, angular speed
}
"""The observation columns that are velocities, by env id (SB3-contrib's MaskVelocityWrapper):
a policy sees positions only and has to infer the velocities from the positions it saw."""


class MaskVelocity(gym.ObservationWrapper):
    """The env with its velocity columns (VELOCITY_COLUMNS) zeroed in every observation."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        env_id = env.unwrapped.spec.id if env.unwrapped.spec is not None else None
        if env_id not in VELOCITY_COLUMNS:
            known = ", ".join(VELOCITY_COLUMNS)
            raise ValueError(f"MaskVelocity knows the velocities of {known}; not of {env_id}")
        self.mask = np.ones(env.observation_space.shape, dtype=np.float32)
        self.mask[list(VELOCITY_COLUMNS[env_id])] = 0.0

    def observation(self, observation: Any) -> np.ndarray:
        return (observation * self.mask).astype(self.observation_space.dtype)
