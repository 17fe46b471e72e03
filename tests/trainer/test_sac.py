"""SAC: the squashed Gaussian's log-density against a numerical reference, actions rescaled to
the Box, the soft TD target and the losses' gradients checked by hand, alpha's direction, polyak
targets, state round trips, and SyncReplay taking a gradient step per env step."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.envs.spaces import space_info
from kuberl_trainer.job.checkpoint import CheckpointStore
from kuberl_trainer.job.checkpoint_format import load_state
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.optimizers.sync_replay import SyncReplayOptimizer
from kuberl_trainer.policies.sac import SACPolicy, squashed_gaussian_logp
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import trainer_config

PENDULUM_SPACES = space_info(gym.spaces.Box(-8, 8, (3,)), gym.spaces.Box(-2, 2, (1,)))


def sac_config(**hyperparameters):
    """A Pendulum SAC job built from manifest keys, with small networks (fast, and all these
    tests need)."""
    hyperparameters = {"hidden_sizes": [32, 32], **hyperparameters}
    return trainer_config(algorithm="SAC", env="Pendulum-v1", hyperparameters=hyperparameters)


def replay_batch(size: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(size, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (size, 1)).astype(np.float32),
        "rewards": rng.normal(size=size).astype(np.float32),
        "next_obs": rng.normal(size=(size, 3)).astype(np.float32),
        "bootstrap_discounts": np.full(size, 0.99, np.float32),
    }


def parameters(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


# -- the squashed Gaussian ----------------------------------------------------------------------


def test_squashed_log_density_matches_the_change_of_variables_numerically():
    """log p(tanh(u)) = log N(u) - log |det d tanh(u)/du|, the Jacobian taken by autograd."""
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(6, 2, generator=generator, dtype=torch.float64)
    log_std = torch.randn(6, 2, generator=generator, dtype=torch.float64).clamp(-2, 1)
    pre_tanh = torch.tensor([[0.0, 0.5], [-1.0, 2.0], [3.0, -4.0], [6.0, -6.0], [0.1, 1.5]] * 2)
    pre_tanh = pre_tanh[:6].to(torch.float64)

    gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(pre_tanh).sum(-1)
    log_abs_det = torch.stack(
        [
            torch.linalg.slogdet(torch.autograd.functional.jacobian(torch.tanh, u))[1]
            for u in pre_tanh
        ]
    )

    torch.testing.assert_close(
        squashed_gaussian_logp(mean, log_std, pre_tanh), gaussian - log_abs_det
    )


def test_squashed_density_integrates_to_one_over_the_action_interval():
    actions = torch.linspace(-1, 1, 400_001, dtype=torch.float64)[1:-1]
    pre_tanh = torch.atanh(actions)[:, None]
    mean, log_std = torch.tensor([[0.3]]), torch.tensor([[-0.2]])

    density = squashed_gaussian_logp(mean.double(), log_std.double(), pre_tanh).exp()

    assert float(torch.trapezoid(density, actions)) == pytest.approx(1.0, abs=1e-3)


def test_squashed_log_density_stays_finite_where_tanh_rounds_to_one():
    pre_tanh = torch.tensor([[-30.0], [30.0]])
    logp = squashed_gaussian_logp(torch.zeros(2, 1), torch.zeros(2, 1), pre_tanh)
    assert torch.isfinite(logp).all()


# -- acting ------------------------------------------------------------------------------------


def test_actions_are_rescaled_into_the_box_and_greedy_ones_are_the_squashed_mean():
    spaces = space_info(
        gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(np.array([0, -2]), np.array([10, 2]))
    )
    policy = SACPolicy(spaces, sac_config(), seed=0)
    obs = np.random.default_rng(0).normal(size=(5000, 3)).astype(np.float32)

    env_actions, columns = policy.compute_actions(obs)
    squashed = columns["actions"]
    assert np.all(np.abs(squashed) <= 1)
    np.testing.assert_allclose(env_actions, [5, 0] + [5, 2] * squashed, rtol=1e-6, atol=1e-6)
    assert np.all((env_actions >= [0, -2]) & (env_actions <= [10, 2]))
    # An untrained actor explores broadly: std 1 before tanh covers most of both intervals.
    assert np.all(env_actions.min(axis=0) < [1, -1.6]) and np.all(env_actions.max(0) > [9, 1.6])

    greedy, greedy_columns = policy.compute_actions(obs, explore=False)
    with torch.no_grad():
        mean, _ = policy.model.actor(torch.from_numpy(obs))
    np.testing.assert_allclose(greedy_columns["actions"], torch.tanh(mean).numpy(), rtol=1e-6)
    np.testing.assert_allclose(greedy, [5, 0] + [5, 2] * np.tanh(mean.numpy()), rtol=1e-5)


def test_sac_rejects_discrete_actions_at_validation_and_in_the_policy():
    assert env_problem("CartPole-v1", {}, continuous_actions_only=True).message == (
        "action space Discrete(2) is discrete but the algorithm needs Box (continuous) actions; "
        "use DQN or PPO for Discrete actions"
    )
    assert env_problem("Pendulum-v1", {}, continuous_actions_only=True) is None
    cartpole = space_info(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    with pytest.raises(EnvError, match="SAC needs a Box"):
        SACPolicy(cartpole, sac_config(), seed=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tau", 1.5, "less than or equal to 1"),
        ("initial_alpha", 0.0, "greater than 0"),
        ("gradient_steps_per_env_step", 0, "greater than 0"),
        ("epsilon_final", 0.1, "Extra inputs are not permitted"),  # DQN's, not SAC's
    ],
)
def test_bad_hyperparameters_are_rejected_naming_the_field(field, value, message):
    with pytest.raises(ValidationError, match=message) as error:
        sac_config(**{field: value})
    assert field in str(error.value)


# -- learning ----------------------------------------------------------------------------------


class ConstantTwinQ(nn.Module):
    """Target critics whose two estimates ignore their inputs, to build a target by hand."""

    def __init__(self, q1: float, q2: float):
        super().__init__()
        self.q = torch.tensor([[q1, q2]])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.q.expand(len(obs), -1)


def test_soft_td_target_bootstraps_from_the_smaller_target_critic_minus_alpha_logp():
    policy = SACPolicy(PENDULUM_SPACES, sac_config(initial_alpha=0.5), seed=0)
    policy.target_model = ConstantTwinQ(3.0, 2.0)
    batch = {k: torch.from_numpy(v) for k, v in replay_batch(size=4).items()}
    batch["bootstrap_discounts"] = torch.tensor([0.9, 0.0, 0.5, 0.9])
    drawn = policy.generator.get_state()

    targets = policy.td_targets(batch)

    policy.generator.set_state(drawn)  # the same noise for the next action a' ~ pi(s')
    noise = torch.randn((4, 1), generator=policy.generator)
    with torch.no_grad():
        _, next_logp = policy.model.actor.sample(batch["next_obs"], noise)
    expected = batch["rewards"] + batch["bootstrap_discounts"] * (2.0 - 0.5 * next_logp)
    torch.testing.assert_close(targets, expected)


def test_the_critics_get_the_gradient_of_their_squared_td_errors_only():
    """The actor's loss goes through the critics too; it must not move them."""
    policy = SACPolicy(PENDULUM_SPACES, sac_config(), seed=0)
    batch = {k: torch.from_numpy(v) for k, v in replay_batch().items()}
    drawn = policy.generator.get_state()
    loss, _, _ = policy.td_loss(batch)
    policy.optimizer.zero_grad()
    loss.backward()
    critic_grads = [p.grad.clone() for p in policy.model.critics.parameters()]
    assert all(p.grad is not None for p in policy.model.actor.parameters())
    assert policy.model.log_alpha.grad is not None

    policy.generator.set_state(drawn)  # td_loss draws the target's noise first
    targets = policy.td_targets(batch)
    q_values = policy.model.critics(batch["obs"], batch["actions"])
    alone = 0.5 * (q_values - targets[:, None]).pow(2).sum(-1).mean()
    expected = torch.autograd.grad(alone, list(policy.model.critics.parameters()))

    for grad, want in zip(critic_grads, expected, strict=True):
        torch.testing.assert_close(grad, want)


