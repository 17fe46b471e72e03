"""Population-based training's rules (exploit_pairs, explore), its config, and a population's
state handed from one population to another (the checkpoint's contents)."""

import math

import numpy as np
import pytest
from pydantic import ValidationError

from kuberl_contract.config import RolloutConfig
from kuberl_contract.hyperparameters import Mutation
from kuberl_trainer.job.pbt_rules import exploit_pairs, explore
from kuberl_trainer.job.population import Population
from kuberl_trainer.job.resource_wait import job_requests
from testkit import trainer_config


def rng(seed=0):
    return np.random.default_rng(seed)


# --- exploit --------------------------------------------------------------------------------------


def test_the_bottom_quantile_copies_the_top_quantile():
    scores = [10.0, 400.0, 50.0, 300.0, 20.0, 450.0, 30.0, 200.0]
    pairs = exploit_pairs(scores, 0.25, rng())
    assert sorted(trial for trial, _ in pairs) == [0, 4]  # the two lowest of 8
    assert {donor for _, donor in pairs} <= {1, 5}  # the two highest


def test_the_quantile_rounds_up_but_never_passes_half():
    assert len(exploit_pairs([1.0, 2.0, 3.0], 0.25, rng())) == 1  # ceil(0.75)
    assert len(exploit_pairs([1.0, 2.0, 3.0, 4.0], 0.5, rng())) == 2
    assert len(exploit_pairs([1.0, 2.0, 3.0], 0.5, rng())) == 1  # ceil(1.5) = 2 > 3 // 2


def test_trials_without_episodes_rank_lowest_and_ties_copy_nothing():
    assert exploit_pairs([-math.inf, 5.0, 7.0, 6.0], 0.25, rng())[0][0] == 0
    assert exploit_pairs([5.0, 5.0], 0.5, rng()) == []


# --- explore --------------------------------------------------------------------------------------


RANGE = {"learning_rate": Mutation(min=1e-4, max=1e-2, log=True)}


def test_perturbing_multiplies_by_a_factor_within_the_bounds():
    values = {
        round(explore({"learning_rate": 1e-3}, RANGE, [0.8, 1.2], 0.0, rng(s))["learning_rate"], 9)
        for s in range(20)
    }
    assert values == {8e-4, 1.2e-3}
    assert explore({"learning_rate": 9.5e-3}, RANGE, [1.2], 0.0, rng())["learning_rate"] == 1e-2


def test_resampling_draws_within_the_range_on_a_log_scale():
    values = [
        explore({"learning_rate": 1e-3}, RANGE, [0.8], 1.0, rng(s))["learning_rate"]
        for s in range(200)
    ]
    assert all(1e-4 <= v <= 1e-2 for v in values)
    below = sum(v < 1e-3 for v in values)  # log-uniform: half below the geometric middle
    assert 70 < below < 130


def test_integers_stay_integers_and_listed_values_move_to_a_neighbour():
    epochs = {"num_epochs": Mutation(min=1, max=20)}
    assert explore({"num_epochs": 10}, epochs, [1.2], 0.0, rng())["num_epochs"] == 12
    sizes = {"minibatch_size": Mutation(values=[32, 64, 128, 256])}
    moved = {
        explore({"minibatch_size": 64}, sizes, [0.8], 0.0, rng(s))["minibatch_size"]
        for s in range(20)
    }
    assert moved == {32, 128}
    assert (
        explore({"minibatch_size": 256}, sizes, [0.8], 1.0, rng())["minibatch_size"]
        in sizes["minibatch_size"].values
    )


# --- config ---------------------------------------------------------------------------------------


def pbt(**fields):
    document = {
        "algorithm": "PBT",
        "hyperparameters": {"mutations": {"learning_rate": {"min": 1e-4, "max": 1e-2}}},
        "trainer": {"algorithm": "PPO"},
    }
    return trainer_config(**(document | fields))


def test_the_inner_trainer_takes_the_populations_env_and_stop():
    config = pbt()
    assert config.trainer.env == config.env == "CartPole-v1"
    assert config.trainer.stop == config.stop
    assert config.optimizer_name == config.trainer.optimizer_name


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"trainer": {"algorithm": "PPO", "env": "Pendulum-v1"}},
            "trainer.env: every trial trains on",
        ),
        ({"trainer": {"algorithm": "PBT"}}, "does not match any of the expected tags"),
        ({"optimizer": "SyncSamples"}, "optimizer: PBT runs whole trainers"),
        (
            {"hyperparameters": {"mutations": {"lr": {"min": 1e-4, "max": 1e-2}}}},
            "hyperparameters.mutations.lr: PPO has no hyperparameter lr",
        ),
        (
            {"hyperparameters": {"mutations": {"learning_rate": {"min": 1e-4, "max": 2.0}}}},
            "hyperparameters.mutations.learning_rate: learning_rate: Input should be less than",
        ),
        (
            {"hyperparameters": {"mutations": {"learning_rate": {"min": 1e-2, "max": 1e-4}}}},
            "must be below max",
        ),
        (
            {"hyperparameters": {"mutations": {"activation": {"min": 0, "max": 1}}}},
            "activation is not a number",
        ),
        ({"hyperparameters": {"trials": [{"gamma": 2}]}}, "hyperparameters.trials[0]: gamma:"),
        (
            {"hyperparameters": {"population": 2, "trials": [{}, {}, {}]}},
            "trials: 3 entries for a population of 2",
        ),
    ],
)
def test_bad_population_specs_name_the_field(fields, message):
    with pytest.raises(ValidationError) as error:
        pbt(**fields)
    assert message in str(error.value)


def test_the_jobs_requests_are_a_trial_and_its_trainers_times_the_population():
    config = pbt(
        trainer={"algorithm": "APEX"}, hyperparameters={"population": 3, "cpus_per_trial": 0.5}
    )
    requests = job_requests(config, RolloutConfig(replicas=2, cpus_per_worker=1.0))
    assert [(r.what, r.count, r.amounts["CPU"]) for r in requests] == [
        ("trial", 3, 0.5),
        ("rollout worker", 6, 1.0),
        (
            "replay shard",
            3 * config.trainer.optimizer_config.replay_shards,
            config.trainer.optimizer_config.cpus_per_replay_shard,
        ),
    ]


# --- state ----------------------------------------------------------------------------------------


def test_a_populations_state_restores_every_trial_in_another(ray_local):
    config = pbt(
        stop={"iterations": 5},
        hyperparameters={
            "population": 2,
            "perturbation_interval": 500,
            "cpus_per_trial": 0.5,
            "trials": [{"learning_rate": 1e-3}],
        },
        trainer={"algorithm": "PPO", "hyperparameters": {"rollout_length": 64}},
    )
    rollout = RolloutConfig(envs_per_worker=2)
    first = Population(config, rollout, seed=1)
    second = Population(config, rollout, seed=2)
    try:
        first.build()
        first.step()
        second.build()
        state = first.state()
        second.load_state(state)
        restored = second.state()
    finally:
        first.stop()
        second.stop()
    assert restored["population"] == state["population"]
    for mine, theirs in zip(restored["trials"], state["trials"], strict=True):
        assert mine["driver"]["iteration"] == theirs["driver"]["iteration"] > 0
        for name, weights in theirs["policy"]["weights"].items():
            np.testing.assert_array_equal(mine["policy"]["weights"][name], weights)
    learning_rates = [t["policy"]["optimizer"]["param_groups"][0]["lr"] for t in restored["trials"]]
    assert learning_rates[0] == 1e-3  # the trial's own, not the one its state was saved with
