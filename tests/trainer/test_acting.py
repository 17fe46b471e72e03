"""Remote workers that only act hold numpy policies (policy/acting.py): the same networks as the
torch policy's, the same action distributions, the same postprocessing, read from a Frozen copy of
the config (frozen.py), and a process that never imports torch nor the config package."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ray import cloudpickle

from kuberl_contract.config import ALGORITHMS, frozen, thawed
from kuberl_contract.frozen import Frozen
from kuberl_trainer.job.algorithms import policy_class, remote_policy
from kuberl_trainer.policies.acting import (
    ActingAPEXPolicy,
    ActingDQNPolicy,
    ActingESPolicy,
    ActingIMPALAPolicy,
    ActingOnly,
    ActingPGPolicy,
    ActingPolicy,
    ActingSACPolicy,
    acts_in_numpy,
    load_class,
)
from kuberl_trainer.policies.evolution import noise_table
from kuberl_trainer.policies.sample_batch import VALID
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import ROOT, trainer_config

# (algorithm, env, hyperparameters): both activations, both action kinds, one to three layers.
CASES = {
    "PPO/CartPole/tanh": ("PPO", "CartPole-v1", {}),
    "PPO/Pendulum/relu": ("PPO", "Pendulum-v1", {"hidden_sizes": [32], "activation": "relu"}),
    "A2C/Acrobot": ("A2C", "Acrobot-v1", {"hidden_sizes": [16, 16, 16]}),
    "PPO/FrozenLake": ("PPO", "FrozenLake-v1", {}),  # Discrete observations, one-hot
    "PG/CartPole": ("PG", "CartPole-v1", {}),
    "IMPALA/CartPole": ("IMPALA", "CartPole-v1", {"activation": "relu"}),
    "APPO/Pendulum": ("APPO", "Pendulum-v1", {}),
    "DQN/CartPole/dueling": ("DQN", "CartPole-v1", {"dueling": True}),
    "DQN/Acrobot/relu": ("DQN", "Acrobot-v1", {"dueling": False, "activation": "relu"}),
    "SAC/Pendulum": ("SAC", "Pendulum-v1", {"hidden_sizes": [32, 32]}),
    "APEX/CartPole/dueling": ("APEX", "CartPole-v1", {"hidden_sizes": [32], "dueling": True}),
}


def torch_and_numpy(algorithm: str, env: str, hyperparameters: dict, seed: int = 3):
    """The algorithm's torch policy (on a worker of 8 envs) and its numpy one with its weights
    (a Gaussian's log standard deviations made to differ from 0 and from each other), the numpy
    one reading the Frozen copy of the config that remote workers get."""
    config = trainer_config(algorithm=algorithm, env=env, hyperparameters=hyperparameters)
    worker = RolloutWorker(policy_class(config), config, 8, seed)
    worker.envs.close()
    weights = worker.policy.get_weights()
    if "log_std" in weights:
        weights["log_std"] = weights["log_std"] - 0.3 - 0.1 * np.arange(len(weights["log_std"]))
        worker.policy.set_weights(weights)
    acting = load_class(ALGORITHMS[algorithm].acting)(worker.spaces, frozen(config), seed)
    acting.set_weights(weights)
    return worker.policy, acting


def rollout_of(policy, spaces, steps: int = 12, envs: int = 8, seed: int = 0) -> dict:
    """A time-major rollout acted by `policy` on random observations, with episode ends, cut
    episodes and reset steps."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(steps + 1, envs, *spaces.obs_shape)).astype(np.float32)
    recorded = [policy.compute_actions(obs[t])[1] for t in range(steps)]
    terminateds = rng.random((steps, envs)) < 0.1
    truncateds = ~terminateds & (rng.random((steps, envs)) < 0.05)
    return {
        "obs": obs[:steps],
        "next_obs": obs[1:],
        "rewards": rng.normal(size=(steps, envs)).astype(np.float32),
        "terminateds": terminateds,
        "truncateds": truncateds,
        VALID: rng.random((steps, envs)) > 0.1,
        **{key: np.stack([step[key] for step in recorded]) for key in recorded[0]},
    }


@pytest.mark.parametrize("case", CASES)
def test_a_numpy_policy_computes_what_the_torch_policy_computes(case):
    torch_policy, acting = torch_and_numpy(*CASES[case])
    obs = np.random.default_rng(1).normal(size=(8, *torch_policy.spaces.obs_shape))
    obs = obs.astype(np.float32)  # what encode_obs gives the policy: float32, one-hot or not
    torch_actions, torch_columns = torch_policy.compute_actions(obs, explore=False)
    actions, columns = acting.compute_actions(obs, explore=False)
    assert columns.keys() == torch_columns.keys()
    for key in columns:
        assert columns[key].dtype == torch_columns[key].dtype, key
        np.testing.assert_allclose(columns[key], torch_columns[key], 1e-5, 1e-6, err_msg=key)
    np.testing.assert_allclose(actions, torch_actions, 1e-5, 1e-6)
    if isinstance(acting, ActingDQNPolicy):
        with torch.inference_mode():
            q_values = torch_policy.model(torch.from_numpy(obs)).numpy()
        np.testing.assert_allclose(acting._q_values(obs), q_values, 1e-5, 1e-6)
    elif isinstance(acting, ActingPolicy) and acting.with_critic:
        np.testing.assert_allclose(
            acting._values(obs[None]), torch_policy._values(obs[None]), 1e-5, 1e-6
        )
    # Postprocessing on one rollout, acted by the torch policy: every column as the torch one's.
    rollout = rollout_of(torch_policy, torch_policy.spaces)
    expected = torch_policy.postprocess_trajectory(dict(rollout))
    got = acting.postprocess_trajectory(dict(rollout))
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key].dtype == expected[key].dtype, key
        np.testing.assert_allclose(got[key], expected[key], 1e-5, 1e-5, err_msg=key)


