"""Learning on real gymnasium envs, with return thresholds. CartPole-v1 starts near 20."""

from pathlib import Path

import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_operator.validation import load_rljob
from kuberl_trainer.job.driver import Driver
from testkit import progress_rows, trainer_config

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "example, stop, budget",
    [
        ("cartpole-ppo.yaml", "episodeReturnMean", 100_000),
        # the faster example: seeds 0-9 reached a greedy 475 within 5-46k steps (seed 0: 15k)
        ("cartpole-ppo-fast.yaml", "evaluationReturnMean", 50_000),
    ],
)
def test_the_ppo_examples_solve_cartpole(tmp_path, example, stop, budget):
    job = load_rljob(EXAMPLES / example)
    result = Driver(job.spec.trainer, job.spec.rollout_workers, tmp_path, job.name).run()
    assert result.stopped_by == f"{stop}>=475", result
    reached = {
        "episodeReturnMean": result.episode_return_mean,
        "evaluationReturnMean": result.evaluation_return_mean,
    }[stop]
    assert reached >= 475
    assert result.timesteps <= budget


def test_ppo_solves_cartpole_with_64_natively_vectorized_envs(tmp_path):
    """64 CartPole copies stepped as one numpy vector env, 16 steps each per iteration. Seeds 0-5
    reached 475 at 64k-93k env steps (seed 0: 65k), within the 150k budget."""
    config = trainer_config(
        algorithm="PPO",
        stop={"episodeReturnMean": 475, "timesteps": 150_000},
        hyperparameters={
            "rollout_length": 16,
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "num_epochs": 10,
            "minibatch_size": 256,
            "learning_rate": 0.001,
            "schedule": "linear",
        },
    )
    result = Driver(config, RolloutConfig(envs_per_worker=64), tmp_path, "job").run()
    assert result.stopped_by == "episodeReturnMean>=475", result


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_example_reaches_greedy_475_within_100k_steps(tmp_path, seed):
    job = load_rljob(EXAMPLES / "cartpole-dqn.yaml")
    config = job.spec.trainer.model_copy(update={"seed": seed})
    result = Driver(config, job.spec.rollout_workers, tmp_path, job.name).run()
    assert result.stopped_by == "evaluationReturnMean>=475", result
    assert result.timesteps <= 100_000


def test_sac_example_reaches_minus_200_on_pendulum_within_20k_steps(tmp_path):
    """Pendulum-v1 starts near -1200; the issue's bar is -300. The example's seed 0 reaches -300
    and -200 at 8,000 env steps (its 8 envs end their 200-step episodes together, every 1,600
    env steps); over seeds 0-7, -300 came at 8,000-9,600 and -200 at 8,000-12,800."""
    job = load_rljob(EXAMPLES / "pendulum-sac.yaml")
    result = Driver(job.spec.trainer, job.spec.rollout_workers, tmp_path, job.name).run()
    assert result.stopped_by == "episodeReturnMean>=-200", result
    assert result.timesteps <= 20_000


@pytest.mark.parametrize(
    "algorithm, hyperparameters",
    [("PG", {}), ("A2C", {})],  # the algorithms' defaults
)
def test_pg_and_a2c_clearly_improve(tmp_path, algorithm, hyperparameters):
    """Bar: the mean of 20 consecutive episodes reaches 200 (10x a random policy) within 100k
    steps, and the last one beats the first by 5x."""
    config = trainer_config(
        algorithm=algorithm, hyperparameters=hyperparameters, stop={"timesteps": 100_000}
    )
    Driver(config, RolloutConfig(envs_per_worker=8), tmp_path, "job").run()
    returns = [
        r["episode_return_mean"] for r in progress_rows(tmp_path) if r["episode_return_mean"]
    ]
    assert max(returns) >= 200, f"best {max(returns):.1f}"
    assert returns[-1] >= 5 * returns[0], f"first {returns[0]:.1f}, last {returns[-1]:.1f}"


def test_ppo_learns_pendulum_with_continuous_actions(tmp_path):
    """Gaussian policy on a Box action space: Pendulum-v1 starts near -1200."""
    config = trainer_config(
        algorithm="PPO",
        env="Pendulum-v1",
        stop={"episodeReturnMean": -250, "timesteps": 200_000},
        hyperparameters={
            "rollout_length": 256,
            "gamma": 0.9,
            "gae_lambda": 0.95,
            "num_epochs": 10,
            "minibatch_size": 64,
            "learning_rate": 0.001,
        },
    )
    result = Driver(config, RolloutConfig(envs_per_worker=8), tmp_path, "job").run()
    assert result.stopped_by == "episodeReturnMean>=-250", result
