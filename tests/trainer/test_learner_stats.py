"""The policies' learner statistics: every policy names the keys its learn step returns
(STAT_KEYS; a replay policy also those of its exploration rate, EXPLORATION_KEYS), each one a
key of the progress contract (progress_row.POLICY_STATS), and each one is either a Prometheus
gauge (LEARNER_GAUGES) or left to the progress row on purpose (UNGAUGED_POLICY_STATS), so that
no statistic goes unexported by oversight. Each policy learns once on a small batch."""

import math

import numpy as np
import pytest
from test_metrics import LABELS, row

from kuberl_contract.config import ALGORITHMS, OptimizerName
from kuberl_contract.progress_row import GRAD_NORM, POLICY_STATS, RowGroup, row_group
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.metrics import LEARNER_GAUGES, UNGAUGED_POLICY_STATS, TrainerMetrics
from kuberl_trainer.policies.es import ESPolicy
from kuberl_trainer.policies.interface import Policy
from kuberl_trainer.policies.replay import ReplayPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

ENVS = {"SAC": "Pendulum-v1"}  # the others learn CartPole
# Small batches and few steps; none of these changes which statistics a learn step returns.
FEW_STEPS = {"rollout_length": 8}
SMALL = {
    "PPO": {**FEW_STEPS, "num_epochs": 1},
    "APPO": {**FEW_STEPS, "num_epochs": 1},
    "ES": {"noise_size": 1_000},
}


def config_of(algorithm: str, **hyperparameters):
    return trainer_config(
        algorithm=algorithm,
        env=ENVS.get(algorithm, "CartPole-v1"),
        hyperparameters=SMALL.get(algorithm, FEW_STEPS) | hyperparameters,
    )


def declared(cls: type[Policy]) -> set[str]:
    return {*cls.STAT_KEYS, *getattr(cls, "EXPLORATION_KEYS", ())}


POLICY_CLASSES = {policy_class(config_of(algorithm)) for algorithm in ALGORITHMS}


@pytest.mark.parametrize(
    ("algorithm", "hyperparameters"),
    [
        *(pytest.param(algorithm, {}, id=algorithm) for algorithm in ALGORITHMS),
        pytest.param("PPO", {"max_grad_norm": None}, id="PPO-unclipped"),  # no gradient norm
        pytest.param("SAC", {"max_grad_norm": 1.0}, id="SAC-clipped"),  # a gradient norm
    ],
)
def test_a_policy_declares_exactly_the_statistics_its_learn_step_returns(
    algorithm, hyperparameters
):
    config = config_of(algorithm, **hyperparameters)
    worker = RolloutWorker(policy_class(config), config, num_envs=2, seed=0)
    policy = worker.policy
    expected = set(policy.STAT_KEYS)
    if getattr(config.hyperparameters, "max_grad_norm", None) is None:
        expected.discard(GRAD_NORM)
    if isinstance(policy, ESPolicy):
        gradient = np.full(policy.num_params, 0.01, np.float32)
        assert set(policy.apply_flat_gradient(gradient)) == expected
        return
    batch = worker.sample()
    if isinstance(policy, ReplayPolicy):
        assert set(policy.exploration_stats()) == set(policy.EXPLORATION_KEYS)
        stats, _ = policy.learn_on_replay_batch(batch.columns)
    else:
        stats = policy.learn_on_batch(batch)
    assert set(stats) == expected
    if OptimizerName.ASYNC_GRADIENTS in ALGORITHMS[algorithm].optimizers:
        _, gradient_stats = policy.compute_gradients(batch)
        assert set(gradient_stats) == expected


def test_every_policy_statistic_is_gauged_or_left_to_the_progress_row_on_purpose():
    statistics = set(POLICY_STATS)
    assert set().union(*map(declared, POLICY_CLASSES)) == statistics  # no key nobody reports
    assert {row_group(key) for key in statistics} == {RowGroup.LOSSES}
    gauged = statistics & LEARNER_GAUGES.keys()
    assert not gauged & UNGAUGED_POLICY_STATS
    assert gauged | UNGAUGED_POLICY_STATS == statistics
    # LEARNER_GAUGES' other keys are the asynchronous optimizers' learner thread's.
    assert {row_group(key) for key in LEARNER_GAUGES.keys() - statistics} == {RowGroup.LEARNER}


def test_a_gauged_statistic_in_a_row_reaches_its_gauge():
    metrics = TrainerMetrics(**LABELS)
    gauged = sorted(set(POLICY_STATS) & LEARNER_GAUGES.keys())
    for stat in gauged:
        assert math.isnan(metrics.registry.get_sample_value(LEARNER_GAUGES[stat][0], LABELS))
    metrics.record(row(1, **{stat: float(i) for i, stat in enumerate(gauged)}), {}, 0)
    for i, stat in enumerate(gauged):
        assert metrics.registry.get_sample_value(LEARNER_GAUGES[stat][0], LABELS) == i, stat
