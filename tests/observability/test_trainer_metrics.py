"""The driver's gauges say "nothing yet" (NaN, which dashboards draw as a gap) rather than 0 for
what has not happened: no episode finished, no evaluation run, a statistic the algorithm lacks."""

from __future__ import annotations

import math

from kuberl_trainer.job.metrics import (
    LEARNER_GAUGES,
    METRIC_RETURN_TARGET,
    TrainerMetrics,
    return_target,
)


def value(metrics: TrainerMetrics, name: str) -> float | None:
    labels = {"namespace": "team", "rljob": "cartpole", "algorithm": "PPO"}
    return metrics.registry.get_sample_value(name, labels)


def test_gauges_are_nan_until_reported():
    metrics = TrainerMetrics("team", "cartpole", "PPO")
    names = ["kuberl_episode_return_mean", "kuberl_evaluation_return_mean"]
    names += [name for name, _ in LEARNER_GAUGES.values()]
    for name in names:
        assert math.isnan(value(metrics, name)), name

    row = {
        "iteration": 1,
        "timesteps_total": 256,
        "timesteps_this_iter": 256,
        "timesteps_trained_this_iter": 256,
        "episodes_this_iter": 3,
        "samples_per_s": 1000.0,
        "episode_return_mean": 21.0,
        "episode_len_mean": 21.0,
        "evaluation_return_mean": None,
        "policy_loss": -0.01,
        "entropy": 0.69,
    }
    metrics.record(row, {"learn": 0.5}, 0)
    assert value(metrics, "kuberl_episode_return_mean") == 21.0
    assert value(metrics, "kuberl_policy_loss") == -0.01
    assert math.isnan(value(metrics, "kuberl_td_loss"))  # PPO has none
    assert math.isnan(value(metrics, "kuberl_evaluation_return_mean"))
    assert value(metrics, "kuberl_learner_seconds_total") == 0.5


def test_the_return_target_is_the_stop_return_else_the_envs_solved_threshold():
    assert return_target(200.0, "CartPole-v1") == 200.0
    assert return_target(None, "CartPole-v1") == 475.0  # gymnasium's reward_threshold
    assert return_target(None, "Pendulum-v1") is None  # registered without one
    assert return_target(None, "no_such_module:Env") is None  # never imported
    assert value(TrainerMetrics("team", "cartpole", "PPO", 475.0), METRIC_RETURN_TARGET) == 475.0
    assert math.isnan(value(TrainerMetrics("team", "cartpole", "PPO"), METRIC_RETURN_TARGET))
