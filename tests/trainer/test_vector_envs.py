"""Natively vectorized envs (gymnasium's vector entry points) against envs made one by one.

Both kinds reset an env on the step after its episode ended. The sampler must leave that step out
(it is no transition) and give the same rows, episode returns and lengths whichever kind steps the
envs. CartPole draws each episode's start state from the env's random generator, which the two
kinds hold differently (one for all copies, one per copy), so these tests hand both the same start
state per env and episode."""

import gymnasium as gym
import numpy as np
import pytest

from kuberl_trainer.envs.making import (
    has_vector_entry_point,
    make_vector_env,
    one_by_one_vector_env,
)
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.policies.sample_batch import VALID
from kuberl_trainer.rollouts import rollout_worker
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

ENVS, HORIZON, BATCHES = 6, 25, 4
MAX_STEPS = 30  # short enough that some episodes are cut off by the time limit


def start_state(env_index: int, episode: int) -> np.ndarray:
    """CartPole's state at the start of an env's nth episode (as its reset draws them)."""
    return np.random.default_rng([env_index, episode]).uniform(-0.05, 0.05, 4)


class OneByOneStarts:
    """In place of one CartPoleEnv's random generator: a reset draws the env's next start."""

    def __init__(self, env_index: int):
        self.env_index, self.episode = env_index, 0

    def uniform(self, low, high, size):
        self.episode += 1
        return start_state(self.env_index, self.episode)


class NativeStarts:
    """In place of CartPoleVectorEnv's random generator: every step draws the starts of the envs
    it resets, one column each."""

    def __init__(self, envs):
        self.envs, self.episodes = envs, np.zeros(envs.num_envs, dtype=int)

    def uniform(self, low, high, size):
        resetting = np.flatnonzero(self.envs.prev_done)
        self.episodes[resetting] += 1
        return np.array([start_state(i, self.episodes[i]) for i in resetting]).reshape(size[::-1]).T


def one_by_one(env, env_config, num_envs, wrappers=(), cpus=None):
    """make_vector_env always making the envs one by one (which step on the caller's thread)."""
    return one_by_one_vector_env(env, env_config, num_envs, wrappers)


def worker_starting_alike(algorithm: str, native: bool, monkeypatch) -> RolloutWorker:
    config = trainer_config(
        algorithm=algorithm,
        envConfig={"max_episode_steps": MAX_STEPS},
        hyperparameters={"rollout_length": HORIZON},
    )
    with monkeypatch.context() as patch:
        if not native:
            patch.setattr(rollout_worker, "make_vector_env", one_by_one)
        worker = RolloutWorker(policy_class(config), config, num_envs=ENVS, seed=0)
    first = np.stack([start_state(i, 0) for i in range(ENVS)])
    if native:
        assert type(worker.envs).__name__ == "CartPoleVectorEnv"
        worker.envs.state = first.T.copy()
        worker.envs.np_random = NativeStarts(worker.envs)
    else:
        assert isinstance(worker.envs, gym.vector.SyncVectorEnv)
        for i, env in enumerate(worker.envs.envs):
            env.unwrapped.state = first[i].copy()
            env.unwrapped.np_random = OneByOneStarts(i)
    worker.obs = first.astype(np.float32)
    return worker


@pytest.mark.parametrize("algorithm", ["PPO", "IMPALA", "DQN"])
def test_native_and_one_by_one_envs_give_the_same_batches(algorithm, monkeypatch):
    """Same policy seed, same starts: the same actions, so the same rows and episodes (PPO and
    DQN drop the reset steps, IMPALA keeps them masked in its sequences)."""
    native = worker_starting_alike(algorithm, True, monkeypatch)
    one_by_one = worker_starting_alike(algorithm, False, monkeypatch)
    lengths = []
    for _ in range(BATCHES):
        a, b = native.sample(), one_by_one.sample()
        assert a.columns.keys() == b.columns.keys()
        for key in a.columns:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-6, err_msg=key)
        np.testing.assert_array_equal(a.episode_returns, b.episode_returns)
        np.testing.assert_array_equal(a.episode_lengths, b.episode_lengths)
        assert a.env_steps < ENVS * HORIZON  # some reset steps were left out
        lengths.append(a.episode_lengths)
    lengths = np.concatenate(lengths)
    # episodes that fell and episodes cut off by the time limit, most ending inside a batch
    assert (lengths < MAX_STEPS).sum() >= 10 and (lengths == MAX_STEPS).sum() >= 1, lengths


