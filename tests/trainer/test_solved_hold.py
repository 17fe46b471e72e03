"""IMPALA, APPO, A3C and Ape-X hold a solved CartPole-v1 under the lag a busy node gives them,
replayed deterministically.

On a node whose cores are busy, the workers feed the learner slowly: it waits for every batch,
takes each worker's sample call as it comes (2,048 env steps from 64 envs), and the batch was
sampled with its weights of about 2 learn calls before (AsyncSamples' measured lag under three
CPU-bound processes). `lagged_learning` replays exactly that in one process, without Ray: 12
workers of 64 envs take turns, each sampling with the learner's weights from `lag` learn calls
before. The replay provoked the collapse the loaded runs showed (see
`test_the_replay_provokes_the_collapse`), so the test of the defaults is a test of the cause, not
a run hoping to meet it. bench/solved_hold.py measures the real thing, beside busy processes.

A replay is deterministic on one kind of CPU only: the float rounding of torch's kernels differs
between vector units, and which seed falls is a chaotic outcome of it (`first_fall`).

A3C's 2 workers with 2 calls each apply every gradient about 3 applies after the weights it was
computed on, busy node or not; `lagged_gradients` replays that, and its collapse was A3C's own:
Adam walking a solved policy along gradients that had vanished (A3CHyperparameters.adam_epsilon).

Ape-X's falls were its own too, at a lag of 1, 4 and 8 sample calls alike (`lagged_apex` replays
its sharded prioritized replay): its nearly greedy worker let the cart drift off the track, a
failure further ahead than a discount of 0.99 sees (APEXHyperparameters.gamma), and with 12
workers, mostly nearly greedy, a memory of 100k soon held a solved policy's successes only
(APEXHyperparameters.buffer_size).
"""

from collections import deque

import numpy as np
import pytest
import torch

from kuberl_trainer.optimizers.async_replay import (
    AsyncReplayOptimizer,
    learn_on_replay_call,
    reported_workers,
)
from kuberl_trainer.optimizers.replay_shard import ReplayShard
from kuberl_trainer.policies.a2c import A2CPolicy
from kuberl_trainer.policies.apex import APEXPolicy
from kuberl_trainer.policies.appo import APPOPolicy
from kuberl_trainer.policies.impala import IMPALAPolicy
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import Gradients, RolloutWorker
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

    def sample(worker: RolloutWorker) -> tuple[SampleBatch, int]:
        batch = worker.sample()
        batch.policy_lag = float(lag)
        return batch, batch.env_steps

    def learn(learner, batch: SampleBatch) -> None:
        learner.learn_on_batch(batch)

    return lagged_replay(
        policy_class, config, lag, workers, sample, learn, envs=64, row_timesteps=ROW_TIMESTEPS
    )


A3C_TIMESTEPS = 200_000  # A3C's learning test's budget, as bench/solved_hold.py runs it
A3C_HOLD = 400.0  # its learning test's target


def lagged_gradients(
    seed: int, hyperparameters: dict | None = None, lag: int = 3, workers: int = 2
) -> list[tuple[int, float]]:
    """The same rows of an A3C run of A3C_TIMESTEPS with `workers` of 8 envs taking turns, each
    gradient computed on the learner's weights of `lag` applies before."""
    config = trainer_config(algorithm="A3C", seed=seed, hyperparameters=hyperparameters or {})

    def sample(worker: RolloutWorker) -> tuple[Gradients, int]:
        gradients = worker.compute_gradients()
        return gradients, gradients.steps

    def learn(learner, gradients: Gradients) -> None:
        learner.apply_gradients(gradients.gradients)

    return lagged_replay(A2CPolicy, config, lag, workers, sample, learn, timesteps=A3C_TIMESTEPS)