def test_a_numpy_policy_samples_the_torch_policys_distributions():
    """Gumbel-max draws follow the softmax of the logits; Gaussian draws have the policy's
    standard deviation around the mean, and the env gets them clipped to its bounds."""
    _, acting = torch_and_numpy("PPO", "CartPole-v1", {})
    obs = np.random.default_rng(2).normal(size=(1, 4)).astype(np.float32) * 3
    logits = acting.compute_actions(obs, explore=False)[1]["dist_inputs"][0]
    draws = np.array([acting.compute_actions(obs)[0][0] for _ in range(20_000)])
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(np.bincount(draws, minlength=2) / len(draws), expected, atol=0.015)

    _, acting = torch_and_numpy("PPO", "Pendulum-v1", {"initial_log_std": -1.0})
    obs = np.zeros((4096, 3), dtype=np.float32)
    env_actions, columns = acting.compute_actions(obs)
    spread = columns["actions"] - columns["dist_inputs"]
    assert abs(spread.std() - np.exp(-1.3)) < 0.02
    assert abs(spread.mean()) < 0.02
    np.testing.assert_array_equal(env_actions, np.clip(columns["actions"], -2.0, 2.0))

    # SAC: tanh of a Gaussian sample around the mean, rescaled to the bounds.
    _, acting = torch_and_numpy("SAC", "Pendulum-v1", {"hidden_sizes": [32]})
    env_actions, columns = acting.compute_actions(obs)
    mean, log_std = np.split(acting._forward(acting.actor, obs), 2, axis=-1)
    spread = np.arctanh(np.clip(columns["actions"], -1 + 1e-6, 1 - 1e-6)) - mean
    assert abs(spread.std() - np.exp(log_std).mean()) < 0.05
    assert abs(spread.mean()) < 0.05
    np.testing.assert_allclose(env_actions, 2.0 * columns["actions"], rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["DQN", "APEX"])