def test_native_rows_are_the_transitions_of_envs_stepped_by_hand(monkeypatch):
    """IMPALA's batch keeps each env's sequence: its valid rows, replayed on a CartPole-v1 made by
    gym.make, are that env's transitions one after another, and the episodes they add up to are
    the batch's."""
    worker = worker_starting_alike("IMPALA", True, monkeypatch)
    batch = worker.sample()
    env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
    episode_lengths = []
    for n in range(ENVS):
        rows = np.arange(n * HORIZON, (n + 1) * HORIZON)
        rows = rows[batch[VALID][rows]]
        episode, length = 0, 0
        env.reset()
        env.unwrapped.state = start_state(n, episode)
        for row in rows:
            np.testing.assert_allclose(batch["obs"][row], env.unwrapped.state, atol=1e-6)
            obs, reward, terminated, truncated, _ = env.step(int(batch["actions"][row]))
            np.testing.assert_allclose(batch["next_obs"][row], obs, atol=1e-6)
            assert (batch["rewards"][row], batch["terminateds"][row]) == (reward, terminated)
            assert batch["truncateds"][row] == truncated
            length += 1
            if terminated or truncated:
                episode_lengths.append(length)
                episode, length = episode + 1, 0
                env.reset()
                env.unwrapped.state = start_state(n, episode)
        assert length == worker.episodes.lengths[n]  # the episode still going
    assert sorted(episode_lengths) == sorted(batch.episode_lengths)
    learned = worker.policy.learnable_rows(worker.policy.batch_tensors(batch))
    assert len(learned["obs"]) == batch.env_steps  # the learner drops the reset steps
    # every transition counts once, no reset step does
    assert batch.env_steps == sum(episode_lengths) + worker.episodes.lengths.sum() < ENVS * HORIZON


def test_a_window_never_holds_only_reset_steps():
    """One env, one step per window: the window after an episode's end would hold nothing but the
    reset step, so the worker takes that step first."""
    config = trainer_config(algorithm="PPO", hyperparameters={"rollout_length": 1})
    worker = RolloutWorker(policy_class(config), config, num_envs=1, seed=0)
    batches = [worker.sample() for _ in range(100)]
    assert all(len(batch) == 1 for batch in batches)
    assert sum(len(batch.episode_lengths) for batch in batches) >= 2


def test_ids_with_a_vector_entry_point_are_made_natively():
    assert has_vector_entry_point("CartPole-v1")
    assert not has_vector_entry_point("Pendulum-v1")
    assert not has_vector_entry_point("custom_envs:Corridor")
    envs = make_vector_env("CartPole-v1", {"max_episode_steps": 50}, 1024)
    assert (type(envs).__name__, envs.num_envs, envs.max_episode_steps) == (
        "CartPoleVectorEnv",
        1024,
        50,
    )
    assert isinstance(make_vector_env("Pendulum-v1", {}, 2), gym.vector.SyncVectorEnv)


@pytest.mark.parametrize("native", [True, False])
def test_episodes_run_back_to_back_count_no_reset_step(monkeypatch, native):
    """ES and the greedy evaluation run more episodes than envs: an env whose episode ended takes
    a reset step before its next one, which belongs to no episode. CartPole pays 1 per step, so
    every episode's return equals its length."""
    if not native:
        monkeypatch.setattr(rollout_worker, "make_vector_env", one_by_one)
    config = trainer_config(algorithm="PPO", envConfig={"max_episode_steps": MAX_STEPS})
    worker = RolloutWorker(policy_class(config), config, num_envs=2, seed=0)
    returns, lengths = worker._run_episodes(
        worker.envs, 7, lambda obs, episodes: worker.policy.compute_actions(obs)[0]
    )
    assert (lengths > 0).all() and (lengths <= MAX_STEPS).all()
    np.testing.assert_array_equal(returns, lengths)
