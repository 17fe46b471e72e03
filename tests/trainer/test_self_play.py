"""Self-play (multiAgent.selfPlay): a pool of the learning policy's snapshots, the opponent acting
with one of them, seats that alternate, win rates against the pool and against fixed baselines,
on PettingZoo's connect_four."""

import threading

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from kuberl_contract.config import RolloutConfig, TrainerConfig
from kuberl_trainer.envs.multi_agent import make_multi_agent_vector_env
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.self_play import RandomLegal, SelfPlay, Snapshot
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import progress_rows, trainer_config

CONNECT_FOUR = "pettingzoo:classic/connect_four-v3"


def self_play(**changes):
    return {
        "policies": {"main": {}, "opponent": {}},
        "policyMapping": [
            {"agents": "player_0", "policy": "main"},
            {"agents": "player_1", "policy": "opponent"},
        ],
        "selfPlay": {"policy": "main", "opponent": "opponent", **changes},
    }


def config_of(**changes):
    fields = {"stop": {"timesteps": 10_000}, "multi_agent": self_play()} | changes
    return trainer_config(algorithm="PPO", env=CONNECT_FOUR, **fields)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"policy": "nobody"}, "selfPlay.policy: 'nobody' is no policy of the mapping"),
        ({"opponent": "main"}, "the opponent is a policy of its own"),
        ({"baselines": ["blocker"]}, "selfPlay.baselines\\[0\\]: 'blocker' is neither random"),
    ],
)
def test_a_malformed_self_play_is_refused_naming_the_field(changes, message):
    document = {"algorithm": "PPO", "env": CONNECT_FOUR, "stop": {"timesteps": 1}}
    with pytest.raises(ValidationError, match=message):
        TypeAdapter(TrainerConfig).validate_python(document | {"multiAgent": self_play(**changes)})


def test_the_opponent_never_learns_nor_sets_its_own_networks():
    section = config_of().multi_agent
    assert section.trained_policies == ["main"]
    with pytest.raises(ValidationError, match="acts with snapshots, and never learns"):
        config_of(multi_agent=self_play() | {"policiesToTrain": ["main", "opponent"]})
    tuned = self_play()
    tuned["policies"]["opponent"] = {"hyperparameters": {"learning_rate": 0.1}}
    with pytest.raises(ValidationError, match="sets no hyperparameters or model of its own"):
        config_of(multi_agent=tuned)


def test_seats_alternate_between_copies():
    envs = make_multi_agent_vector_env(config_of(), 4)
    names = [name for name, _ in envs.spaces.policies]
    pattern = [names[index] for index in envs.spaces.lane_policies]
    assert pattern == ["main", "opponent", "opponent", "main"]  # copy 1 swaps the seats
    assert envs.spaces.policies_to_train == ("main",)
    envs.close()
    fixed = make_multi_agent_vector_env(config_of(multi_agent=self_play(alternateSeats=False)), 2)
    assert len(fixed.spaces.lane_policies) == 2
    fixed.close()


class Optimizer:
    """What SelfPlay reads of an optimizer: the learner's policy and its lock."""

    def __init__(self, policy):
        self.policy = policy
        self.policy_lock = threading.Lock()


def test_snapshots_join_a_pool_and_the_opponent_takes_them():
    config = config_of(multi_agent=self_play(snapshotEveryIterations=2, poolSize=2))
    worker = RolloutWorker(algorithms.worker_policies(config)[0], config, 2, seed=0)
    policy, optimizer = worker.policy, Optimizer(worker.policy)
    manager = SelfPlay(config, seed=0)
    seen = []
    for iteration in range(1, 8):
        manager.before_step(iteration, optimizer)
        policy.learn_on_batch(worker.sample(32))  # the learning policy moves on
        seen.append([snapshot.iteration for snapshot in manager.pool])
        opponent = policy.members["opponent"].get_weights()
        assert any(
            all(np.array_equal(opponent[k], v) for k, v in snapshot.weights.items())
            for snapshot in manager.pool
        )
    assert seen == [[0], [0], [0, 2], [0, 2], [2, 4], [2, 4], [4, 6]]  # at most 2, oldest out
    restored = SelfPlay(config, seed=1)
    restored.restore(manager.state())
    assert [s.iteration for s in restored.pool] == [4, 6]
    assert restored.rng.bit_generator.state == manager.rng.bit_generator.state


def test_win_rate_sampling_prefers_the_snapshots_it_loses_to():
    config = config_of(multi_agent=self_play(sampling="winRate", poolSize=3))
    manager = SelfPlay(config, seed=0)
    manager.pool.extend(
        [Snapshot(0, {}, games=100, wins=95), Snapshot(10, {}, 100, 50), Snapshot(20, {}, 100, 5)]
    )
    drawn = [manager._draw().iteration for _ in range(2000)]
    counts = [drawn.count(iteration) for iteration in (0, 10, 20)]
    assert counts[0] < counts[1] < counts[2]
    recency = SelfPlay(config_of(), seed=0)
    recency.pool.extend(manager.pool)
    assert [recency._draw().iteration for _ in range(1000)].count(20) > 450  # the newest half


def test_the_random_baseline_moves_only_where_the_mask_allows():
    envs = make_multi_agent_vector_env(config_of(), 8)
    opponent = RandomLegal(envs.spaces, seed=0)
    obs, _ = envs.reset(seed=0)
    for _ in range(30):
        actions, _ = opponent.compute_actions(obs)
        legal = obs[:, -7:] > 0.5
        acting = envs.active
        assert legal[acting, actions[acting]].all()
        obs, *_ = envs.step(actions)
    envs.close()


@pytest.mark.slow
def test_self_play_beats_a_random_player_more_often_as_it_learns(tmp_path):
    stop = {"timesteps": 40_000}
    config = config_of(
        stop=stop, multi_agent=self_play(snapshotEveryIterations=5, baselineEpisodes=100)
    )
    Driver(config, RolloutConfig(envs_per_worker=16), tmp_path, "job").run()
    rows = progress_rows(tmp_path)
    rates = [row["baseline_win_rates"]["random"] for row in rows]
    assert rates[-1] >= 0.9 and rates[-1] > rates[0], rates
    assert {row["opponent_snapshot"] for row in rows} > {0}  # newer snapshots took the seat
    assert all(0 <= row["win_rate"] <= 1 for row in rows)