def lagged_replay(
    policy_class,
    config,
    lag: int,
    workers: int,
    sample,
    learn,
    *,
    envs: int = 8,
    timesteps: int = TIMESTEPS,
    row_timesteps: int = 2_000,
    reported: set[int] | None = None,
    window: int = 100,
) -> list[tuple[int, float]]:
    """(env steps, mean return of the last `window` episodes of the `reported` workers, 1 to
    `workers`, all by default) every `row_timesteps` env steps of a run of `timesteps`: `workers`
    of `envs` envs take turns, each starting from the learner's weights of `lag` learn calls
    before, and `learn` takes what `sample` returned. The config's seed seeds them all."""
    seed = config.seed
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one learner thread as on a worker's share of a node: deterministic
    try:
        learner = RolloutWorker(policy_class, config, num_envs=1, seed=seed).policy
        fleet = [
            RolloutWorker(
                policy_class,
                config,
                num_envs=envs,
                seed=1000 * seed + index,
                worker_index=index,
                num_workers=workers,
            )
            for index in range(1, workers + 1)
        ]
        # the fleet starts with the first weights, as if `lag` calls old
        weights = deque([learner.get_weights()], maxlen=lag + 1)
        returns: deque[float] = deque(maxlen=window)
        rows: list[tuple[int, float]] = []
        steps = calls = 0
        while steps < timesteps:
            index = calls % workers + 1
            worker = fleet[index - 1]
            worker.set_weights(weights[0], steps)  # the oldest kept: `lag` calls before
            result, env_steps = sample(worker)
            learner.set_global_timesteps(steps := steps + env_steps)
            learn(learner, result)
            weights.append(learner.get_weights())
            calls += 1
            if reported is None or index in reported:
                returns.extend(result.episode_returns.tolist())
            if steps // row_timesteps > len(rows) and returns:
                rows.append((steps, float(np.mean(returns))))
        return rows
    finally:
        torch.set_num_threads(threads)


APEX_TIMESTEPS = 200_000  # as bench/solved_hold.py runs it, twice the env steps to 400
APEX_HOLD = 400.0  # its learning test's target


