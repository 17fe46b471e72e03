"""Env names: gymnasium ids and module:Class paths with envConfig (their modules installed, or
next to the manifest); supported spaces."""

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.making import EnvError, make_env
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.envs.search_path import (
    ENV_PATH,
    import_env_module,
    run_directories,
    search_for_envs_in,
)
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.job.driver import Driver
from testkit import rljob, run_kuberl, trainer_config


def test_module_class_env_gets_env_config():
    env = make_env("custom_envs:Corridor", {"length": 7})
    assert env.length == 7
    info = space_info(env.observation_space, env.action_space)
    assert (info.obs_dim, info.obs_discrete_n, info.action_discrete_n) == (7, 7, 2)
    np.testing.assert_array_equal(encode_obs(np.array([2]), info), [[0, 0, 1, 0, 0, 0, 0]])


def test_discrete_observations_that_start_elsewhere_are_one_hot_from_their_start():
    import gymnasium as gym
    import torch

    from kuberl_trainer.trained.export import OneHot

    info = space_info(gym.spaces.Discrete(4, start=-2), gym.spaces.Discrete(2))
    assert (info.obs_dim, info.obs_discrete_start) == (4, -2)
    expected = [[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    np.testing.assert_array_equal(encode_obs(np.array([-2, 0, 1]), info), expected)
    # The exported policy's encoder reads them alike.
    exported = OneHot(info.obs_discrete_n, info.obs_discrete_start)(torch.tensor([-2, 0, 1]))
    np.testing.assert_array_equal(exported.numpy(), expected)


def test_discrete_actions_that_start_elsewhere_are_refused_saying_why():
    import gymnasium as gym

    from kuberl_trainer.envs.making import EnvError

    with pytest.raises(EnvError, match=r"starts at 1: kuberl's policies choose actions 0 to n-1"):
        space_info(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3, start=1))


@pytest.mark.parametrize(
    "env, config, needle",
    [
        ("CartPol-v1", {}, "did you mean 'CartPole-v1'"),
        ("custom_envs:TextObservations", {}, "observation space Text(1, 8, charset="),
        ("custom_envs:Nope", {}, "has no attribute 'Nope'"),
        ("no_such_module:Env", {}, "cannot import module 'no_such_module'"),
        ("custom_envs:Corridor", {"width": 3}, "unexpected keyword argument 'width'"),
        # gym's old Atari ids: the ALE/ id kuberl makes, and how to get v4's behaviour
        ("PongNoFrameskip-v4", {}, "did you mean 'ALE/Pong-v5'?"),
        ("SpaceInvaders-v4", {}, "did you mean 'ALE/SpaceInvaders-v5'?"),
        ("Pong-v5", {}, "envConfig {repeat_action_probability: 0.0}"),
    ],
)
def test_env_problems_are_explained(env, config, needle):
    assert needle in env_problem(env, config).message


def test_training_on_a_module_class_env_with_discrete_observations(tmp_path):
    config = trainer_config(
        algorithm="PPO",
        env="custom_envs:Corridor",
        envConfig={"length": 4},
        stop={"episodeReturnMean": 1.0, "timesteps": 20_000},
        hyperparameters={"rollout_length": 32, "gamma": 0.9},
        metricsWindow=5,
    )
    result = Driver(config, RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert result.stopped_by == "episodeReturnMean>=1", result


# -- module:Class envs next to the manifest ---------------------------------------------------

ENV_MODULE = '''
import os
from pathlib import Path

import gymnasium as gym
import numpy as np


class Steps(gym.Env):
    """Episodes of `length` steps; each process that makes one leaves its pid in `pids`."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, pids, length=5):
        (Path(pids) / str(os.getpid())).touch()
        self.length, self.steps = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.zeros(2, np.float32), 1.0, self.steps >= self.length, False, {}
'''


@pytest.fixture
def env_beside(tmp_path, monkeypatch):
    """A module of an env class in a folder of its own (not on the Python path), under a name no
    other test uses; the import path and ENV_PATH restored afterwards."""
    folder = tmp_path / "job"
    folder.mkdir()
    name = f"steps_{tmp_path.name.replace('-', '_')}"
    (folder / f"{name}.py").write_text(ENV_MODULE)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(ENV_PATH, raising=False)
    yield folder, name
    sys.modules.pop(name, None)


def test_a_module_in_the_run_directories_is_found_after_the_installed_ones(
    env_beside, tmp_path, monkeypatch
):
    folder, name = env_beside
    (folder / "wave.py").write_text("raise AssertionError('an installed module was replaced')")
    search_for_envs_in([folder])

    env = make_env(f"{name}:Steps", {"pids": str(tmp_path)})

    assert type(env.unwrapped).__module__ == name
    assert str(folder) in sys.path  # for the module's own imports of its neighbours
    # The folder now on the path holds a wave.py: the standard library's is still the one found.
    monkeypatch.delitem(sys.modules, "wave", raising=False)
    assert Path(import_env_module("wave").__file__).parent != folder


def test_a_module_found_nowhere_names_the_directories_searched(env_beside, tmp_path):
    _, name = env_beside
    search_for_envs_in([tmp_path / "elsewhere"])

    with pytest.raises(EnvError) as raised:
        make_env(f"{name}:Steps", {})

    message = str(raised.value)
    assert f"cannot import module {name!r}: No module named {name!r}" in message
    assert f"among the installed packages nor in {tmp_path / 'elsewhere'}, {Path.cwd()}" in message


def test_run_directories_are_the_manifests_then_the_working_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_directories(Path("jobs/job.yaml")) == [tmp_path / "jobs", tmp_path]
    assert run_directories(Path("job.yaml")) == [tmp_path]
    assert run_directories() == [tmp_path]


@pytest.mark.slow
def test_kuberl_train_finds_an_env_beside_its_manifest_in_remote_workers(env_beside, tmp_path):
    folder, name = env_beside
    pids = tmp_path / "pids"
    pids.mkdir()
    manifest = folder / "job.yaml"
    trainer = {
        "algorithm": "PPO",
        "env": f"{name}:Steps",
        "envConfig": {"pids": str(pids)},
        "seed": 0,
        "stop": {"iterations": 1},
        "hyperparameters": {"rollout_length": 16, "num_epochs": 1, "minibatch_size": 16},
    }
    workers = {"replicas": 1, "cpusPerWorker": 1, "envsPerWorker": 1}
    manifest.write_text(yaml.safe_dump(rljob("beside", trainer=trainer, rolloutWorkers=workers)))

    # From the repository root: the module is neither installed nor in the working directory.
    result = run_kuberl("train", manifest, "--run-dir", tmp_path / "run", timeout=300)

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "stopped at iterations>=1" in result.stdout
    # Made in the command's process (validation, the driver) and in the remote worker's.
    assert len(list(pids.iterdir())) >= 2, list(pids.iterdir())
