"""`kuberl export`: a trained policy's greedy actions as one ONNX graph or TorchScript module. Each
algorithm family's export, run by onnxruntime and by torch.jit as any other program would run it,
acts as `TrainedPolicy.predict` does; the files say where they came from; an exported policy
loaded back predicts and evaluates as the policy; and what cannot be exported is refused."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from kuberl_cli.export import export_command
from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.space_record import spaces_from_record
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.trained import export as export_module
from kuberl_trainer.trained.export import (
    ExportError,
    export,
    load_exported,
    sample_observations,
)
from kuberl_trainer.trained.inference import TrainedPolicy, load
from testkit import trainer_config

ON_POLICY = {"rollout_length": 16, "hidden_sizes": [32, 32]}
CASES = {
    "PG": {"algorithm": "PG", "hyperparameters": ON_POLICY},
    "PG-continuous": {"algorithm": "PG", "env": "Pendulum-v1", "hyperparameters": ON_POLICY},
    "A2C": {"algorithm": "A2C", "hyperparameters": ON_POLICY},
    "A2C-continuous": {"algorithm": "A2C", "env": "Pendulum-v1", "hyperparameters": ON_POLICY},
    "PPO": {"algorithm": "PPO", "hyperparameters": {**ON_POLICY, "minibatch_size": 32}},
    "PPO-continuous": {
        "algorithm": "PPO",
        "env": "Pendulum-v1",
        "hyperparameters": {**ON_POLICY, "minibatch_size": 32},
    },
    "IMPALA": {"algorithm": "IMPALA", "hyperparameters": ON_POLICY},
    "APPO": {"algorithm": "APPO", "hyperparameters": ON_POLICY},
    "DQN-dueling": {
        "algorithm": "DQN",
        "hyperparameters": {"dueling": True, "learning_starts": 0, "hidden_sizes": [64, 64]},
    },
    "SAC": {
        "algorithm": "SAC",
        "env": "Pendulum-v1",
        "hyperparameters": {"learning_starts": 0, "hidden_sizes": [64, 64]},
    },
    # ES standardizes observations inside its policy (hyperparameters.normalize_observations).
    "ES": {
        "algorithm": "ES",
        "hyperparameters": {
            "normalize_observations": True,
            "episodes_per_batch": 4,
            "noise_size": 100_000,
            "hidden_sizes": [32, 32],
        },
    },
    "PPO-normalized": {
        "algorithm": "PPO",
        "normalization": {"observations": True},
        "hyperparameters": {**ON_POLICY, "minibatch_size": 32},
    },
    "PPO-CNN": {  # uint8 (1, 10, 10) frames
        "algorithm": "PPO",
        "env": "custom_envs:Catch",
        "model": {"convFilters": [[16, 3, 1], [32, 3, 1]], "features": 64},
        "hyperparameters": {"rollout_length": 9, "minibatch_size": 18},
    },
    "PPO-CNN-bfloat16": {  # trained in bfloat16; loaded, exported and predicting in float32
        "algorithm": "PPO",
        "env": "custom_envs:Catch",
        "model": {"convFilters": [[16, 3, 1], [32, 3, 1]], "features": 64, "precision": "bfloat16"},
        "hyperparameters": {"rollout_length": 9, "minibatch_size": 18},
    },
    "PPO-one-hot": {  # Discrete observations, one-hot encoded inside the graph
        "algorithm": "PPO",
        "env": "custom_envs:Corridor",
        "hyperparameters": {**ON_POLICY, "minibatch_size": 32},
    },
}
PARITY_OBSERVATIONS = 1_000

# torch 2.13 deprecates torch.jit, which is what loads a TorchScript file, as libtorch does.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.load` is deprecated:DeprecationWarning"
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """The run directory of a case trained for two iterations (in this process, without Ray),
    trained once for the module."""
    made: dict[str, Path] = {}

    def make(case: str) -> Path:
        if case not in made:
            directory = tmp_path_factory.mktemp(case)
            config = trainer_config(**CASES[case], stop={"iterations": 2})
            Driver(config, RolloutConfig(envs_per_worker=2), directory, case).run()
            made[case] = directory
        return made[case]

    return make


def scramble(policy: TrainedPolicy) -> None:
    """Weights far from their initialisation, whose small output layers keep every action near
    the middle: outputs of every size, continuous ones beyond the action bounds, which the export
    must clip as the policy does."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in policy.policy.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)


