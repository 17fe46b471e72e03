"""The trainer's metrics of stragglers and of the asynchronous optimizers' learner thread, from
the progress rows the driver writes."""

import json
import math

from kuberl_contract.config import RolloutConfig
from kuberl_contract.progress_row import (
    LEARNER_QUEUE_DEPTH,
    LEARNER_UTILISATION,
    POLICY_LAG,
    PROGRESS_FILE,
    STRAGGLERS_DROPPED,
)
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.metrics import TrainerMetrics
from testkit import trainer_config

LABELS = {"namespace": "team", "rljob": "cartpole", "algorithm": "IMPALA"}


def row(iteration: int, **values) -> dict:
    return {
        "iteration": iteration,
        "timesteps_total": 100 * iteration,
        "timesteps_this_iter": 100,
        "timesteps_trained_this_iter": 100,
        "episodes_this_iter": 1,
        "samples_per_s": 1000.0,
        **values,
    }


def test_new_stragglers_are_counted_and_learner_statistics_are_gauged():
    metrics = TrainerMetrics(**LABELS)

    def value(name: str) -> float:
        return metrics.registry.get_sample_value(name, LABELS)

    for name in ("kuberl_policy_lag", "kuberl_learner_queue_depth", "kuberl_learner_utilisation"):
        assert math.isnan(value(name)), name  # a synchronous optimizer has no learner thread

    # The row holds this run's total; the counter goes up by what is new in each iteration.
    for iteration, total in enumerate([0, 2, 2, 5], start=1):
        metrics.record(row(iteration, **{STRAGGLERS_DROPPED: total}), {}, 0)
        assert value("kuberl_stragglers_dropped_total") == total

    learner = {POLICY_LAG: 1.5, LEARNER_QUEUE_DEPTH: 3, LEARNER_UTILISATION: 0.75}
    metrics.record(row(5, **{STRAGGLERS_DROPPED: 5}, **learner), {}, 0)
    assert value("kuberl_policy_lag") == 1.5
    assert value("kuberl_learner_queue_depth") == 3
    assert value("kuberl_learner_utilisation") == 0.75
    assert value("kuberl_stragglers_dropped_total") == 5


def test_a_populations_row_gauges_every_trial_and_counts_its_exploits():
    metrics = TrainerMetrics(**LABELS)

    def trial_value(name: str, trial: int) -> float | None:
        return metrics.registry.get_sample_value(name, LABELS | {"trial": str(trial)})

    trials = [
        {"trial": 0, "timesteps_total": 4000, "episode_return_mean": 180.0},
        {"trial": 1, "timesteps_total": 4100, "episode_return_mean": 25.0},
    ]
    exploits = [{"trial": 1, "from": 0, "hyperparameters": {"learning_rate": 1e-3}}]
    metrics.record(row(1, trials=trials, exploits=exploits), {}, 0)
    metrics.record(row(2, trials=trials, exploits=exploits), {}, 0)

    assert trial_value("kuberl_trial_episode_return_mean", 0) == 180.0
    assert trial_value("kuberl_trial_timesteps", 1) == 4100
    assert trial_value("kuberl_trial_exploits_total", 1) == 2
    assert trial_value("kuberl_trial_exploits_total", 0) is None  # never exploited anyone


def test_every_progress_row_says_how_many_stragglers_were_dropped(tmp_path):
    config = trainer_config(
        algorithm="PPO", stop={"iterations": 2}, hyperparameters={"rollout_length": 16}
    )
    driver = Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "cartpole", "team")
    driver.run()

    lines = (tmp_path / PROGRESS_FILE).read_text().splitlines()
    assert [json.loads(line)[STRAGGLERS_DROPPED] for line in lines] == [0, 0]
    labels = LABELS | {"algorithm": "PPO"}
    assert driver.metrics.registry.get_sample_value("kuberl_stragglers_dropped_total", labels) == 0
