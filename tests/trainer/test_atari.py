"""Atari through ale-py's native vector env: uint8 frame stacks from the env to the learner and
the replay buffer (through Ray's object store too), full-game episode statistics, a CNN learn
step of every algorithm family, and a checkpoint written on Pong that resumes."""

from __future__ import annotations

import numpy as np
import pytest

from kuberl_contract.config import ALGORITHMS, RolloutConfig
from kuberl_trainer.envs.atari import LIFE_LOST, RAW_REWARD
from kuberl_trainer.envs.making import make_vector_env
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.optimizers.sync_replay import SyncReplayOptimizer
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import trainer_config

pytest.importorskip("ale_py", reason="ale-py is installed with the trainer")

PONG = "ALE/Pong-v5"
ONE_THREAD = {"num_threads": 1}  # ale-py's own stepping threads: one per worker on 2 cores
FRAME_STACK = (4, 84, 84)


def atari_config(algorithm: str, env: str = PONG, env_config=None, **fields):
    """A small job on ale-py's vector env (or, with wrappers, on single envs)."""
    hyperparameters = {"rollout_length": 8, **fields.pop("hyperparameters", {})}
    if algorithm in ("DQN", "APEX"):
        hyperparameters |= {"buffer_size": 2_000, "learning_starts": 16, "batch_size": 16}
    if algorithm == "PPO":
        hyperparameters |= {"num_epochs": 1, "minibatch_size": 16}
    return trainer_config(
        algorithm=algorithm,
        env=env,
        envConfig={**({} if "wrappers" in fields else ONE_THREAD), **(env_config or {})},
        hyperparameters=hyperparameters,
        **fields,
    )


def test_ale_ids_are_known_and_made_natively_vectorized():
    assert env_problem(PONG, ONE_THREAD) is None
    envs = make_vector_env(PONG, ONE_THREAD, 3)
    try:
        obs, _ = envs.reset(seed=0)
        assert (obs.dtype, obs.shape) == (np.uint8, (3, *FRAME_STACK))
        assert type(envs.unwrapped).__name__ == "AtariVectorEnv"
        _, rewards, _, _, info = envs.step(np.zeros(3, dtype=np.int64))
        assert info[RAW_REWARD].shape == rewards.shape == (3,)
    finally:
        envs.close()
    problem = env_problem("ALE/Pongg-v5", {})
    assert problem.field == "env" and "did you mean 'ALE/Pong-v5'" in problem.message


def test_the_per_env_path_takes_gymnasiums_atari_wrappers():
    wrappers = [
        {"name": "AtariPreprocessing", "kwargs": {"frame_skip": 4}},
        {"name": "FrameStackObservation", "kwargs": {"stack_size": 4}},
    ]
    # AtariPreprocessing skips frames itself: the env is made without
    config = atari_config("PPO", env_config={"frameskip": 1}, wrappers=wrappers)
    worker = RolloutWorker(policy_class(config), config, num_envs=2, seed=0)
    try:
        batch = worker.sample()
        assert (batch.columns["obs"].dtype, batch.columns["obs"].shape[1:]) == (
            np.uint8,
            FRAME_STACK,
        )
    finally:
        worker.close()


def test_frames_stay_uint8_through_the_object_store_into_the_replay_buffer(ray_local):
    config = atari_config("DQN", hyperparameters={"gradient_steps": 1})
    workers = WorkerSet(
        RolloutWorker,
        lambda i: dict(policy_class=policy_class(config), config=config, num_envs=2, seed=i),
        1,
        cpus_per_worker=0.5,
    )
    try:
        optimizer = SyncReplayOptimizer(workers, config)
        batch = ray_local.get(workers.remote_workers[0].sample.remote(), timeout=120)
        assert batch.columns["obs"].dtype == batch.columns["next_obs"].dtype == np.uint8
        assert batch.columns["obs"].shape[1:] == FRAME_STACK
        while optimizer.policy.num_gradient_steps == 0 or len(optimizer.buffer) < 400:
            optimizer.step()
        buffer = optimizer.buffer
        assert set(buffer.packed) == {"obs", "next_obs"}  # kept LZ4-compressed
        replayed = buffer.sample(16)
        assert replayed["obs"].dtype == replayed["next_obs"].dtype == np.uint8
        assert replayed["obs"].shape[1:] == replayed["next_obs"].shape[1:] == FRAME_STACK
        # A million transitions in a few GB, where arrays of them would take 56 GB (28 GB as
        # uint8 obs alone): Pong's frames compress to about 1 KB per transition.
        per_transition = buffer.nbytes / len(buffer)
        assert per_transition * 1_000_000 < 3e9, f"{per_transition:.0f} bytes per transition"
    finally:
        workers.stop()


@pytest.mark.parametrize(
    "algorithm", [name for name, row in ALGORITHMS.items() if row.image_observations]
)
def test_a_cnn_policy_of_every_family_takes_a_learn_step_on_pong(algorithm):
    config = atari_config(algorithm)
    worker = RolloutWorker(policy_class(config), config, num_envs=2, seed=0)
    try:
        batch = worker.sample()
        assert batch.columns["obs"].dtype == np.uint8
        first_conv = next(worker.policy.model.parameters())
        assert first_conv.dim() == 4  # the Nature CNN's first convolution
        stats = worker.policy.learn_on_batch(batch)
        assert all(np.isfinite(value) for value in stats.values()), stats
        assert first_conv.grad is not None  # the frames went through it into the loss
    finally:
        worker.close()


