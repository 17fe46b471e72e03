"""Env names: gymnasium ids and module:Class paths with envConfig; supported spaces."""

import numpy as np
import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.making import make_env
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.job.driver import Driver
from testkit import trainer_config


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
        ("Blackjack-v1", {}, "observation space Tuple"),
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