@pytest.mark.parametrize(("target_entropy", "direction"), [(5.0, 1), (-20.0, -1)])
def test_alpha_rises_below_the_target_entropy_and_falls_above(target_entropy, direction):
    policy = SACPolicy(PENDULUM_SPACES, sac_config(target_entropy=target_entropy), seed=0)
    before = float(policy.alpha)
    for seed in range(5):
        stats, _ = policy.learn_on_replay_batch(replay_batch(seed=seed))
    assert np.sign(float(policy.alpha) - before) == direction
    assert stats["alpha"] > 0 and np.isfinite(stats["entropy"])


def test_target_critics_start_as_copies_and_follow_by_polyak_averaging():
    config = sac_config(tau=0.1, target_update_interval=2)
    policy = SACPolicy(PENDULUM_SPACES, config, seed=0)
    assert same_parameters(policy.target_model, policy.model.critics)
    initial = parameters(policy.target_model)

    policy.learn_on_replay_batch(replay_batch(seed=0))  # no update before the 2nd step
    unchanged = zip(initial, policy.target_model.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in unchanged)
    assert not same_parameters(policy.target_model, policy.model.critics)

    policy.learn_on_replay_batch(replay_batch(seed=1))
    for target, old, online in zip(
        policy.target_model.parameters(), initial, policy.model.critics.parameters(), strict=True
    ):
        torch.testing.assert_close(target, 0.9 * old + 0.1 * online)


