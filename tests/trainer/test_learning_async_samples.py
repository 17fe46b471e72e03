"""IMPALA and APPO learning on AsyncSamples, on a local Ray with 1 or 2 remote rollout workers
(1 CPU each: they fit 2 CPUs). CartPole-v1 starts near 20, Pendulum-v1 near -1200.

Both run with their defaults on CartPole. IMPALA's policy lag is bounded (one call in flight per
worker, two batches queued), so that a learner slowed by a busy machine does not learn on batches
old enough to collapse the policy. With one step size for both its networks, IMPALA's critic
followed the returns over thousands of learner steps: with 1 worker of 8 envs the env steps to
400 ranged from 114k to 578k, and in 2 full suites of 4 the run stayed between 140 and 250 from
140k env steps to the end of its budget, so the test had left it out. Since its value network
steps at 30 times the policy's rate (vf_learning_rate_ratio), 1 worker of 8 envs reached 475
within 127-216k env steps beside a CPU-bound process and 129-168k alone (seeds 0-7)."""

from pathlib import Path

import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.outcome import TrainResult
from kuberl_trainer.optimizers.async_samples import AsyncSamplesOptimizer
from testkit import killing_optimizer, progress_rows, trainer_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_local")]

CARTPOLE_BUDGET = 300_000  # env steps; APPO reached 475 within 17-38k with 2 workers (seeds 0-7)
IMPALA_CARTPOLE_BUDGET = 500_000  # over twice the longest run to 475 (see the docstring)
PENDULUM_BUDGET = 400_000  # env steps; -300 came within 78-129k (seeds 0-3), clip 0.2


IMPALA_FIELDS = {"optimizerConfig": {"requestsInFlightPerWorker": 1, "learnerQueueSize": 2}}


def train(tmp_path: Path, algorithm: str, replicas: int, **fields) -> TrainResult:
    if algorithm == "IMPALA":
        fields = IMPALA_FIELDS | fields
    config = trainer_config(algorithm=algorithm, **fields)
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=8, cpus_per_worker=1.0)
    return Driver(config, rollout, tmp_path, "job").run()


def assert_lags_reported(tmp_path: Path) -> None:
    lags = [row["policy_lag"] for row in progress_rows(tmp_path) if "policy_lag" in row]
    assert lags and min(lags) >= 0


@pytest.mark.parametrize("replicas", [1, 2])
def test_appo_cartpole_reaches_400(tmp_path, replicas):
    stop = {"episodeReturnMean": 400, "timesteps": CARTPOLE_BUDGET}
    result = train(tmp_path, "APPO", replicas, stop=stop)
    assert result.stopped_by == "episodeReturnMean>=400", result
    assert_lags_reported(tmp_path)


# With 2 workers: below, through a killed worker.
def test_impala_cartpole_reaches_400_with_one_worker(tmp_path):
    stop = {"episodeReturnMean": 400, "timesteps": IMPALA_CARTPOLE_BUDGET}
    result = train(tmp_path, "IMPALA", 1, stop=stop)
    assert result.stopped_by == "episodeReturnMean>=400", result
    assert_lags_reported(tmp_path)


def test_appo_pendulum_reaches_minus_300(tmp_path):
    """Continuous actions: a Gaussian policy's behaviour log-probabilities through V-trace.
    Pendulum's reward is dense and its horizon short: gamma 0.9, as rl-zoo's tuned Pendulum.
    The policy lag is bounded (one call in flight per worker, two batches queued for the
    learner): with the defaults, a learner slowed by a busy machine learned on batches so old
    that V-trace cut most of them, and -300 was not reached in 400k steps. The surrogate is
    clipped at 0.2, as rl-zoo's tuned Pendulum PPO: at the default 0.4 the return fell back from
    near -300 in 2 runs of 12 and took 461k and over 600k steps; at 0.2 it came within 159-175k
    over 6 runs, and 124-245k over 8 beside a CPU-bound process; with the value network at 30x
    (vf_learning_rate_ratio), within 78-129k (seeds 0-3)."""
    stop = {"episodeReturnMean": -300, "timesteps": PENDULUM_BUDGET}
    hyperparameters = {"gamma": 0.9, "clip_range": 0.2}
    lag = {"requestsInFlightPerWorker": 1, "learnerQueueSize": 2}
    result = train(
        tmp_path,
        "APPO",
        2,
        env="Pendulum-v1",
        stop=stop,
        hyperparameters=hyperparameters,
        optimizerConfig=lag,
    )
    assert result.stopped_by == "episodeReturnMean>=-300", result


KillingOptimizer = killing_optimizer(AsyncSamplesOptimizer, after_steps=20_000)


def test_impala_keeps_learning_through_a_killed_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(algorithms, "optimizer_class", lambda config: KillingOptimizer)
    stop = {"episodeReturnMean": 400, "timesteps": IMPALA_CARTPOLE_BUDGET}
    result = train(tmp_path, "IMPALA", 2, stop=stop)
    assert result.stopped_by == "episodeReturnMean>=400", result
    assert progress_rows(tmp_path)[-1]["worker_restarts"] >= 1
    assert_lags_reported(tmp_path)
