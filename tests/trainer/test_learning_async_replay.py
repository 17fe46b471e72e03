"""Ape-X DQN (APEX on AsyncReplay) learning CartPole-v1 with its default hyperparameters on a
local Ray with 2 remote rollout workers and 2 replay shards, also through a rollout worker killed
mid-run. The return is that of the least exploring worker (as the progress rows report it);
CartPole-v1 starts near 20."""

from pathlib import Path

import pytest

from kuberl_trainer import algorithms
from kuberl_trainer.config import RolloutConfig
from kuberl_trainer.driver import Driver, TrainResult
from kuberl_trainer.optimizers.async_replay import AsyncReplayOptimizer
from testkit import killing_optimizer, progress_rows, trainer_config

pytestmark = pytest.mark.slow

BUDGET = 150_000  # env steps; the defaults reached 400 within 85k on seeds 0-4


def train(tmp_path: Path, **fields) -> TrainResult:
    config = trainer_config(
        algorithm="APEX", stop={"episodeReturnMean": 400, "timesteps": BUDGET}, **fields
    )
    rollout = RolloutConfig(replicas=2, envs_per_worker=8, cpus_per_worker=1.0)
    return Driver(config, rollout, tmp_path, "job").run()


def test_apex_cartpole_reaches_400(tmp_path):
    result = train(tmp_path)
    assert result.stopped_by == "episodeReturnMean>=400", result
    last = progress_rows(tmp_path)[-1]
    assert last["replay_shards_lost"] == 0
    assert 0 < last["learner_utilisation"] <= 1


KillingOptimizer = killing_optimizer(AsyncReplayOptimizer, after_steps=10_000)


def test_apex_keeps_learning_through_a_killed_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(algorithms, "optimizer_class", lambda config: KillingOptimizer)
    result = train(tmp_path)
    assert result.stopped_by == "episodeReturnMean>=400", result
    assert progress_rows(tmp_path)[-1]["worker_restarts"] >= 1