def test_state_round_trip_continues_training_exactly():
    """Networks, targets, Adam's moments, log alpha and the noise generator all come back:
    the restored policy's next steps are the original's to the bit."""
    config = sac_config(target_update_interval=2)
    policy = SACPolicy(PENDULUM_SPACES, config, seed=0)
    for seed in range(3):
        policy.learn_on_replay_batch(replay_batch(seed=seed))
    buffer = io.BytesIO()  # as the checkpoint store writes and reads it
    torch.save(policy.get_state(), buffer)
    restored = SACPolicy(PENDULUM_SPACES, config, seed=1)
    restored.set_state(load_state(buffer.getvalue()))
    assert float(restored.alpha) == float(policy.alpha) != 1.0

    for seed in range(3, 6):
        expected, _ = policy.learn_on_replay_batch(replay_batch(seed=seed))
        stats, _ = restored.learn_on_replay_batch(replay_batch(seed=seed))
        assert stats == expected
    assert same_parameters(restored.model, policy.model)
    assert same_parameters(restored.target_model, policy.target_model)


# -- on SyncReplay and through the driver ------------------------------------------------------


def test_sync_replay_takes_a_gradient_step_per_env_step_once_learning_starts():
    config = sac_config(
        rollout_length=8, learning_starts=100, gradient_steps_per_env_step=0.5, batch_size=16
    )
    workers = WorkerSet(
        RolloutWorker, lambda i: dict(policy_class=SACPolicy, config=config, num_envs=4, seed=i), 0
    )
    optimizer = SyncReplayOptimizer(workers, config)

    results = [optimizer.step() for _ in range(4)]  # 32 env steps each

    assert [r.steps_trained for r in results] == [0, 0, 0, 16 * 16]
    assert optimizer.policy.num_gradient_steps == 16
    assert results[0].learner_stats == {"alpha": 1.0, "replay_size": 32}
    assert {"loss", "policy_loss", "alpha_loss", "alpha", "entropy", "q_mean"} <= set(
        results[-1].learner_stats
    )
    assert len(optimizer.buffer) == 128
    assert optimizer.buffer.columns["actions"].shape == (config.hyperparameters.buffer_size, 1)


def test_a_resumed_run_continues_from_the_checkpointed_learner(tmp_path):
    def config(iterations: int):
        return trainer_config(
            algorithm="SAC",
            env="Pendulum-v1",
            stop={"iterations": iterations},
            hyperparameters={"rollout_length": 16, "learning_starts": 64, "hidden_sizes": [16]},
            checkpoint={"everyIterations": 3, "replayBuffer": True},
        )

    def saved_policy_state() -> dict:
        store = CheckpointStore(str(tmp_path / "checkpoints"), keep=3)
        return store.latest({"algorithm": "SAC", "env": "Pendulum-v1"}).state["policy"]

    first = Driver(config(3), RolloutConfig(envs_per_worker=2), tmp_path, "job").run()
    state = saved_policy_state()  # 32 env steps an iteration: learning from the 2nd on
    assert state["num_gradient_steps"] == 2 * 32
    policy = SACPolicy(PENDULUM_SPACES, config(3), seed=1)
    policy.set_state(state)
    assert float(policy.alpha) != 1.0
    assert not same_parameters(policy.target_model, policy.model.critics)
    # Adam's moments of every parameter: the actor's, the critics' and log alpha's.
    assert len(state["optimizer"]["state"]) == len(list(policy.model.parameters()))

    second = Driver(config(4), RolloutConfig(envs_per_worker=2), tmp_path, "job").run()
    assert second.resumed_from == first.checkpoint
    assert saved_policy_state()["num_gradient_steps"] == 3 * 32
