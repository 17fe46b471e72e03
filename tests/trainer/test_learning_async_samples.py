"""IMPALA and APPO learning on AsyncSamples, on a local Ray with 1 or 2 remote rollout workers
(1 CPU each: they fit 2 CPUs). CartPole-v1 starts near 20, Pendulum-v1 near -1200.

APPO runs with its defaults on CartPole. IMPALA's default learning rate, 5e-4, is the one that never
collapsed the policy with any number of envs per worker tried, but with 8 envs it is slow and its
tail long: over 12 runs with 1 worker the env steps to 400 ranged from 114k to 578k. IMPALA here
takes 1e-3, the rate its docstring names for 8 envs per worker, with the policy lag bounded (one
call in flight per worker, two batches queued), so that a learner slowed by a busy machine does not
learn on batches old enough to collapse the policy: 400 came within 79-189k env steps over 9 runs
with 1 and 2 workers beside a CPU-bound process, and with IMPALA's entropy bonus of 1e-3 within
76-157k over 12 (1 and 2 workers, seeds 0-5, two runs at a time; 67-226k without). Its tail is
longer than those runs showed. Alone or beside a busy process (1 worker, seeds 0-4), 50 runs of
54 reached 400 within 66-192k env steps; the other 4 oscillated between 130 and 350 on their way,
two of them reaching 400 at 326k and 452k. In full suites it stalled more often: in 2 of 4, the
1-worker run stayed between 140 and 250 from 140k env steps to the end of its budget (300k, then
600k). One difference is the suite's Ray, shared with every test before it: Ape-X's tests
stalled the same way on it (see test_learning_a3c_apex.py). Until the cause is known, IMPALA
learns here with 2 workers through a killed one (with 600k env steps), and with 2 and 12 workers
of 64 envs in test_learning_scale.py."""

from pathlib import Path

import pytest

from kuberl_trainer import algorithms
from kuberl_trainer.config import RolloutConfig
from kuberl_trainer.driver import Driver, TrainResult
from kuberl_trainer.optimizers.async_samples import AsyncSamplesOptimizer
from testkit import killing_optimizer, progress_rows, trainer_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_local")]

CARTPOLE_BUDGET = 300_000  # env steps; APPO reached 400 within 70-100k on the seeds tried
IMPALA_CARTPOLE_BUDGET = 600_000  # see the docstring: its tail is longer
PENDULUM_BUDGET = 400_000  # env steps; -300 came within 124-245k over 14 runs, clip 0.2


IMPALA_FIELDS = {
    "hyperparameters": {"learning_rate": 1e-3},
    "optimizerConfig": {"requestsInFlightPerWorker": 1, "learnerQueueSize": 2},
}


def train(tmp_path: Path, algorithm: str, replicas: int, **fields) -> TrainResult:
    if algorithm == "IMPALA":
        fields = IMPALA_FIELDS | fields
    config = trainer_config(algorithm=algorithm, **fields)
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=8, cpus_per_worker=1.0)
    return Driver(config, rollout, tmp_path, "job").run()


def assert_lags_reported(tmp_path: Path) -> None:
    lags = [row["policy_lag"] for row in progress_rows(tmp_path) if "policy_lag" in row]
    assert lags and min(lags) >= 0


# IMPALA with 2 workers: below, through a killed worker.
@pytest.mark.parametrize("replicas", [1, 2])
def test_appo_cartpole_reaches_400(tmp_path, replicas):
    stop = {"episodeReturnMean": 400, "timesteps": CARTPOLE_BUDGET}
    result = train(tmp_path, "APPO", replicas, stop=stop)
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
    over 6 runs, and 124-245k over 8 beside a CPU-bound process."""
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