def onnxruntime_actions(path: Path, obs: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["actions"], {"obs": obs})[0]


def torchscript_actions(path: Path, obs: np.ndarray) -> np.ndarray:
    module = torch.jit.load(str(path))
    with torch.inference_mode():
        return module(torch.from_numpy(obs)).numpy()


def observations_counted(policy: TrainedPolicy) -> float:
    """How many observations the frozen normalization statistics were computed from."""
    if policy.config.algorithm == "ES":
        return float(policy.policy.model.obs_stats.count)
    return policy.normalizer.stats.obs.count


@pytest.mark.parametrize("case", CASES)
def test_the_exported_graph_and_module_act_as_the_policy(case, run_dir, tmp_path):
    policy = load(run_dir(case))
    try:
        scramble(policy)
        if case in ("ES", "PPO-normalized"):
            assert observations_counted(policy) >= 2  # the statistics are in use
        obs = sample_observations(policy.observation_space, PARITY_OBSERVATIONS, seed=1)
        expected, _ = policy.predict(obs)
        as_sb3, state = policy.predict(obs, state=None, episode_start=[True], deterministic=True)
        np.testing.assert_array_equal(as_sb3, expected)
        assert state is None
        onnx_path = export(policy, tmp_path / "policy.onnx")
        torchscript_path = export(policy, tmp_path / "policy.pt")

        space, discrete = policy.action_space, policy.spaces.discrete_actions
        for actions in (
            onnxruntime_actions(onnx_path, obs),
            torchscript_actions(torchscript_path, obs),
        ):
            assert (actions.shape, actions.dtype) == (expected.shape, expected.dtype)
            if discrete:
                np.testing.assert_array_equal(actions, expected)
                assert ((actions >= 0) & (actions < space.n)).all()
            else:
                np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-5)
                assert ((actions >= space.low) & (actions <= space.high)).all()
        if not discrete and case != "SAC":
            # Some of the scrambled policy's means were beyond the bounds, and clipped.
            assert np.isin(expected, np.concatenate([space.low, space.high])).any()
    finally:
        policy.close()


@pytest.fixture(scope="module")
def cartpole(run_dir, tmp_path_factory):
    """PPO on CartPole's policy, exported to both formats."""
    policy = load(run_dir("PPO"))
    directory = tmp_path_factory.mktemp("exported")
    onnx_path = export(policy, directory / "policy.onnx")
    torchscript_path = export(policy, directory / "policy.pt")
    yield policy, onnx_path, torchscript_path
    policy.close()


def test_the_files_say_what_they_hold_and_where_it_came_from(cartpole):
    policy, onnx_path, torchscript_path = cartpole
    model = onnx.load(str(onnx_path))
    onnx_meta = {prop.key: prop.value for prop in model.metadata_props}
    extra_files = {"kuberl.json": ""}
    torch.jit.load(str(torchscript_path), _extra_files=extra_files)
    torchscript_meta = json.loads(extra_files["kuberl.json"])

    for meta in (onnx_meta, torchscript_meta):
        assert meta["algorithm"] == "PPO"
        assert meta["env"] == "CartPole-v1"
        assert meta["kuberl_version"] == importlib.metadata.version("kuberl")
        assert meta["checkpoint"] == "checkpoints/" + Path(policy.uri).name  # no machine's path
        assert meta["iteration"] == "2"
        assert meta["timesteps"] == str(policy.meta["timesteps"])
        assert meta["observation_space"] == str(policy.observation_space)
        assert meta["action_space"] == "Discrete(2)"
        # The spaces themselves, which the file acts on without an env.
        recorded = spaces_from_record(json.loads(meta["spaces"]))
        assert recorded == (policy.observation_space, policy.action_space)
        assert json.loads(meta["trainer"])["algorithm"] == "PPO"
    assert (onnx_meta["opset"], onnx_meta["format"]) == ("18", "ONNX opset 18")
    assert torchscript_meta["format"] == "TorchScript"
    assert "opset" not in torchscript_meta  # an ONNX notion

    assert [(o.domain, o.version) for o in model.opset_import if o.domain == ""] == [("", 18)]
    (graph_input,), (graph_output,) = model.graph.input, model.graph.output
    assert (graph_input.name, graph_output.name) == ("obs", "actions")
    batch, features = graph_input.type.tensor_type.shape.dim
    assert batch.dim_param and features.dim_value == 4  # any batch size


