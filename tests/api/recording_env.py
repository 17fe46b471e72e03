"""An env for the API's tests, importable as `recording_env:EnvironmentRecorder` by the trainers a
test's server starts (conftest puts this directory on their PYTHONPATH)."""

import json
import os
from pathlib import Path

import gymnasium as gym


class EnvironmentRecorder(gym.Wrapper):
    """CartPole-v1 that writes the environment variables of the process making it, as JSON, to
    `path` (whole or not at all: a job makes several at once)."""

    def __init__(self, path: str):
        super().__init__(gym.make("CartPole-v1"))
        partial = Path(f"{path}.{os.getpid()}.{id(self)}")
        partial.write_text(json.dumps(dict(os.environ)))
        partial.replace(path)
