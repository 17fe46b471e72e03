"""A policy acts in three forms: the torch policy, the numpy policy of a rollout worker that only
acts (policies/acting.py), and the exported ONNX graph (trained/export.py), all three through the
one action distribution of policies/distributions.py. For every algorithm and every kind of action
space it handles, the three give the same greedy actions on the same observations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch

from kuberl_contract.config import ALGORITHMS, frozen
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.checkpoint import Checkpoint
from kuberl_trainer.job.resume import checkpoint_meta
from kuberl_trainer.policies.acting import load_class
from kuberl_trainer.trained.export import export, sample_observations
from kuberl_trainer.trained.inference import TrainedPolicy
from testkit import trainer_config

OBSERVATIONS = gym.spaces.Box(-10.0, 10.0, (5,), np.float32)
ACTION_SPACES = {
    "Discrete": gym.spaces.Discrete(4),
    # Bounds of their own in every dimension: clipping and SAC's rescaling are per dimension.
    "Box": gym.spaces.Box(np.float32([-2.0, -1.0, 0.0]), np.float32([2.0, 0.5, 3.0])),
}
DUELING = {"DQN": False, "APEX": True}  # both Q-network layouts
CASES = {
    f"{algorithm}/{kind}": (algorithm, kind)
    for algorithm, row in ALGORITHMS.items()
    for kind in ACTION_SPACES
    if not (row.discrete_actions_only and kind == "Box")
    and not (row.continuous_actions_only and kind == "Discrete")
}
COUNT = 500


def policies(algorithm: str, kind: str):
    """The algorithm's torch policy with weights far from their initialisation (outputs of every
    size, a Gaussian's means beyond the bounds) and, for ES, a standardizer in use; the numpy
    policy with its weights, reading the Frozen copy of the config that remote workers get; and
    the spaces."""
    hyperparameters = {"hidden_sizes": [32, 32]}
    if algorithm in DUELING:
        hyperparameters["dueling"] = DUELING[algorithm]
    config = trainer_config(algorithm=algorithm, hyperparameters=hyperparameters)
    action_space = ACTION_SPACES[kind]
    spaces = space_info(OBSERVATIONS, action_space, config.model, config.image_observations)
    torch_policy = policy_class(config)(spaces, config, 0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in torch_policy.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    if algorithm == "ES":
        seen = np.random.default_rng(2).normal(1.0, 3.0, size=(100, spaces.obs_dim))
        torch_policy.add_observation_stats(len(seen), seen.sum(0), np.square(seen).sum(0))
    numpy_policy = load_class(ALGORITHMS[algorithm].acting)(spaces, frozen(config), 0)
    numpy_policy.set_weights(torch_policy.get_weights())
    return config, spaces, torch_policy, numpy_policy


def exported_graph(config, torch_policy, action_space, path) -> onnxruntime.InferenceSession:
    """The torch policy's checkpoint exported to ONNX as `kuberl export` exports it, loaded in
    onnxruntime."""
    meta = checkpoint_meta(config, 1, 0, None, (OBSERVATIONS, action_space))
    checkpoint = Checkpoint(str(path.parent), meta, {"policy": torch_policy.get_state()})
    trained = TrainedPolicy(checkpoint)
    try:
        export(trained, path)
    finally:
        trained.close()
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", CASES)
def test_torch_numpy_and_onnx_act_alike(case, tmp_path):
    algorithm, kind = CASES[case]
    config, spaces, torch_policy, numpy_policy = policies(algorithm, kind)
    space = ACTION_SPACES[kind]
    graph = exported_graph(config, torch_policy, space, tmp_path / "policy.onnx")

    obs = sample_observations(OBSERVATIONS, COUNT, seed=3)
    encoded = encode_obs(obs, spaces)
    torch_actions, _ = torch_policy.compute_actions(encoded, explore=False)
    numpy_actions, _ = numpy_policy.compute_actions(encoded, explore=False)
    (onnx_actions,) = graph.run(["actions"], {"obs": obs})

    for actions in (numpy_actions, onnx_actions):
        assert (actions.shape, actions.dtype) == (torch_actions.shape, torch_actions.dtype)
    if kind == "Discrete":
        np.testing.assert_array_equal(numpy_actions, torch_actions)
        np.testing.assert_array_equal(onnx_actions, torch_actions)
        assert len(np.unique(torch_actions)) > 1  # the observations tell actions apart
        return
    np.testing.assert_allclose(numpy_actions, torch_actions, rtol=0, atol=1e-5)
    np.testing.assert_allclose(onnx_actions, torch_actions, rtol=0, atol=1e-5)
    assert ((torch_actions >= space.low) & (torch_actions <= space.high)).all()
    if algorithm != "SAC":  # some means were beyond the bounds, and clipped to each dimension's
        assert np.isin(torch_actions, np.concatenate([space.low, space.high])).any()
