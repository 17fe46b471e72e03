"""An env for the API's tests, importable as `failing_env:FailsWhileTraining` by the trainers a
test's server starts (conftest puts this directory on their PYTHONPATH): a job that passes every
check and fails while it trains."""

import gymnasium as gym


class FailsWhileTraining(gym.Wrapper):
    """CartPole-v1 whose step raises after `steps` steps (a check makes the env but steps it
    not). The error names this file by its absolute path, as a traceback's last line may."""

    def __init__(self, steps: int = 100):
        super().__init__(gym.make("CartPole-v1"))
        self.steps_left = steps

    def step(self, action):
        self.steps_left -= 1
        if self.steps_left < 0:
            raise RuntimeError(f"the env broke while training, see {__file__}")
        return super().step(action)
