"""What making an env named in a policy file would run besides gymnasium's own code: every
module path and the few library pieces that reach beyond the env, each named with its field; a
registered id and the classes of gymnasium.wrappers are data."""

from __future__ import annotations

import pytest

from kuberl_contract.config import WrapperConfig
from kuberl_trainer.envs.making import gymnasium_wrapper_names
from kuberl_trainer.envs.trust import RUNS_CODE, EnvCode, env_code, on_named_env
from testkit import trainer_config


@pytest.mark.parametrize("env", ["CartPole-v1", "ALE/Pong-v5", "phys2d/CartPole-v1", "NoSuch-v0"])
def test_an_id_runs_no_code_the_file_names(env):
    assert env_code(env) == []


def test_every_class_of_gymnasium_wrappers_by_name_is_data_but_one():
    wrappers = [WrapperConfig(name=name) for name in gymnasium_wrapper_names()]
    (record_video,) = env_code("CartPole-v1", wrappers)
    assert record_video.name == "RecordVideo"
    assert "writes files" in record_video.why


@pytest.mark.parametrize(
    "env", ["os:system", "custom_envs:Catch", "hostile_code:CartPole-v1", "a:b:c", ":x"]
)
def test_a_module_path_is_code(env):
    assert env_code(env) == [EnvCode("env", env, RUNS_CODE)]


def test_the_compatibility_ids_that_make_the_old_gyms_envs_are_code():
    (found,) = env_code("GymV26Environment-v0")
    assert found.field == "env" and "old gym" in found.why


def test_each_thing_is_named_with_its_field():
    wrappers = [
        WrapperConfig(name="FlattenObservation"),
        WrapperConfig(name="custom_envs:ScaledReward", kwargs={"scale": 2}),
        WrapperConfig(name="RecordVideo", kwargs={"video_folder": "/anywhere"}),
    ]
    found = env_code("os:system", wrappers)

    assert [(code.field, code.name) for code in found] == [
        ("env", "os:system"),
        ("wrappers[1]", "custom_envs:ScaledReward"),
        ("wrappers[2]", "RecordVideo"),
    ]
    assert str(found[0]) == "env 'os:system' (a module:attr path, which runs code)"


def test_an_env_the_user_names_replaces_the_files_env_and_all_that_was_made_for_it():
    config = trainer_config(
        algorithm="PPO",
        env="os:system",
        envConfig={"command": "true"},
        wrappers=[{"name": "custom_envs:ScaledReward"}],
        hyperparameters={"gamma": 0.9},
    )
    named = on_named_env(config, "CartPole-v1")

    assert (named.env, named.env_config, named.wrappers) == ("CartPole-v1", {}, [])
    assert named.hyperparameters == config.hyperparameters
    assert config.env == "os:system"  # the file's own copy is left as it was
