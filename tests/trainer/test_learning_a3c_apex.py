"""A3C (A2C's loss on AsyncGradients) and Ape-X DQN (APEX on AsyncReplay, 2 replay shards)
learning CartPole-v1 with their default hyperparameters on a local Ray with 2 remote rollout
workers, and through a rollout worker killed mid-run. Ape-X's return is that of its least
exploring worker (as the progress rows report it); CartPole-v1 starts near 20."""

from pathlib import Path

import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.outcome import TrainResult
from kuberl_trainer.optimizers.async_gradients import AsyncGradientsOptimizer
from kuberl_trainer.optimizers.async_replay import AsyncReplayOptimizer
from testkit import killing_optimizer, progress_rows, trainer_config

# Each run starts a private Ray, as the driver does alone. With the Ray instance shared with the
# tests before it, Ape-X fell short of its budget in 2 full suites of 3 (at 138 through a killed
# worker, 369 without); with a private one it had not in the suites before.
pytestmark = pytest.mark.slow

# Env steps: A3C's defaults reached 425 within 47-56k on seeds 0-4 beside three busy processes,
# Ape-X's 400 within 85k on seeds 0-4.
BUDGET = {"A3C": 200_000, "APEX": 150_000}


def train(tmp_path: Path, algorithm: str, target: float = 400) -> TrainResult:
    stop = {"episodeReturnMean": target, "timesteps": BUDGET[algorithm]}
    config = trainer_config(algorithm=algorithm, stop=stop)
    rollout = RolloutConfig(replicas=2, envs_per_worker=8, cpus_per_worker=1.0)
    return Driver(config, rollout, tmp_path, "job").run()


def test_a3c_keeps_learning_through_a_killed_worker(tmp_path, monkeypatch):
    """What a killed worker must not stop: learning, from about 20 when it dies to 200 (A3C's 400
    is test_learning_scale's, with 8 workers). Asking for 400 here failed now and then under
    load, in A3C's own way, not the restart's: in a full suite, and in one of three such tests
    started at once, a run reached 290 and then wandered between 150 and 300 to the end of its
    200k budget; beside two or three other runs, 12 more reached 400 within 23-153k."""
    killing = killing_optimizer(AsyncGradientsOptimizer, after_steps=10_000)
    monkeypatch.setattr(algorithms, "optimizer_class", lambda config: killing)
    result = train(tmp_path, "A3C", target=200)
    assert result.stopped_by == "episodeReturnMean>=200", result
    rows = progress_rows(tmp_path)
    assert rows[-1]["worker_restarts"] >= 1
    # Two workers: each applies gradients computed on weights the other's have since changed.
    assert max(row["policy_lag"] for row in rows) > 0


def test_apex_cartpole_reaches_400(tmp_path):
    result = train(tmp_path, "APEX")
    assert result.stopped_by == "episodeReturnMean>=400", result
    rows = progress_rows(tmp_path)
    assert rows[-1]["replay_shards_lost"] == 0
    # An iteration's share counts the learn calls that ended within it: a short one (the last,
    # cut by the stop) may have none, so the learner's work shows over the run, not in one row.
    shares = [row["learner_utilisation"] for row in rows]
    assert all(0 <= share <= 1 for share in shares) and max(shares) > 0


def test_apex_keeps_learning_through_a_killed_worker(tmp_path, monkeypatch):
    """Its learner is the ceiling: under a full suite's load a run with a worker killed was at
    138 after the budget that takes an undisturbed run to 400, so this one asks for 200."""
    killing = killing_optimizer(AsyncReplayOptimizer, after_steps=10_000)
    monkeypatch.setattr(algorithms, "optimizer_class", lambda config: killing)
    # From about 20 when the worker dies to 200: learning went on.
    result = train(tmp_path, "APEX", target=200)
    assert result.stopped_by == "episodeReturnMean>=200", result
    assert progress_rows(tmp_path)[-1]["worker_restarts"] >= 1
