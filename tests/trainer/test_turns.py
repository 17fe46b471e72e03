"""A turn-based game's lanes become each agent's own transitions (policies/turns.py), across
window boundaries, and a game where agents take turns trains (PettingZoo's connect_four)."""

import numpy as np
import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.multi_agent import make_multi_agent_vector_env
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.policies.postprocessing import gae_columns
from kuberl_trainer.policies.sample_batch import VALID
from kuberl_trainer.policies.turns import TurnCompactor
from testkit import progress_rows, trainer_config


def window(moves, rewards, ended, start=0):
    """A window of two lanes taking turns: `moves[t]` is the lane that moves at step t (None: a
    reset step), rewards[t] each lane's, ended[t] whether the game ended with step t. Each
    observation is its step's number (offset by `start`) on the lane's side: 10 * lane + t."""
    horizon = len(moves)
    steps = np.arange(start, start + horizon + 1, dtype=np.float32)
    obs = np.stack([steps, 10 + steps], axis=1)[:, :, None]  # (T + 1, 2, 1)
    return {
        "obs": obs[:-1],
        "next_obs": obs[1:],
        "rewards": np.array(rewards, dtype=np.float32),
        "terminateds": np.repeat(np.array(ended)[:, None], 2, axis=1),
        "truncateds": np.zeros((horizon, 2), dtype=bool),
        VALID: np.array([[move == 0, move == 1] for move in moves]),
        "actions": np.array([[t, 100 + t] for t in range(start, start + horizon)]),
        "values": np.zeros((horizon, 2), dtype=np.float32),
    }


def transitions(columns, lane):
    """(obs, action, reward, terminated, truncated, next_obs) of the lane's valid rows."""
    rows = np.flatnonzero(columns[VALID][:, lane])
    return [
        (
            float(columns["obs"][t, lane, 0]),
            int(columns["actions"][t, lane]),
            float(columns["rewards"][t, lane]),
            bool(columns["terminateds"][t, lane]),
            bool(columns["truncateds"][t, lane]),
            float(columns["next_obs"][t, lane, 0]),
        )
        for t in rows
    ]


def test_a_turn_spans_the_opponents_move_and_the_loss_that_ends_the_game():
    # lane 0 moves at 0, 2, 4 and wins at 4: lane 1 (moved at 1, 3) loses on lane 0's move
    columns = TurnCompactor().compact(
        window(
            [0, 1, 0, 1, 0, None],
            [[0, 0], [0, 0], [0, 0], [0, 0], [1, -1], [0, 0]],
            [False, False, False, False, True, False],
        )
    )
    assert "values" not in columns  # computed again for the rows as they now are
    assert transitions(columns, 0) == [
        (0, 0, 0, False, False, 2),
        (2, 2, 0, False, False, 4),
        (4, 4, 1, True, False, 5),
    ]
    assert transitions(columns, 1) == [
        (11, 101, 0, False, False, 13),
        (13, 103, -1, True, False, 15),  # the loss befell it on lane 0's move
    ]
    # after an episode's end, its final observation, as a reset step of a single-agent rollout
    assert columns["obs"][3, 0, 0] == 5 and not columns[VALID][3, 0]


def test_a_turn_open_at_the_window_end_waits_for_the_next_window():
    compactor = TurnCompactor()
    first = compactor.compact(
        window([0, 1, 0, 1], [[0, 0]] * 4, [False] * 4)
    )  # lane 1's move at 3 is still open, as is lane 0's at 2
    assert transitions(first, 0) == [(0, 0, 0, False, True, 2)]  # the window's last: cut
    assert transitions(first, 1) == [(11, 101, 0, False, True, 13)]
    # the game ends on the next window's first step, lane 0's winning move
    second = compactor.compact(
        window([0, None, 0, 1], [[1, -1], [0, 0], [0, 0], [0, 0]], [True, False, False, False], 4)
    )
    assert transitions(second, 0)[:2] == [(2, 2, 0, False, False, 4), (4, 4, 1, True, False, 5)]
    assert transitions(second, 1) == [(13, 103, -1, True, False, 15)]  # not lost


def test_lanes_that_move_together_come_out_as_they_went_in():
    rollout = window([None] * 4, [[1, 2]] * 4, [False, False, True, False])
    rollout[VALID] = np.array([[True, True]] * 3 + [[False, False]])
    columns = TurnCompactor().compact(rollout)
    for key in ("obs", "next_obs", "rewards", "terminateds", VALID):
        assert np.array_equal(columns[key][:3], rollout[key][:3]), key
    values = np.zeros((4, 2), dtype=np.float32)
    # GAE over the compacted rows is GAE over the rows
    gae = gae_columns(columns, values, values[:1], values, 0.9, 1.0)
    assert np.allclose(gae["value_targets"], [1 + 0.9 + 0.81, 2 + 1.8 + 1.62, 1.9, 3.8, 1, 2])


@pytest.mark.slow
def test_connect_four_trains_with_its_masks(tmp_path):
    """Both players act with one learning policy; every move it makes is legal."""
    config = trainer_config(
        algorithm="PPO",
        env="pettingzoo:classic/connect_four-v3",
        stop={"timesteps": 6_000},
    )
    envs = make_multi_agent_vector_env(config, 2)
    assert envs.spaces.turn_based and envs.spaces.action_mask_n == 7
    envs.close()
    result = Driver(config, RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    rows = progress_rows(tmp_path)
    assert result.timesteps >= 6_000
    # an illegal move ends a game at once with -1 for the player who made it; a legal game of
    # connect four lasts at least 7 moves, 4 of the winner's
    assert min(row["episode_len_mean"] for row in rows) >= 4
    assert rows[-1]["episodes_total"] > 100
