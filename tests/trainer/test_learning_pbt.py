"""Population-based training over PPO on CartPole-v1 as deploy/examples/cartpole-pbt.yaml runs it,
on a local Ray of 2 CPUs: 4 trials, each a whole PPO trainer in its own Ray actor (half a CPU each,
sampling in the actor), one of them started with a learning rate far too small to learn (1e-6).
CartPole-v1 starts near 20."""

from pathlib import Path

import pytest

from kuberl_contract.config import RolloutConfig, StopConditions
from kuberl_contract.progress_row import BEST_TRIAL, EPISODE_RETURN_MEAN, EXPLOITS, TRIALS
from kuberl_operator.validation import load_rljob
from kuberl_trainer.job.checkpoint import CheckpointRefused
from kuberl_trainer.job.driver import Driver
from testkit import progress_rows

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "cartpole-pbt.yaml"
BAD = 3  # the trial the example starts with a learning rate too small to learn (1e-6)


def example_config(**changes):
    """The example's spec.trainer, its hyperparameters changed by `changes`."""
    config = load_rljob(EXAMPLE).spec.trainer
    return config.model_copy(
        update={"hyperparameters": config.hyperparameters.model_copy(update=changes)}
    )


def test_the_example_reaches_475_and_replaces_the_bad_trial(ray_local, tmp_path):
    """A PPO trial reaches 475 within about 50k env steps; the example allows 600k for the four
    trials together."""
    config = example_config()
    result = Driver(config, RolloutConfig(envs_per_worker=8), tmp_path, "job").run()

    assert result.stopped_by == "episodeReturnMean>=475", result
    rows = progress_rows(tmp_path)
    replaced = [exploit for row in rows for exploit in row[EXPLOITS] if exploit["trial"] == BAD]
    assert replaced, "the trial with the bad learning rate was never replaced"
    assert replaced[0]["from"] != BAD
    for exploit in replaced:
        assert 1e-4 <= exploit["hyperparameters"]["learning_rate"] <= 1e-2
    assert rows[-1][TRIALS][BAD]["hyperparameters"] == replaced[-1]["hyperparameters"]
    best = rows[-1][TRIALS][rows[-1][BEST_TRIAL]]
    assert best[EPISODE_RETURN_MEAN] == rows[-1][EPISODE_RETURN_MEAN] >= 475


def test_a_resumed_population_goes_on_where_its_checkpoint_left_off(ray_local, tmp_path):
    rollout = RolloutConfig(envs_per_worker=8)

    def population_config(stop, perturbation_interval):
        config = example_config(perturbation_interval=perturbation_interval)
        return config.model_copy(update={"stop": StopConditions(**stop)})

    first = Driver(
        population_config({"iterations": 2}, perturbation_interval=2_000), rollout, tmp_path, "job"
    ).run()
    second = Driver(
        population_config({"iterations": 3}, perturbation_interval=2_000), rollout, tmp_path, "job"
    ).run()

    assert second.resumed_from == first.checkpoint
    rows = progress_rows(tmp_path)
    assert [row["iteration"] for row in rows] == [1, 2, 3]
    before, after = rows[1][TRIALS], rows[2][TRIALS]
    for old, new in zip(before, after, strict=True):
        assert new["timesteps_total"] > old["timesteps_total"]  # counted on, not from 0
        assert new["iteration"] > old["iteration"]
    replaced = {exploit["trial"] for exploit in rows[2][EXPLOITS]}
    for old, new in zip(before, after, strict=True):
        if old["trial"] not in replaced:
            assert new["hyperparameters"] == old["hyperparameters"]


def test_a_checkpoint_of_another_population_is_refused(ray_local, tmp_path):
    rollout = RolloutConfig(envs_per_worker=8)
    config = example_config(perturbation_interval=1_000)
    config = config.model_copy(update={"stop": StopConditions(iterations=1)})
    Driver(config, rollout, tmp_path, "job").run()

    bigger = config.model_copy(
        update={"hyperparameters": config.hyperparameters.model_copy(update={"population": 5})}
    )
    with pytest.raises(
        CheckpointRefused, match="was written for population=4, this job has population=5"
    ):
        Driver(bigger, rollout, tmp_path, "job").run()
    assert [row["iteration"] for row in progress_rows(tmp_path)] == [1]  # nothing lost