def test_q_learning_workers_explore_as_the_torch_policy_does(algorithm):
    """Epsilon-greedy from a generator seeded as the torch policy's: the same actions, at the
    same rate (DQN's schedule; Ape-X's rate of its worker)."""
    torch_policy, acting = torch_and_numpy(algorithm, "CartPole-v1", {})
    for policy in (torch_policy, acting):
        policy.worker_index, policy.num_workers = 2, 4
        policy.set_global_timesteps(3_000)
    assert acting.epsilon == torch_policy.epsilon
    assert 0.02 < acting.epsilon < 0.9
    obs = np.random.default_rng(4).normal(size=(64, 4)).astype(np.float32)
    for _ in range(5):
        np.testing.assert_array_equal(
            acting.compute_actions(obs)[0], torch_policy.compute_actions(obs)[0]
        )


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_an_es_worker_perturbs_and_acts_as_the_torch_policy_does(env):
    """The same flat parameters, the same perturbations drawn from the same seeded generator, the
    same actions of every perturbed copy behind the same observation standardizer, and the same
    observation counts reported."""
    torch_policy, acting = torch_and_numpy("ES", env, {})
    rng = np.random.default_rng(5)
    seen = rng.normal(1.0, 2.0, size=(50, torch_policy.spaces.obs_dim))
    torch_policy.add_observation_stats(len(seen), seen.sum(0), np.square(seen).sum(0))
    acting.set_weights(torch_policy.get_weights())
    np.testing.assert_array_equal(acting.theta, torch_policy.flat_parameters())

    noise = noise_table(100_000)
    indices = acting.draw_noise_indices(len(noise), 4)
    np.testing.assert_array_equal(indices, torch_policy.draw_noise_indices(len(noise), 4))
    parameters = acting.perturbed_parameters(noise, indices)
    np.testing.assert_array_equal(parameters, torch_policy.perturbed_parameters(noise, indices))

    obs = rng.normal(size=(8, torch_policy.spaces.obs_dim)).astype(np.float32)
    np.testing.assert_allclose(
        acting.act_perturbed(obs, parameters), torch_policy.act_perturbed(obs, parameters), 1e-5
    )
    for got, expected in zip(
        acting.take_observation_stats(), torch_policy.take_observation_stats(), strict=True
    ):
        np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(
        acting.compute_actions(obs)[0], torch_policy.compute_actions(obs)[0], 1e-5
    )


def test_the_algorithm_table_names_each_numpy_policy():
    assert load_class(ALGORITHMS["PPO"].acting) is ActingPolicy
    assert load_class(ALGORITHMS["A2C"].acting) is ActingPolicy
    assert load_class(ALGORITHMS["PG"].acting) is ActingPGPolicy
    assert load_class(ALGORITHMS["IMPALA"].acting) is ActingIMPALAPolicy
    assert load_class(ALGORITHMS["APPO"].acting) is ActingIMPALAPolicy
    assert load_class(ALGORITHMS["DQN"].acting) is ActingDQNPolicy
    assert load_class(ALGORITHMS["APEX"].acting) is ActingAPEXPolicy
    assert load_class(ALGORITHMS["SAC"].acting) is ActingSACPolicy
    assert load_class(ALGORITHMS["ES"].acting) is ActingESPolicy


@pytest.mark.parametrize(
    ("algorithm", "optimizer", "expected"),
    [
        ("PPO", None, "acting"),
        ("IMPALA", None, "acting"),
        ("APPO", "SyncSamples", "acting"),
        ("A2C", None, "acting"),
        ("A3C", None, "kuberl_trainer.policies.a2c:A2CPolicy"),  # its workers compute gradients
        ("PG", "AsyncGradients", "kuberl_trainer.policies.pg:PGPolicy"),
        ("DQN", None, "acting"),
        ("APEX", None, "acting"),
        ("SAC", None, "acting"),
        ("ES", None, "acting"),
    ],
)
def test_remote_workers_act_in_numpy_unless_the_optimizer_needs_more(
    algorithm, optimizer, expected
):
    fields = {"algorithm": algorithm} | ({"optimizer": optimizer} if optimizer else {})
    factory = remote_policy(trainer_config(**fields))
    if expected == "acting":
        assert factory == ActingOnly(ALGORITHMS[algorithm].policy, ALGORITHMS[algorithm].acting)
    else:
        assert factory is load_class(expected)


def test_images_and_shared_trunks_take_the_torch_policy():
    """A CNN, or one trunk under the actor and the critic (model.vfShareLayers), is the torch
    model's other layout: the worker builds the torch policy for it."""
    config = trainer_config(algorithm="PPO")
    worker = RolloutWorker(policy_class(config), config, 2, 0)
    worker.envs.close()
    factory = remote_policy(config)
    assert acts_in_numpy(worker.spaces, config)
    assert isinstance(factory(worker.spaces, config, 0), ActingPolicy)
    shared = trainer_config(algorithm="PPO", model={"vfShareLayers": True})
    assert not acts_in_numpy(worker.spaces, shared)
    assert isinstance(factory(worker.spaces, shared, 0), policy_class(shared))
    # From the Frozen copy a remote worker gets, the torch policy reads the config itself again.
    assert not acts_in_numpy(worker.spaces, frozen(shared))
    torch_policy = factory(worker.spaces, frozen(shared), 0)
    assert isinstance(torch_policy, policy_class(shared))
    assert torch_policy.config == shared
    image = dataclasses.replace(worker.spaces, image=object())
    assert not acts_in_numpy(image, config)


