"""A stop on evaluation return rests on a mean that holds on fresh episodes: a passing
evaluation is confirmed on evaluation.confirmEpisodes more, on seeds no evaluation used, their
mean less its standard error reaching the target."""

import json

import numpy as np
import pytest

from kuberl_contract.config import EvaluationConfig, RolloutConfig
from kuberl_contract.config.evaluation import noisy_evaluation_stop
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.evaluation import EVALUATION_SEED_STRIDE, holds
from testkit import trainer_config


def lucky_job(confirm_episodes, lucky=10, target=1.0):
    """Evaluations of 10 episodes that return 1 each; of the confirmation's episodes, the first
    `lucky` - 10 return 1 and the rest 0."""
    return trainer_config(
        algorithm="PG",
        env="custom_envs:LuckyFirstSeeds",
        envConfig={"lucky": lucky, "stride": EVALUATION_SEED_STRIDE},
        hyperparameters={"rollout_length": 8},
        evaluation={"everyIterations": 1, "episodes": 10, "confirmEpisodes": confirm_episodes},
        stop={"evaluationReturnMean": target, "iterations": 3},
    )


def evaluation_returns(run_dir, key="evaluation_return_mean"):
    rows = (run_dir / "progress.jsonl").read_text().splitlines()
    return [json.loads(row)[key] for row in rows]


def test_a_lucky_evaluation_confirmed_on_fresh_episodes_does_not_stop_training(tmp_path):
    outcome = Driver(lucky_job(100), RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    assert outcome.stopped_by == "iterations>=3"
    assert evaluation_returns(tmp_path) == [0.0, 0.0, 0.0]  # the confirmations' means
    assert evaluation_returns(tmp_path, "evaluation_confirmed") == [False] * 3


def test_a_confirmation_at_the_target_within_its_standard_error_does_not_stop_training(tmp_path):
    """96 of 100 fresh episodes return 1: a mean of 0.96 reaches the target 0.95, but not by its
    standard error (0.02), so the policy may well score below it on other episodes."""
    job = lucky_job(100, lucky=10 + 96, target=0.95)
    outcome = Driver(job, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    assert outcome.stopped_by == "iterations>=3"
    assert evaluation_returns(tmp_path) == [0.96] * 3
    assert evaluation_returns(tmp_path, "evaluation_confirmed") == [False] * 3


def test_a_confirmation_that_holds_stops_training(tmp_path):
    job = lucky_job(100, lucky=1000)  # every episode returns 1
    outcome = Driver(job, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    assert outcome.stopped_by == "evaluationReturnMean>=1"
    assert evaluation_returns(tmp_path, "evaluation_confirmed") == [True]


def test_a_mean_holds_when_less_its_standard_error_it_reaches_the_target():
    returns = np.array([430.0, 530.0] * 50)  # mean 480, standard error 5.03
    assert holds(returns, 474.9) and not holds(returns, 475.0)
    assert holds(np.full(100, 500.0), 500.0)  # no spread: the mean itself


def test_without_confirmation_a_lucky_evaluation_stops_training(tmp_path):
    outcome = Driver(lucky_job(0), RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    assert outcome.stopped_by == "evaluationReturnMean>=1"
    assert evaluation_returns(tmp_path) == [1.0]


@pytest.mark.parametrize(
    ("target", "episodes", "confirm", "noisy"),
    [
        (475, 10, 100, False),  # the default: confirmed on 100
        (475, 10, 0, True),
        (475, 10, 20, True),
        (475, 50, 0, False),  # many episodes, each evaluation
        (None, 5, 0, False),  # no stop on evaluation return
    ],
)
def test_a_stop_on_few_evaluation_episodes_is_called_noisy(target, episodes, confirm, noisy):
    evaluation = EvaluationConfig(everyIterations=1, episodes=episodes, confirmEpisodes=confirm)
    warning = noisy_evaluation_stop(target, evaluation)

    assert (warning is not None) == noisy
    if noisy:
        assert "evaluation.confirmEpisodes" in warning and f"{max(episodes, confirm)} " in warning