@pytest.mark.parametrize("suffix", [".onnx", ".pt"])
def test_an_exported_policy_predicts_one_observation_or_a_batch(cartpole, suffix):
    policy, *paths = cartpole
    exported = load_exported(next(path for path in paths if path.suffix == suffix))
    obs = sample_observations(policy.observation_space, 64, seed=2)

    actions, state = exported.predict(obs)
    # Stable-Baselines3's calling convention, as in its evaluation loops
    sb3 = exported.predict(obs, state=None, episode_start=np.ones(len(obs), bool))
    np.testing.assert_array_equal(sb3[0], actions)
    assert sb3[1] is None
    assert state is None
    np.testing.assert_array_equal(actions, policy.predict(obs)[0])
    single, _ = exported.predict(obs[5])
    assert np.ndim(single) == 0 and single == actions[5]
    assert exported.meta["algorithm"] == "PPO" and exported.config.env == "CartPole-v1"
    assert exported.observation_space == policy.observation_space
    assert exported.action_space == policy.action_space
    with pytest.raises(ValueError, match="greedy only"):
        exported.predict(obs, deterministic=False)
    with pytest.raises(ValueError, match=r"has shape \(4,\).*got \(3, 5\)"):
        exported.predict(np.zeros((3, 5)))


def test_an_exported_policy_plays_the_policys_episodes(cartpole):
    policy, onnx_path, _ = cartpole
    evaluation = load_exported(onnx_path).evaluate(episodes=3, seed=5)
    assert evaluation.as_dict() == policy.evaluate(episodes=3, seed=5).as_dict()


def test_an_unknown_suffix_is_refused_naming_the_accepted_ones(cartpole, tmp_path):
    policy, *_ = cartpole
    with pytest.raises(ValueError, match=r"cannot export to \.h5; use \.onnx .*, \.pt"):
        export(policy, tmp_path / "policy.h5")
    with pytest.raises(ValueError, match=r"cannot export to no suffix"):
        load_exported(tmp_path / "policy")
    assert list(tmp_path.iterdir()) == []


def test_an_export_that_would_act_otherwise_is_refused_and_not_kept(
    cartpole, tmp_path, monkeypatch
):
    policy, *_ = cartpole
    greedy = export_module.greedy_module

    def least_likely_actions(policy):  # an exporter bug's stand-in
        module = greedy(policy)
        module.act.net[-1].weight.neg_()
        return module

    monkeypatch.setattr(export_module, "greedy_module", least_likely_actions)
    with pytest.raises(ExportError, match="acts otherwise than the policy"):
        export(policy, tmp_path / "policy.onnx")
    assert not (tmp_path / "policy.onnx").exists()


def test_kuberl_export_writes_the_file_and_says_what_it_holds(run_dir, tmp_path, capsys):
    output = tmp_path / "out" / "cartpole.onnx"
    trained = run_dir("PPO")
    capsys.readouterr()  # the training's own report, where this test is the first to train PPO
    assert export_command(str(trained), output) == 0
    assert capsys.readouterr().out == (
        f"{output}: PPO on CartPole-v1, greedy policy, ONNX opset 18, input obs (batch, 4) "
        "float32, output actions (batch,) int64\n"
    )
    assert output.exists()

    assert export_command(str(run_dir("SAC")), tmp_path / "pendulum.pt") == 0
    assert capsys.readouterr().out.endswith(
        "SAC on Pendulum-v1, greedy policy, TorchScript, input obs (batch, 3) float32, "
        "output actions (batch, 1) float32\n"
    )


def test_kuberl_export_says_what_is_wrong(run_dir, tmp_path, capsys):
    assert export_command(str(tmp_path / "nothing"), tmp_path / "policy.onnx") == 2
    assert "kuberl export: " in (err := capsys.readouterr().err)
    assert "no such file or directory" in err

    assert export_command(str(tmp_path), tmp_path / "policy.onnx") == 1
    assert "no checkpoint here" in capsys.readouterr().err

    assert export_command(str(run_dir("PPO")), tmp_path / "policy.zip") == 1
    assert capsys.readouterr().err.startswith("kuberl export: ")
