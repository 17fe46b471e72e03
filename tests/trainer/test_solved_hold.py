"""IMPALA and APPO hold a solved CartPole-v1 under the lag a busy node gives them, replayed
deterministically.

On a node whose cores are busy, the workers feed the learner slowly: it waits for every batch,
takes each worker's sample call as it comes (2,048 env steps from 64 envs), and the batch was
sampled with its weights of about 2 learn calls before (AsyncSamples' measured lag under three
CPU-bound processes). `lagged_learning` replays exactly that in one process, without Ray: 12
workers of 64 envs take turns, each sampling with the learner's weights from `lag` learn calls
before. The replay provoked the collapse the loaded runs showed (see
`test_the_replay_provokes_the_collapse`), so the test of the defaults is a test of the cause, not
a run hoping to meet it. bench/solved_hold.py measures the real thing, beside busy processes.
"""

from collections import deque

import numpy as np
import pytest
import torch

from kuberl_trainer.policy.appo import APPOPolicy
from kuberl_trainer.policy.impala import IMPALAPolicy
from kuberl_trainer.rollout_worker import RolloutWorker
from testkit import trainer_config

TIMESTEPS = 2_000_000
ROW_TIMESTEPS = 24_576  # a progress row of 12 workers x 64 envs x 32 steps
HOLD = 450.0  # the criterion: the mean return over the second half of the env steps


def lagged_learning(
    algorithm: str, seed: int, hyperparameters: dict | None = None, lag: int = 2, workers: int = 12
) -> list[tuple[int, float]]:
    """(env steps, mean return of the last 100 episodes) every ROW_TIMESTEPS env steps of a run
    of TIMESTEPS in which each learn call takes one worker's sample call, sampled with the
    learner's weights of `lag` learn calls before."""
    policy_class = {"IMPALA": IMPALAPolicy, "APPO": APPOPolicy}[algorithm]
    config = trainer_config(algorithm=algorithm, seed=seed, hyperparameters=hyperparameters or {})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one learner thread as on a worker's share of a node: deterministic
    try:
        learner = RolloutWorker(policy_class, config, num_envs=1, seed=seed).policy
        fleet = [
            RolloutWorker(policy_class, config, num_envs=64, seed=1000 * seed + index)
            for index in range(1, workers + 1)
        ]
        # the fleet starts with the first weights, as if `lag` calls old
        weights = deque([learner.get_weights()], maxlen=lag + 1)
        returns: deque[float] = deque(maxlen=100)  # the progress rows' metrics_window
        rows: list[tuple[int, float]] = []
        timesteps = calls = 0
        while timesteps < TIMESTEPS:
            worker = fleet[calls % workers]
            worker.set_weights(weights[0], timesteps)  # the oldest kept: `lag` calls before
            batch = worker.sample()
            batch.policy_lag = float(lag)
            learner.set_global_timesteps(timesteps := timesteps + batch.env_steps)
            learner.learn_on_batch(batch)
            weights.append(learner.get_weights())
            calls += 1
            returns.extend(batch.episode_returns.tolist())
            if timesteps // ROW_TIMESTEPS > len(rows) and returns:
                rows.append((timesteps, float(np.mean(returns))))
        return rows
    finally:
        torch.set_num_threads(threads)


def second_half_mean(rows: list[tuple[int, float]]) -> float:
    return float(np.mean([mean for timesteps, mean in rows if timesteps > TIMESTEPS / 2]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm, seed",
    # the seeds on which the replay collapsed the policy with the old defaults (IMPALA seed 0:
    # 313 over the second million; APPO seed 0: 141, seed 5: 296)
    [("IMPALA", 0), ("APPO", 0), ("APPO", 5)],
)
def test_a_solved_policy_holds_its_return_under_a_busy_nodes_lag(algorithm, seed):
    rows = lagged_learning(algorithm, seed)
    assert max(mean for _, mean in rows) >= 475, rows  # it was solved
    assert second_half_mean(rows) >= HOLD, rows


@pytest.mark.slow
def test_the_replay_provokes_the_collapse():
    """With the old lag_sgd_steps of 8 (4 minibatches of about 500 rows per learn call at a lag
    of 2: 8 SGD steps between sampling and learning) the replay loses the solved policy, so the
    test above would catch the cause coming back."""
    rows = lagged_learning("IMPALA", 0, {"lag_sgd_steps": 8})
    assert max(mean for _, mean in rows) >= 475, rows
    assert second_half_mean(rows) < HOLD, rows