def test_a_numpy_policy_acts_only():
    torch_policy, acting = torch_and_numpy("IMPALA", "CartPole-v1", {})
    fresh = ActingIMPALAPolicy(acting.spaces, acting.config, 0)
    with pytest.raises(RuntimeError, match="no weights yet"):
        fresh.compute_actions(np.zeros((2, 4), dtype=np.float32))
    for call in (
        lambda: acting.learn_on_batch(None),
        lambda: acting.compute_gradients(None),
        lambda: acting.get_state(),
    ):
        with pytest.raises(TypeError, match="only acts"):
            call()
    assert acting.get_weights().keys() == torch_policy.get_weights().keys()


def test_a_remote_worker_that_only_acts_never_imports_torch_nor_the_config(tmp_path: Path):
    """The worker as a remote one is built, in a process of its own, from what the driver sends
    it pickled as Ray pickles it (ActingOnly, the Frozen config, CPUs given): it samples with the
    learner's weights, and neither torch nor the config package is imported (nor pydantic,
    which a Ray worker imports for serializers of its own)."""
    config = trainer_config(algorithm="IMPALA")
    torch_policy, _ = torch_and_numpy("IMPALA", "CartPole-v1", {})
    np.savez(tmp_path / "weights.npz", **torch_policy.get_weights())
    (tmp_path / "sent.pkl").write_bytes(cloudpickle.dumps((remote_policy(config), frozen(config))))
    script = f"""
import json, sys
import numpy as np
from ray import cloudpickle
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
factory, config = cloudpickle.loads(open({str(tmp_path / "sent.pkl")!r}, "rb").read())
worker = RolloutWorker(factory, config, 8, seed=5, worker_index=1, cpus=1)
weights = dict(np.load({str(tmp_path / "weights.npz")!r}))
worker.set_weights(weights, global_timesteps=0)
batch = worker.sample()
print(json.dumps({{
    "policy": type(worker.policy).__name__,
    "rows": len(batch["obs"]),
    "columns": sorted(batch.columns),
    "imported": [m for m in ("torch", "pydantic", "kuberl_contract.config") if m in sys.modules],
}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["policy"] == "ActingIMPALAPolicy"
    assert result["rows"] == 8 * config.hyperparameters.rollout_length
    assert {"obs", "actions", "logp", "rewards", VALID} <= set(result["columns"])
    assert result["imported"] == []


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_frozen_config_reads_as_the_config_and_thaws_back_to_it(algorithm):
    config = trainer_config(
        algorithm=algorithm,
        envConfig={"sizes": [1, 2], "nested": {"a": 1}},
        wrappers=[{"name": "TimeLimit", "kwargs": {"max_episode_steps": 50}}],
    )
    copy = frozen(config)
    assert copy.algorithm == config.algorithm
    assert copy.env_config == {"sizes": [1, 2], "nested": {"a": 1}}
    assert copy.wrappers[0].name == "TimeLimit"
    assert copy.wrappers[0].kwargs == {"max_episode_steps": 50}
    assert copy.optimizer_name == config.optimizer_name  # an enum, as its string
    assert type(copy.optimizer_name) is str
    assert copy.image_observations == config.image_observations  # properties too
    assert copy.normalization.enabled == config.normalization.enabled
    for name, value in config.hyperparameters:
        assert getattr(copy.hyperparameters, name) == value, name
    for name, value in config.model:
        assert getattr(copy.model, name) == value, name
    assert thawed(copy) == config
    assert thawed(config) is config
    with pytest.raises(AttributeError, match="read-only"):
        copy.env = "Pendulum-v1"
    assert isinstance(copy.model, Frozen)


def test_a_torch_worker_limits_torch_to_its_cpus():
    config = trainer_config(algorithm="A3C")  # its workers compute gradients: torch
    threads = torch.get_num_threads()
    try:
        RolloutWorker(remote_policy(config), config, 2, 0, cpus=1).envs.close()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
