"""Using a trained policy: `kuberl evaluate` as a user runs it (a real process on a real run
directory) and the Python API (`load`, `predict`, `evaluate`) on the same solved CartPole run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from kuberl_contract.final_record import read_final_record
from kuberl_trainer.trained.inference import load
from testkit import fast_cartpole_job, rljob, run_kuberl


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


def as_exported(record: dict, run_dir: Path) -> dict:
    """A run's evaluation as its exported file gives it: the file names its checkpoint within
    the run directory, no path of the training machine."""
    checkpoint = Path(record["checkpoint"])
    assert checkpoint.is_relative_to(run_dir), record
    return record | {"checkpoint": str(checkpoint.relative_to(run_dir))}


def test_evaluate_an_exported_file_as_the_run_it_came_from(solved_run, tmp_path):
    exported = tmp_path / "policy.onnx"
    result = run_kuberl("export", solved_run, "-o", exported)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{exported}: PPO on CartPole-v1, greedy policy, ONNX opset")

    from_run = evaluate(solved_run, "--episodes", "10", "--seed", "7")
    same_episodes = as_exported(from_run, solved_run)
    assert evaluate(exported, "--episodes", "10", "--seed", "7") == same_episodes
    # The run exported the same policy itself when its stop condition was met.
    exported_at_end = solved_run / "checkpoints" / "policy.onnx"
    assert evaluate(exported_at_end, "--episodes", "10", "--seed", "7") == same_episodes
    stochastic = run_kuberl("evaluate", exported, "--stochastic")
    assert stochastic.returncode == 1
    assert "an exported policy is greedy only" in stochastic.stderr


def test_export_writes_policy_onnx_here_unless_told_otherwise(solved_run, tmp_path):
    command = [sys.executable, "-m", "kuberl_cli.main", "export", str(solved_run)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("policy.onnx: PPO on CartPole-v1, greedy policy, ONNX opset")
    assert evaluate(tmp_path / "policy.onnx", "--episodes", "3") == as_exported(
        evaluate(solved_run, "--episodes", "3"), solved_run
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


def test_a_pbt_run_gives_its_best_trials_policy(tmp_path):
    """A population's checkpoint holds every trial: load, evaluate and the export at the end of
    the run take the best one, ranked as PBT ranks them, with the hyperparameters it had."""
    job = rljob("pbt", rolloutWorkers={"replicas": 0, "envsPerWorker": 2})
    job["spec"]["trainer"] = {
        "algorithm": "PBT",
        "env": "CartPole-v1",
        "seed": 0,
        "stop": {"iterations": 2},
        "hyperparameters": {
            "population": 2,
            "perturbation_interval": 256,
            "cpus_per_trial": 0.5,
            "mutations": {"learning_rate": {"min": 1e-4, "max": 1e-2}},
            "trials": [{"learning_rate": 1e-3}, {"learning_rate": 5e-3}],
        },
        "trainer": {"algorithm": "PPO", "hyperparameters": {"rollout_length": 64}},
    }
    manifest = tmp_path / "pbt.yaml"
    manifest.write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    trained = run_kuberl("train", manifest, "--run-dir", run_dir, timeout=300)
    assert trained.returncode == 0, trained.stdout + trained.stderr

    policy = load(run_dir)
    state = policy.checkpoint.state
    returns = [row["episode_return_mean"] for row in state["population"]["rows"]]
    assert policy.trial == returns.index(max(returns))
    assert policy.config.algorithm == "PPO"
    overrides = state["population"]["overrides"][policy.trial]
    assert policy.config.hyperparameters.learning_rate == overrides["learning_rate"]
    assert policy.describe().startswith(f"PPO on CartPole-v1 (trial {policy.trial}, the best")
    from_run = evaluate(run_dir, "--episodes", "3")
    assert from_run["algorithm"] == "PPO" and len(from_run["returns"]) == 3
    # The run exported the best trial's greedy policy when its stop condition was met.
    exported = evaluate(run_dir / "checkpoints" / "policy.onnx", "--episodes", "3")
    assert exported["returns"] == from_run["returns"]
