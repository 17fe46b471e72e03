"""Using a trained policy: `kuberl evaluate` as a user runs it (a real process on a real run
directory) and the Python API (`load`, `predict`, `evaluate`) on the same solved CartPole run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kuberl_contract.final_record import read_final_record
from kuberl_trainer.trained.inference import load
from kuberl_trainer.trained.loaded import LoadError
from testkit import fast_cartpole_job, run_kuberl


def solved_manifest(directory: Path, **trainer) -> Path:
    """cartpole-ppo-fast.yaml trained until 20 greedy episodes average 499 (about 15k steps)."""
    settings = {
        "evaluation": {"everyIterations": 20, "episodes": 20},
        "stop": {"evaluationReturnMean": 499, "timesteps": 150_000},
    }
    return fast_cartpole_job(directory / "job.yaml", **(settings | trainer))


@pytest.fixture(scope="module")
def solved_run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("solved")
    run_dir = directory / "run"
    result = run_kuberl("train", solved_manifest(directory), "--run-dir", run_dir, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    policy = str(run_dir.absolute() / "checkpoints" / "policy.onnx")
    assert f"  policy             {policy}" in result.stdout
    assert read_final_record(result.stdout).policy == policy
    return run_dir


def evaluate(*args) -> dict:
    result = run_kuberl("evaluate", *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_evaluate_a_solved_run_from_its_directory_and_its_checkpoint_alike(solved_run):
    from_run = evaluate(solved_run, "--episodes", "10", "--seed", "7")
    checkpoint = Path(from_run["checkpoint"])
    from_checkpoint = evaluate(checkpoint, "--episodes", "10", "--seed", "7")
    from_location = evaluate(checkpoint.parent, "--episodes", "10", "--seed", "7")

    assert from_run["return_mean"] >= 475, from_run
    assert len(from_run["returns"]) == len(from_run["lengths"]) == 10
    assert from_run["deterministic"] is True
    assert (from_run["algorithm"], from_run["env"]) == ("PPO", "CartPole-v1")
    assert checkpoint.parent == solved_run / "checkpoints"
    assert from_checkpoint == from_run == from_location


def test_evaluate_an_exported_file_as_the_run_it_came_from(solved_run, tmp_path):
    exported = tmp_path / "policy.onnx"
    result = run_kuberl("export", solved_run, "-o", exported)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{exported}: PPO on CartPole-v1, greedy policy, ONNX opset")

    from_run = evaluate(solved_run, "--episodes", "10", "--seed", "7")
    assert evaluate(exported, "--episodes", "10", "--seed", "7") == from_run
    # The run exported the same policy itself when its stop condition was met.
    exported_at_end = solved_run / "checkpoints" / "policy.onnx"
    assert evaluate(exported_at_end, "--episodes", "10", "--seed", "7") == from_run
    stochastic = run_kuberl("evaluate", exported, "--stochastic")
    assert stochastic.returncode == 1
    assert "an exported policy is greedy only" in stochastic.stderr


def test_export_writes_policy_onnx_here_unless_told_otherwise(solved_run, tmp_path):
    command = [sys.executable, "-m", "kuberl_cli.main", "export", str(solved_run)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("policy.onnx: PPO on CartPole-v1, greedy policy, ONNX opset")
    assert evaluate(tmp_path / "policy.onnx", "--episodes", "3") == evaluate(
        solved_run, "--episodes", "3"
    )


def test_evaluate_prints_the_summary_and_every_episode(solved_run):
    result = run_kuberl("evaluate", solved_run, "--episodes", "3", "--stochastic")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("PPO on CartPole-v1, iteration ")
    assert "over 3 stochastic episodes (seed 0)" in lines[1]
    assert [line.split()[:4] for line in lines[2:]] == [
        ["episode", str(k), "seed", str(k)] for k in range(3)
    ]


def test_evaluate_says_what_is_wrong_with_the_path(solved_run, tmp_path):
    missing = run_kuberl("evaluate", tmp_path / "nothing")
    assert missing.returncode == 2
    assert "no such file or directory" in missing.stderr

    empty = run_kuberl("evaluate", tmp_path)
    assert empty.returncode == 1
    assert "no checkpoint here" in empty.stderr

    checkpoint = Path(evaluate(solved_run, "--episodes", "1")["checkpoint"])
    tampered = tmp_path / "checkpoints" / checkpoint.name
    tampered.mkdir(parents=True)
    for file in checkpoint.iterdir():
        (tampered / file.name).write_bytes(file.read_bytes())
    state = tampered / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed: its sha256 no longer matches the manifest
    state.write_bytes(bytes(data))
    damaged = run_kuberl("evaluate", tampered)
    assert damaged.returncode == 1
    assert f"checkpoint {tampered} cannot be used" in damaged.stderr


def test_predict_takes_one_observation_or_a_batch(solved_run):
    policy = load(solved_run)
    try:
        obs = np.random.default_rng(0).normal(0, 0.05, size=(64, 4)).astype(np.float32)
        actions, state = policy.predict(obs)
        assert state is None
        assert actions.shape == (64,) and set(actions) <= {0, 1}
        single, _ = policy.predict(obs[5])
        assert np.ndim(single) == 0 and single == actions[5]
        # Greedy actions are the policy's own: the same for the same observation, every time.
        np.testing.assert_array_equal(policy.predict(obs)[0], actions)
        with pytest.raises(ValueError, match=r"has shape \(4,\).*got \(3, 5\)"):
            policy.predict(np.zeros((3, 5)))
        assert policy.evaluate(episodes=2, seed=3).as_dict() == (
            policy.evaluate(episodes=2, seed=3).as_dict()
        )
    finally:
        policy.close()


def test_a_normalized_policy_acts_with_its_frozen_statistics(tmp_path):
    """Observation normalization's statistics come from the checkpoint and never move."""
    manifest = solved_manifest(
        tmp_path,
        normalization={"observations": True},
        stop={"timesteps": 2_048},
    )
    run_dir = tmp_path / "run"
    result = run_kuberl("train", manifest, "--run-dir", run_dir, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]

    policy = load(run_dir)
    try:
        saved = policy.checkpoint.state["normalization"]["obs"]
        stats = policy.normalizer.stats.obs
        assert stats.count == saved["count"] > 0
        mean = stats.mean.copy()
        policy.evaluate(episodes=3)
        policy.predict(np.ones((8, 4), dtype=np.float32))
        np.testing.assert_array_equal(policy.normalizer.stats.obs.mean, mean)
        assert policy.normalizer.stats.obs.count == saved["count"]
    finally:
        policy.close()


def test_a_pbt_checkpoint_is_refused_with_the_reason(tmp_path):
    from kuberl_trainer.job.checkpoint import Checkpoint
    from kuberl_trainer.trained.inference import TrainedPolicy

    with pytest.raises(LoadError, match="a PBT checkpoint holds a population"):
        TrainedPolicy(Checkpoint("/x/checkpoint-00000001", {"algorithm": "PBT"}, {}))
