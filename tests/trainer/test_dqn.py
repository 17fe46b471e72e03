"""DQN: the Q-network, target network, exploration schedule, n-step postprocessing and TD
targets checked by hand, and the SyncReplay optimizer through the real workers (prioritized
replay also with SAC's policy)."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.spaces import space_info
from kuberl_trainer.optimizers.sync_replay import SyncReplayOptimizer
from kuberl_trainer.policies.dqn import DQNPolicy, QNetwork
from kuberl_trainer.policies.sac import SACPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import trainer_config

CARTPOLE_SPACES = space_info(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2))


def dqn_config(seed: int = 0, **hyperparameters):
    """A CartPole DQN job built from manifest keys, stopping at 100k env steps."""
    return trainer_config(algorithm="DQN", seed=seed, hyperparameters=hyperparameters)


def replay_batch(size: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(size, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size),
        "rewards": np.ones(size, np.float32),
        "next_obs": rng.normal(size=(size, 4)).astype(np.float32),
        "bootstrap_discounts": np.full(size, 0.99, np.float32),
    }


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("dueling", [False, True])
def test_q_network_gives_one_value_per_action(dueling):
    spaces = space_info(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(3))
    network = QNetwork(spaces, [32, 16], "relu", dueling)
    assert network(torch.zeros(5, 4)).shape == (5, 3)


def test_dueling_q_values_average_to_the_state_value():
    spaces = space_info(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(3))
    network = QNetwork(spaces, [32, 16], "tanh", dueling=True)
    obs = torch.randn(7, 4)
    with torch.no_grad():
        q_values = network(obs)
        values = network.value(network.body(obs)).squeeze(-1)
    torch.testing.assert_close(q_values.mean(dim=-1), values)


def test_dqn_rejects_continuous_actions():
    spaces = space_info(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)))
    with pytest.raises(EnvError, match="Discrete"):
        DQNPolicy(spaces, dqn_config(), seed=0)


def test_target_network_starts_as_a_copy_and_follows_every_interval():
    policy = DQNPolicy(CARTPOLE_SPACES, dqn_config(target_update_interval=3), seed=0)
    assert same_parameters(policy.model, policy.target_model)

    policy.learn_on_replay_batch(replay_batch())
    policy.learn_on_replay_batch(replay_batch())
    assert not same_parameters(policy.model, policy.target_model)
    policy.learn_on_replay_batch(replay_batch())
    assert same_parameters(policy.model, policy.target_model)
    policy.learn_on_replay_batch(replay_batch())
    assert not same_parameters(policy.model, policy.target_model)
    assert policy.num_gradient_steps == 4


@pytest.mark.parametrize(
    ("timesteps", "epsilon"), [(0, 1.0), (250, 0.775), (500, 0.55), (1000, 0.1), (10**6, 0.1)]
)
def test_epsilon_decays_linearly_then_stays(timesteps, epsilon):
    config = dqn_config(epsilon_initial=1.0, epsilon_final=0.1, epsilon_timesteps=1000)
    policy = DQNPolicy(CARTPOLE_SPACES, config, seed=0)
    policy.set_global_timesteps(timesteps)
    assert policy.epsilon == pytest.approx(epsilon)


def test_actions_are_greedy_without_exploration_and_random_at_epsilon_one():
    policy = DQNPolicy(CARTPOLE_SPACES, dqn_config(epsilon_initial=1.0), seed=0)
    obs = np.random.default_rng(0).normal(size=(2000, 4)).astype(np.float32)
    with torch.no_grad():
        greedy = policy.model(torch.from_numpy(obs)).argmax(dim=-1).numpy()

    actions, columns = policy.compute_actions(obs, explore=False)
    np.testing.assert_array_equal(actions, greedy)
    np.testing.assert_array_equal(columns["actions"], actions)

    explored, _ = policy.compute_actions(obs, explore=True)  # epsilon is 1 at timestep 0
    assert np.mean(explored == greedy) == pytest.approx(0.5, abs=0.05)


def test_n_step_postprocessing_against_hand_computed_columns():
    # gamma 0.5, n 2. Env 0 terminates at t=1; env 1 is truncated at t=0; the window has 3 steps.
    # The step after an episode's end only resets the env (reward 0): no transition.
    spaces = space_info(gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Discrete(2))
    policy = DQNPolicy(spaces, dqn_config(gamma=0.5, n_step=2), seed=0)
    steps, envs = np.meshgrid(np.arange(3), np.arange(2), indexing="ij")
    rollout = {
        "obs": (10 * steps + envs)[..., None].astype(np.float32),
        "next_obs": (10 * steps + envs + 5)[..., None].astype(np.float32),
        "rewards": np.array([[1, 1], [2, 0], [0, 100]], np.float32),
        "terminateds": np.array([[False, False], [True, False], [False, False]]),
        "truncateds": np.array([[False, True], [False, False], [False, False]]),
        "valid": np.array([[True, True], [True, False], [False, True]]),
        "actions": (steps + envs) % 2,
    }

    columns = policy.postprocess_trajectory(rollout)

    # Rows are time-major, reset steps left out: (t=0, env 0), (t=0, env 1), (t=1, env 0), (t=2,
    # env 1)
    np.testing.assert_array_equal(columns["obs"][:, 0], [0, 1, 10, 21])
    np.testing.assert_array_equal(columns["actions"], [0, 1, 1, 1])
    np.testing.assert_allclose(columns["rewards"], [1 + 0.5 * 2, 1, 2, 100])
    np.testing.assert_array_equal(columns["next_obs"][:, 0], [15, 6, 15, 26])
    np.testing.assert_allclose(columns["bootstrap_discounts"], [0, 0.5, 0, 0.5])


class FixedQ(nn.Module):
    """Q-values that ignore the observation, to build a TD target by hand."""

    def __init__(self, q_values: list[float]):
        super().__init__()
        self.q_values = torch.tensor([q_values])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values.expand(len(obs), -1)


@pytest.mark.parametrize(("double_q", "bootstrap_value"), [(False, 3.0), (True, 2.0)])
def test_double_q_evaluates_the_online_argmax_with_the_target(double_q, bootstrap_value):
    # The online network prefers action 1 (5 > 1); the target prefers action 0 (3 > 2).
    spaces = space_info(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    policy = DQNPolicy(spaces, dqn_config(double_q=double_q), seed=0)
    policy.model, policy.target_model = FixedQ([1.0, 5.0]), FixedQ([3.0, 2.0])
    batch = {
        "rewards": torch.tensor([1.0, 0.5]),
        "bootstrap_discounts": torch.tensor([0.9, 0.0]),
        "next_obs": torch.zeros(2, 4),
    }

    targets = policy.td_targets(batch)

    torch.testing.assert_close(targets, torch.tensor([1.0 + 0.9 * bootstrap_value, 0.5]))


def test_td_errors_and_importance_weights():
    policy = DQNPolicy(CARTPOLE_SPACES, dqn_config(), seed=0)
    batch = replay_batch(size=8)
    tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
    with torch.no_grad():
        q_taken = policy.model(tensors["obs"]).gather(1, tensors["actions"][:, None]).squeeze(1)
        expected_td_errors = (q_taken - policy.td_targets(tensors)).numpy()
    weights = np.zeros(8, np.float32)
    weights[3] = 1.0

    with torch.no_grad():
        loss, _ = policy.loss({**tensors, "weights": torch.from_numpy(weights)})
        unweighted, _ = policy.loss(tensors)
    stats, td_errors = policy.learn_on_replay_batch(batch)

    np.testing.assert_allclose(td_errors, expected_td_errors, rtol=1e-5)
    huber = min(0.5 * expected_td_errors[3] ** 2, abs(expected_td_errors[3]) - 0.5)
    assert float(loss) == pytest.approx(huber / 8, rel=1e-5)  # only row 3 counts
    assert stats["loss"] == pytest.approx(float(unweighted))
    assert stats["td_error_mean"] == pytest.approx(np.abs(expected_td_errors).mean(), rel=1e-5)


def test_state_round_trip_includes_the_target_network_and_its_schedule():
    config = dqn_config(target_update_interval=5)
    policy = DQNPolicy(CARTPOLE_SPACES, config, seed=0)
    for _ in range(3):
        policy.learn_on_replay_batch(replay_batch())
    restored = DQNPolicy(CARTPOLE_SPACES, config, seed=1)
    restored.set_state(copy.deepcopy(policy.get_state()))  # as if through a checkpoint file

    assert same_parameters(restored.target_model, policy.target_model)
    assert not same_parameters(restored.model, restored.target_model)
    for _ in range(2):  # the 5th step copies the target in both
        policy.learn_on_replay_batch(replay_batch())
        restored.learn_on_replay_batch(replay_batch())
    assert same_parameters(restored.target_model, policy.target_model)
    assert same_parameters(restored.model, restored.target_model)


def test_greedy_evaluation_runs_with_the_dqn_policy():
    worker = RolloutWorker(DQNPolicy, dqn_config(), num_envs=2, seed=0)
    mean_return = worker.evaluate(3, seed=7)
    assert 1.0 <= mean_return <= 500.0
    again = RolloutWorker(DQNPolicy, dqn_config(), num_envs=2, seed=0)
    assert again.evaluate(3, seed=7) == mean_return  # greedy actions, seeded start states


def test_sync_replay_waits_for_learning_starts_then_trains():
    config = dqn_config(rollout_length=16, learning_starts=200, gradient_steps=4, batch_size=8)
    workers = WorkerSet(
        RolloutWorker, lambda i: dict(policy_class=DQNPolicy, config=config, num_envs=4, seed=i), 0
    )
    optimizer = SyncReplayOptimizer(workers, config)

    results = [optimizer.step() for _ in range(4)]  # 64 env steps each, less the reset steps

    assert [r.steps_trained for r in results] == [0, 0, 0, 32]
    assert set(results[0].learner_stats) == {"epsilon", "replay_size"}
    sampled = np.cumsum([r.steps_sampled for r in results]).tolist()
    assert [r.learner_stats["replay_size"] for r in results] == sampled  # the memory's fill
    assert {"loss", "q_mean", "td_error_mean", "epsilon"} <= set(results[-1].learner_stats)
    assert len(optimizer.buffer) == sum(r.steps_sampled for r in results) > 200
    assert optimizer.policy.num_gradient_steps == 4


@pytest.mark.parametrize(
    ("algorithm", "policy_class", "env", "hyperparameters"),
    [
        ("DQN", DQNPolicy, "CartPole-v1", {"gradient_steps": 3}),
        ("SAC", SACPolicy, "Pendulum-v1", {"hidden_sizes": [16]}),  # 64 steps, one per env step
    ],
)
def test_sync_replay_with_prioritized_replay_updates_priorities(
    algorithm, policy_class, env, hyperparameters, monkeypatch
):
    alpha, eps = 0.6, 0.1  # eps large enough that leaving it out shows
    config = trainer_config(
        algorithm=algorithm,
        env=env,
        hyperparameters={
            "rollout_length": 16,
            "learning_starts": 0,
            "batch_size": 8,  # small: DQN's 3 steps leave some transitions unsampled
            "prioritized_replay": True,
            "prioritized_replay_alpha": alpha,
            "prioritized_replay_eps": eps,
            **hyperparameters,
        },
    )
    workers = WorkerSet(
        RolloutWorker,
        lambda i: dict(policy_class=policy_class, config=config, num_envs=4, seed=i),
        0,
    )
    optimizer = SyncReplayOptimizer(workers, config)
    buffer, policy = optimizer.buffer, optimizer.policy

    # Each gradient step's sampled slots and the TD errors the learner computed for them, in order.
    sampled: list[np.ndarray] = []
    td_errors: list[np.ndarray] = []
    sample, learn = buffer.sample, policy.learn_on_replay_batch

    def recording_sample(batch_size, beta):
        columns = sample(batch_size, beta)
        sampled.append(columns["indices"].copy())
        return columns

    def recording_learn(columns):
        stats, errors = learn(columns)
        td_errors.append(np.array(errors, dtype=np.float64))
        return stats, errors

    monkeypatch.setattr(buffer, "sample", recording_sample)
    monkeypatch.setattr(policy, "learn_on_replay_batch", recording_learn)

    optimizer.step()

    assert len(sampled) == len(td_errors) == policy.num_gradient_steps > 0
    # The priority a slot holds comes from the last step that sampled it, raised to alpha (the
    # buffer samples in proportion to p ** alpha). A slot drawn twice in that step holds one of
    # its two values (SAC's targets sample next actions, so the two may differ).
    expected: dict[int, list[float]] = {}
    for indices, errors in zip(sampled, td_errors, strict=True):
        assert errors.shape == indices.shape
        step: dict[int, list[float]] = {}
        for index, error in zip(indices.tolist(), errors.tolist(), strict=True):
            step.setdefault(index, []).append((abs(error) + eps) ** alpha)
        expected |= step
    stored = buffer.sums.leaves(np.arange(len(buffer)))
    for index, candidates in expected.items():
        assert min(abs(stored[index] - c) for c in candidates) <= 1e-5 * max(candidates), (
            f"slot {index} holds priority {stored[index]}, expected one of {candidates}"
        )
    never_sampled = sorted(set(range(len(buffer))) - set(expected))
    # New transitions enter at the largest priority seen before the step: 1 ** alpha.
    np.testing.assert_array_equal(stored[never_sampled], 1.0)
    assert buffer.sums.root == pytest.approx(stored.sum())
    assert buffer.mins.root == pytest.approx(stored.min())


def test_sync_replay_checkpoints_the_buffer_when_asked():
    config = dqn_config(rollout_length=8, learning_starts=0, gradient_steps=1)

    def optimizer(checkpoint_buffer: bool) -> SyncReplayOptimizer:
        wanted = config.model_copy(
            update={
                "checkpoint": config.checkpoint.model_copy(
                    update={"replay_buffer": checkpoint_buffer}
                )
            }
        )
        workers = WorkerSet(
            RolloutWorker,
            lambda i: dict(policy_class=DQNPolicy, config=wanted, num_envs=2, seed=i),
            0,
        )
        return SyncReplayOptimizer(workers, wanted)

    source = optimizer(checkpoint_buffer=True)
    source.step()
    assert "replay_buffer" not in optimizer(checkpoint_buffer=False).save()
    restored = optimizer(checkpoint_buffer=True)
    restored.restore(source.save())

    assert len(restored.buffer) == 16
    assert restored.counters.steps_sampled == 16