def lagged_apex(
    seed: int,
    hyperparameters: dict | None = None,
    lag: int = 4,
    workers: int = 2,
    timesteps: int = APEX_TIMESTEPS,
) -> list[tuple[int, float]]:
    """The rows of an Ape-X run as AsyncReplay makes it, in one process: `workers` of 8 envs at
    the Ape-X epsilons (of 2: 0.4, and 0.4^8 for the one reported, as the progress rows report
    the least exploring third), their batches going to 2 prioritized shards in turn, and after
    each, 512-row replay calls from the shards in turn until the learner has replayed
    training_intensity x the transitions sampled; each sample call starts from the learner's
    weights of `lag` calls before (two calls in flight per worker: 4 for two workers, 24 for
    12). The return is the progress rows' mean over the last 20 episodes (metrics_window): over
    100, it would reach back a quarter of the run."""
    config = trainer_config(algorithm="APEX", seed=seed, hyperparameters=hyperparameters or {})
    hp = config.hyperparameters
    shards = [
        ReplayShard(
            -(-hp.buffer_size // 2),
            hp.prioritized_replay_alpha,
            hp.prioritized_replay_eps,
            [seed, shard],
        )
        for shard in range(2)
    ]
    minibatches = AsyncReplayOptimizer.replay_rows_per_call // hp.batch_size
    counts = {"added": 0, "replayed": 0, "calls": 0}

    def sample(worker: RolloutWorker) -> tuple[SampleBatch, int]:
        batch = worker.sample()
        return batch, batch.env_steps

    def learn(learner, batch: SampleBatch) -> None:
        shards[counts["calls"] % 2].add(batch)
        counts["calls"] += 1
        counts["added"] += len(batch)
        if sum(len(shard.buffer) for shard in shards) < hp.learning_starts:
            return
        while counts["replayed"] < hp.training_intensity * counts["added"]:
            shard = shards[counts["replayed"] // AsyncReplayOptimizer.replay_rows_per_call % 2]
            columns = shard.sample(hp.batch_size, hp.prioritized_replay_beta, minibatches)
            indices, td_errors, _ = learn_on_replay_call(learner, columns, hp.batch_size)
            shard.update_priorities(indices, td_errors)
            counts["replayed"] += len(indices)

    return lagged_replay(
        APEXPolicy,
        config,
        lag,
        workers,
        sample,
        learn,
        timesteps=timesteps,
        reported=reported_workers(workers),
        window=20,
    )


def second_half_mean(rows: list[tuple[int, float]], timesteps: int = TIMESTEPS) -> float:
    return float(np.mean([mean for steps, mean in rows if steps > timesteps / 2]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm, seed",
    # seeds on which the replay collapsed the policy with the old defaults (IMPALA seed 2 on CI's
    # CPUs: 274 over the second million, where the defaults hold 500; APPO seed 0: 141, seed 5:
    # 296)
    [("IMPALA", 2), ("APPO", 0), ("APPO", 5)],
)
def test_a_solved_policy_holds_its_return_under_a_busy_nodes_lag(algorithm, seed):
    rows = lagged_learning(algorithm, seed)
    assert max(mean for _, mean in rows) >= 475, rows  # it was solved
    assert second_half_mean(rows) >= HOLD, rows


OLD_IMPALA_DEFAULTS = {"lag_sgd_steps": 8, "normalize_advantages": True, "adam_beta2": 0.999}
"""IMPALA's defaults before the fix: 4 minibatches of about 500 rows per learn call at a lag of 2
(8 SGD steps between sampling and learning), standardized advantages, Adam's beta2 at 0.999."""


def first_fall(runs, hold: float, timesteps: int = TIMESTEPS) -> list[tuple[int, float]]:
    """The rows of the first of `runs` (callables returning rows) that solved the task and then
    fell below `hold` over the second half; the last one's rows if none did.

    Whether a given seed falls depends on the float rounding of the machine's kernels: the replay
    is deterministic on one CPU, but a fall is a chaotic event, and two CPUs with different vector
    units took different seeds down. Each provocation is therefore tried on the seeds that fell on
    either kind of machine measured, the one that fell on CI's first."""
    rows: list[tuple[int, float]] = []
    for run in runs:
        rows = run()
        if max(mean for _, mean in rows) >= 475 and second_half_mean(rows, timesteps) < hold:
            break
    return rows


@pytest.mark.slow
def test_the_replay_provokes_the_collapse():
    """With the old defaults the replay loses the solved policy, so the test above would catch the
    cause coming back. On CI's CPUs seeds 2, 3 and 4 fell (274, 273 and 385 over the second
    million; seeds 0 and 1 held 500), on another seed 0 fell (313)."""
    rows = first_fall(
        [lambda seed=seed: lagged_learning("IMPALA", seed, OLD_IMPALA_DEFAULTS) for seed in (2, 0)],
        HOLD,
    )
    assert max(mean for _, mean in rows) >= 475, rows
    assert second_half_mean(rows) < HOLD, rows


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed",
    # seed 2 fell with the old defaults (390 over the second half: learning_rate 1e-3, the critic
    # at the policy's step size, adam_epsilon 1e-5), seed 11 with only adam_epsilon at 1e-5
    [2, 11],
)
def test_a3c_holds_a_solved_policy_at_its_gradients_lag(seed):
    rows = lagged_gradients(seed)
    assert max(mean for _, mean in rows) >= 475, rows
    assert second_half_mean(rows, A3C_TIMESTEPS) >= A3C_HOLD, rows


@pytest.mark.slow
def test_the_gradient_replay_provokes_adams_walk():
    """At adam_epsilon 1e-5, Adam moved every weight by about the step size along the vanished
    gradients of a solved policy (norms of 0.01 and below) until it fell. On CI's CPUs the old
    defaults (also learning_rate 1e-3 and the critic at the policy's step size) took seed 2 from
    500 to 390 over the second half; on another, adam_epsilon 1e-5 alone took seed 11 to 282."""
    old_defaults = {"adam_epsilon": 1e-5, "learning_rate": 1e-3, "vf_learning_rate_ratio": 1.0}
    rows = first_fall(
        [
            lambda: lagged_gradients(2, old_defaults),
            lambda: lagged_gradients(11, {"adam_epsilon": 1e-5}),
        ],
        A3C_HOLD,
        A3C_TIMESTEPS,
    )
    assert max(mean for _, mean in rows) >= 475, rows
    assert second_half_mean(rows, A3C_TIMESTEPS) < A3C_HOLD, rows


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers, lag, seed, timesteps",
    [
        (2, 4, 0, APEX_TIMESTEPS),  # at gamma 0.99 with a memory of 100k: 383
        (12, 24, 2, 2 * APEX_TIMESTEPS),  # with a memory of 100k: 419, falling to 209
    ],
)
def test_apex_holds_a_solved_policy_at_its_replay_lag(workers, lag, seed, timesteps):
    rows = lagged_apex(seed, lag=lag, workers=workers, timesteps=timesteps)
    assert max(mean for _, mean in rows) >= 475, rows  # it was solved
    assert second_half_mean(rows, timesteps) >= APEX_HOLD, rows


@pytest.mark.slow
def test_the_apex_replay_provokes_the_drift():
    """At DQN's discount of 0.99 (and memory of 100k) the nearly greedy worker, solved, let the
    cart drift off the track. On CI's CPUs seed 0 fell at a lag of 8 sample calls (372 over the
    second half, down to 115; the defaults held 492 there), on another at a lag of 4 (383, down to
    155)."""
    old_defaults = {"gamma": 0.99, "buffer_size": 100_000}
    rows = first_fall(
        [lambda lag=lag: lagged_apex(0, old_defaults, lag=lag) for lag in (8, 4)],
        APEX_HOLD,
        APEX_TIMESTEPS,
    )
    assert max(mean for _, mean in rows) >= 475, rows
    assert second_half_mean(rows, APEX_TIMESTEPS) < APEX_HOLD, rows