def test_episode_statistics_are_the_full_games_with_life_loss_terminations():
    """Breakout has 5 lives; with life_loss_info the learner sees a termination at each lost
    life, the game goes on without a reset, and the statistics count whole games."""
    config = atari_config(
        "PPO",
        env="ALE/Breakout-v5",
        env_config={"repeat_action_probability": 0.0, "life_loss_info": True},
    )
    envs = make_vector_env(config.env, config.env_config, 1)
    envs.reset(seed=0)
    lives_lost, steps = 0, 0
    while True:  # FIRE and stand still: each ball is lost, five in a game
        _, _, terminated, _, info = envs.step(np.ones(1, dtype=np.int64))
        steps += 1
        if info[LIFE_LOST][0]:
            lives_lost += 1
        elif terminated[0]:
            break
    envs.close()
    assert lives_lost == 4  # the fifth ends the game: a reset follows

    # The same games played by workers with and without life_loss_info (seeded alike, acting on
    # the same frames): the same statistics, more terminations where lives count
    def games(life_loss_info: bool):
        worker_config = atari_config(
            "DQN",
            env="ALE/Breakout-v5",
            env_config={"repeat_action_probability": 0.0, "life_loss_info": life_loss_info},
            model={"encoder": "mlp"},
            hyperparameters={"rollout_length": 128, "hidden_sizes": [4]},
        )
        worker = RolloutWorker(policy_class(worker_config), worker_config, num_envs=2, seed=3)
        returns, lengths, terminations = [], [], 0
        try:
            while len(returns) < 3:
                batch = worker.sample()
                returns += batch.episode_returns.tolist()
                lengths += batch.episode_lengths.tolist()
                # one-step transitions: no bootstrapping exactly where the episode terminated
                terminations += int((batch.columns["bootstrap_discounts"] == 0).sum())
            return returns[:3], lengths[:3], terminations
        finally:
            worker.close()

    *with_lives, lost_lives = games(life_loss_info=True)
    *without, game_ends = games(life_loss_info=False)
    assert with_lives == without
    assert lost_lives > game_ends


def test_the_statistics_sum_the_games_score_while_the_learner_gets_clipped_rewards():
    def rewards_and_returns(clipping: bool):
        envs = make_vector_env(
            "ALE/SpaceInvaders-v5", {**ONE_THREAD, "reward_clipping": clipping}, 2
        )
        envs.reset(seed=0)
        learner, game = [], []
        for _ in range(300):
            _, reward, _, _, info = envs.step(np.array([1, 1]))  # fire, fire, fire
            learner.append(reward.copy())
            game.append(info[RAW_REWARD].copy())
        envs.close()
        return np.array(learner), np.array(game)

    clipped, score = rewards_and_returns(True)
    unclipped, same_score = rewards_and_returns(False)
    np.testing.assert_array_equal(score, same_score)
    np.testing.assert_array_equal(unclipped, score)
    assert score.max() > 1  # aliens are worth 5 to 30 points
    np.testing.assert_array_equal(clipped, np.sign(score))


@pytest.mark.slow
def test_a_checkpoint_written_on_pong_resumes(tmp_path):
    def run(iterations: int):
        config = atari_config(
            "PPO",
            stop={"iterations": iterations},
            checkpoint={"everyIterations": 1, "keep": 2},
        )
        return Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "pong").run()

    first = run(2)
    assert first.checkpoint is not None
    second = run(3)
    assert second.resumed_from == first.checkpoint
    assert (second.iteration, second.timesteps > first.timesteps) == (3, True)


@pytest.fixture
def ale_kwargs(monkeypatch) -> list[dict]:
    """The keyword arguments of every ale-py vector env made from now on (made for real)."""
    from kuberl_trainer.envs import atari

    made = []
    make_vec = atari.gym.make_vec
    monkeypatch.setattr(
        atari.gym, "make_vec", lambda *a, **kw: made.append(kw) or make_vec(*a, **kw)
    )
    return made


@pytest.mark.parametrize(
    ("env_config", "cpus", "threads"),
    [({}, 1, 1), ({}, 2, 2), ({}, 8, 4), ({"num_threads": 3}, 1, 3), ({}, None, "usable")],
)
def test_ale_steps_on_as_many_threads_as_the_worker_has_cpus(ale_kwargs, env_config, cpus, threads):
    """ale-py's default is a thread per core of the machine: a worker of 1 CPU on a big node
    would get dozens. The caller's CPUs are the default instead (never more than its envs), the
    process's usable CPUs where the caller does not say, and envConfig's num_threads wins."""
    from kuberl_trainer.cpu_quota import usable_cpus

    make_vector_env(PONG, env_config, 4, cpus=cpus).close()
    assert ale_kwargs[0]["num_threads"] == (min(4, usable_cpus()) if cpus is None else threads)


def test_a_remote_worker_of_one_cpu_steps_ale_on_one_thread(ale_kwargs):
    config = atari_config("PPO").model_copy(update={"env_config": {}})
    RolloutWorker(policy_class(config), config, 4, seed=0, cpus=1).envs.close()
    assert [kwargs["num_threads"] for kwargs in ale_kwargs] == [1]
