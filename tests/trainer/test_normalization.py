"""spec.trainer.normalization: running statistics merged exactly across rollout workers, sent with
the weights, saved in checkpoints, frozen in evaluation; VecNormalize's reward scaling; Box
observations only; and PPO still learning with it."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from kuberl_cli.validate import check_manifest
from kuberl_contract.config import ALGORITHMS, NormalizationConfig, RolloutConfig
from kuberl_operator.validation import load_rljob
from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.normalization import NormalizationStats, Normalizer, RunningMeanStd
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.trainer import Trainer
from kuberl_trainer.optimizers.sync_samples import SyncSamplesOptimizer
from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config

ON = {"observations": True, "rewards": True}
EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"


def ppo(**fields):
    fields = {
        "algorithm": "PPO",
        "hyperparameters": {"rollout_length": 16, "num_epochs": 1},
        "normalization": ON,
        **fields,
    }
    return trainer_config(**fields)


def assert_stats_of(stats: RunningMeanStd, rows: np.ndarray) -> None:
    assert stats.count == len(rows)
    np.testing.assert_allclose(stats.mean, rows.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(stats.var, rows.var(axis=0), rtol=1e-6, atol=1e-6)


def test_three_workers_merged_equal_one_stream():
    rng = np.random.default_rng(0)
    stream = rng.normal([1.0, -3.0, 50.0], [0.5, 2.0, 10.0], size=(1000, 3))
    workers = [RunningMeanStd((3,)) for _ in range(3)]
    # Uneven batches, in turn: each worker sees its own share of the stream.
    for start, stop in zip([0, 7, 200, 201, 650], [7, 200, 201, 650, 1000], strict=True):
        workers[start % 3].update(stream[start:stop])
    merged = RunningMeanStd((3,))
    for worker in workers:  # as the driver does: each worker's delta as plain data
        merged.merge(RunningMeanStd.from_state(worker.state()))
    assert_stats_of(merged, stream)

    # the order of merging does not matter, nor does merging into statistics already there
    other = RunningMeanStd.from_state(workers[2].state())
    other.merge(workers[0])
    other.merge(workers[1])
    np.testing.assert_allclose(other.mean, merged.mean, rtol=1e-12)
    np.testing.assert_allclose(other.m2, merged.m2, rtol=1e-9)


def recording(worker: RolloutWorker, seen: list[np.ndarray]) -> RolloutWorker:
    """The worker, with every observation its envs return on a step recorded in `seen`."""
    step = worker.envs.step

    def recorded_step(actions):
        result = step(actions)
        seen.append(np.asarray(result[0], dtype=np.float32).reshape(len(result[0]), -1))
        return result

    worker.envs.step = recorded_step
    return worker


def test_the_driver_merges_exactly_what_the_workers_sampled():
    """Three rollout workers (in this process) sample; the driver's statistics, their deltas
    merged, are those of every observation the workers' envs returned, and of every discounted
    return."""
    config = ppo()
    seen: list[np.ndarray] = []
    workers = [
        recording(RolloutWorker(PPOPolicy, config, num_envs=3, seed=i, worker_index=i), seen)
        for i in (1, 2, 3)
    ]
    driver = Normalizer(config.normalization, 4, 1, 0.99, keeps_global=True)
    steps = 0
    for _ in range(3):
        for worker in workers:
            batch = worker.sample()
            steps += batch.env_steps
            driver.merge(batch.normalization)
        for worker in workers:  # the sync: every worker acts with the same statistics
            worker.set_weights(worker.get_weights(), 0, driver.stats.state())
    assert_stats_of(driver.stats.obs, np.concatenate(seen))
    assert driver.stats.returns.count == steps  # a return per env step, none per reset step
    for worker in workers:
        assert worker.normalizer.stats.state()["obs"]["count"] == driver.stats.obs.count


def received_statistics(ray, workers: WorkerSet) -> list[dict]:
    """The global statistics each remote worker last received."""
    return ray.get(
        [
            handle.__ray_call__.remote(lambda worker: worker.normalizer.stats.state())
            for handle in workers.remote_workers
        ]
    )


def test_statistics_travel_with_the_weights_to_remote_workers(ray_local):
    config = ppo()

    def kwargs(index):
        return {
            "policy_class": PPOPolicy,
            "config": config,
            "num_envs": 2,
            "seed": index,
            "worker_index": index,
            "num_workers": 2,
        }

    workers = WorkerSet(RolloutWorker, kwargs, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        optimizer = SyncSamplesOptimizer(workers, config)
        optimizer.step()
        driver = workers.normalization.state()
        assert driver["obs"]["count"] == 2 * 2 * 16  # every observation both workers' envs returned
        optimizer.step()  # its sync sends the statistics above
        for state in received_statistics(ray_local, workers):
            for part in ("obs", "returns"):
                assert state[part]["count"] == driver[part]["count"]
                np.testing.assert_array_equal(state[part]["mean"], driver[part]["mean"])
                np.testing.assert_array_equal(state[part]["m2"], driver[part]["m2"])
        assert workers.normalization.state()["obs"]["count"] >= 2 * driver["obs"]["count"]
    finally:
        workers.stop()


@pytest.mark.parametrize(
    "algorithm, optimizer, hyperparameters",
    [
        ("PPO", "AsyncSamples", {"rollout_length": 16, "num_epochs": 1}),
        ("A3C", "AsyncGradients", {"rollout_length": 16}),
        ("APEX", "AsyncReplay", {"rollout_length": 16, "learning_starts": 32}),
    ],
)
def test_asynchronous_optimizers_send_the_statistics_with_their_weights(
    ray_local, algorithm, optimizer, hyperparameters
):
    """Each remote worker comes to normalize with global statistics of the samples, which only
    the weights' path brings it."""
    config = trainer_config(
        algorithm=algorithm,
        optimizer=optimizer,
        hyperparameters=hyperparameters,
        normalization=ON,
    )
    rollout = RolloutConfig(replicas=2, envs_per_worker=2, cpus_per_worker=0.5)
    trainer = Trainer(config, rollout, seed=0)
    trainer.build()
    try:
        workers = trainer.optimizer.workers
        all_started(workers)
        for _ in range(20):
            trainer.step()
            received = received_statistics(ray_local, workers)
            if len(received) == 2 and all(state["obs"]["count"] > 0 for state in received):
                break
        else:
            pytest.fail(f"a remote worker never received statistics: {received}")
        driver = workers.normalization.state()
        for state in received:
            assert 0 < state["obs"]["count"] <= driver["obs"]["count"]
            assert 0 < state["returns"]["count"] <= driver["returns"]["count"]
        assert trainer.state()["normalization"]["obs"]["count"] == driver["obs"]["count"]
    finally:
        trainer.stop()


LOCAL_PAIRS = [
    (name, optimizer.value)
    for name, row in ALGORITHMS.items()
    for optimizer in row.optimizers
    if optimizer.value not in ("AsyncReplay", "Perturbations")  # remote actors; no samples
]


@pytest.mark.parametrize(
    "algorithm, optimizer", LOCAL_PAIRS, ids=[f"{a}/{o}" for a, o in LOCAL_PAIRS]
)
def test_every_optimizer_trains_with_normalization_in_the_driver(tmp_path, algorithm, optimizer):
    """Without remote workers the local worker samples into the global statistics; a couple of
    iterations of every algorithm on every optimizer that runs without Ray."""
    continuous = ALGORITHMS[algorithm].continuous_actions_only
    hyperparameters = {"rollout_length": 8}
    if "learning_starts" in ALGORITHMS[algorithm].hyperparameters.model_fields:
        hyperparameters |= {"learning_starts": 16, "batch_size": 16}
    config = trainer_config(
        algorithm=algorithm,
        env="Pendulum-v1" if continuous else "CartPole-v1",
        optimizer=optimizer,
        stop={"iterations": 3},
        hyperparameters=hyperparameters,
        normalization=ON,
    )
    gpus = 2 if optimizer == "LocalMultiGPU" else 0  # CPU towers where no GPU is visible
    trainer = Trainer(config, RolloutConfig(envs_per_worker=2), seed=0, learner_gpus=gpus)
    trainer.build()
    try:
        for _ in range(3):
            row, _, _ = trainer.step()
        state = trainer.state()["normalization"]
        assert state["obs"]["count"] >= 3 * 2 * 8  # every observation of 3 windows of 2 envs
        assert state["returns"]["count"] > 0
        assert row["timesteps_total"] > 0
    finally:
        trainer.stop()


def test_statistics_survive_a_checkpoint_and_resume(tmp_path, monkeypatch):
    import kuberl_trainer.job.driver as driver_module

    loaded = []
    real_load_state = driver_module.Trainer.load_state

    def recording_load_state(self, state):
        real_load_state(self, state)
        loaded.append(self.optimizer.workers.normalization.state())

    saved = []
    real_state = driver_module.Trainer.state

    def recording_state(self):
        state = real_state(self)
        saved.append(state["normalization"])
        return state

    monkeypatch.setattr(driver_module.Trainer, "load_state", recording_load_state)
    monkeypatch.setattr(driver_module.Trainer, "state", recording_state)

    def run(iterations):
        config = ppo(stop={"iterations": iterations}, checkpoint={"everyIterations": 2})
        return Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    first = run(2)
    assert first.checkpoint is not None and saved
    at_checkpoint = saved[-1]
    assert at_checkpoint["obs"]["count"] > 0
    second = run(3)
    assert second.resumed_from == first.checkpoint
    (restored,) = loaded
    for part in ("obs", "returns"):
        assert restored[part]["count"] == at_checkpoint[part]["count"]
        np.testing.assert_array_equal(restored[part]["mean"], at_checkpoint[part]["mean"])
        np.testing.assert_array_equal(restored[part]["m2"], at_checkpoint[part]["m2"])


def test_evaluation_leaves_the_statistics_alone():
    config = ppo()
    workers = WorkerSet(
        RolloutWorker,
        lambda index: {"policy_class": PPOPolicy, "config": config, "num_envs": 2, "seed": 0},
        num_remote=0,
    )
    try:
        local = workers.local_worker
        local.sample()
        # Every feature's mean far above CartPole's: a normalized observation is -clip.
        state = workers.normalization.state()
        state["obs"]["mean"] = np.full(4, 1e3)
        workers.normalization.load(state)
        before = workers.normalization.state()
        acted_on = []
        act = local.acting_policy.compute_actions

        def recording_act(obs, explore=True):
            acted_on.append(obs)
            return act(obs, explore)

        local.acting_policy.compute_actions = recording_act
        local.evaluate(2, seed=0)
        after = workers.normalization.state()
        assert after["obs"]["count"] == before["obs"]["count"] > 0
        np.testing.assert_array_equal(after["obs"]["m2"], before["obs"]["m2"])
        assert after["returns"]["count"] == before["returns"]["count"]
        assert local.normalizer.delta.obs.count == 0  # nothing counted for later either
        # evaluation acts on observations normalized with the global statistics
        assert (np.concatenate(acted_on) == -config.normalization.clip_observations).all()
    finally:
        workers.stop()


def test_reward_scaling_is_vecnormalizes_on_a_hand_computed_sequence():
    """Two envs, gamma 0.5; env 0's episode ends on step 1 and its step 2 only resets it."""
    config = ppo(normalization={"rewards": True, "clipRewards": 3}).normalization
    normalizer = Normalizer(config, 1, 2, gamma=0.5)
    rewards = np.array([[1.0, 2.0], [4.0, 0.0], [0.0, 8.0]], dtype=np.float32)
    dones = np.array([[False, False], [True, False], [False, False]])
    valid = np.array([[True, True], [True, True], [False, True]])
    # return = return * gamma + reward, reset to 0 after a done, a reset step not counted:
    # env 0: 1, 0.5 + 4 = 4.5, (reset step); env 1: 2, 1 + 0 = 1, 0.5 + 8 = 8.5
    returns = np.array([1.0, 2.0, 4.5, 1.0, 8.5])
    scaled = normalizer.scale_rewards(rewards, dones, valid)
    # the global statistics are still empty: variance 1, reward / sqrt(1 + 1e-8)
    np.testing.assert_allclose(scaled, np.clip(rewards / np.sqrt(1 + 1e-8), -3, 3), rtol=1e-6)
    delta = NormalizationStats.from_state(normalizer.take_delta())
    assert_stats_of(delta.returns, returns)
    assert delta.obs.count == 0  # observations not normalized: not counted

    normalizer.stats.merge(delta)  # as the driver merges it and sends it back
    std = np.sqrt(returns.var() + 1e-8)
    expected = np.clip(rewards / std, -3, 3)
    np.testing.assert_allclose(normalizer.scaled(rewards), expected, rtol=1e-6)
    assert normalizer.scaled(np.array([100.0]))[0] == 3  # clipped to clipRewards


def test_normalization_agrees_with_stable_baselines3():
    """VecNormalize itself on the same observations and rewards (one env, an episode ending
    half-way): the same statistics, but for its prior count of 1e-4, the same normalized
    observation and the same scaled reward."""
    sb3 = pytest.importorskip("stable_baselines3.common.vec_env")
    import gymnasium as gym

    rewards = [1.0, -2.0, 0.5, 3.0, 3.0, -1.0]
    observations = np.array([[0.5, 2.0], [1.0, -1.0], [3.0, 0.0], [-2.0, 4.0], [0.0, 1.0], [1, 7]])
    dones = [False, False, True, False, False, False]

    class Scripted(gym.Env):
        observation_space = gym.spaces.Box(-10, 10, (2,))
        action_space = gym.spaces.Discrete(2)
        t = 0

        def reset(self, *, seed=None, options=None):
            return np.array([1.0, 1.0], np.float32), {}  # also after the episode's end

        def step(self, action):
            self.t += 1
            i = self.t - 1
            return observations[i].astype(np.float32), rewards[i], dones[i], False, {}

    venv = sb3.VecNormalize(sb3.DummyVecEnv([Scripted]), gamma=0.9)
    venv.reset()
    for _ in rewards:
        venv.step(np.array([0]))

    config = ppo(normalization=ON).normalization
    normalizer = Normalizer(config, 2, 1, gamma=0.9)
    # What VecNormalize counted: the first reset's observation, then each step's, where SB3's
    # VecEnv hands back the next episode's first observation in place of an episode's last.
    seen = observations.copy()
    seen[2] = [1.0, 1.0]
    normalizer.observe(np.array([[1.0, 1.0]]))
    normalizer.observe(seen)
    column = np.array(rewards, dtype=np.float32)[:, None]
    normalizer.scale_rewards(column, np.array(dones)[:, None], np.ones_like(column, bool))
    normalizer.stats.merge(normalizer.take_delta())
    ours = normalizer.stats
    for mine, theirs in ((ours.obs, venv.obs_rms), (ours.returns, venv.ret_rms)):
        np.testing.assert_allclose(mine.mean, theirs.mean, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(mine.var, theirs.var, rtol=1e-3)
    probe = np.array([[2.0, -3.0]], dtype=np.float32)
    np.testing.assert_allclose(
        normalizer.normalize_obs(probe), venv.normalize_obs(probe), rtol=1e-3
    )
    np.testing.assert_allclose(
        normalizer.scaled(np.array([2.5])), venv.normalize_reward(np.array([2.5])), rtol=1e-3
    )


def test_discrete_observations_are_rejected_naming_the_field():
    config = trainer_config(
        algorithm="PPO", env="custom_envs:Corridor", normalization={"observations": True}
    )
    with pytest.raises(EnvError, match=r"normalization\.observations: .*Discrete\(5\)"):
        RolloutWorker(PPOPolicy, config, num_envs=1, seed=0)
    manifest = yaml.safe_dump(
        {
            "apiVersion": "kuberl.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "corridor"},
            "spec": {"trainer": config.model_dump(by_alias=True, exclude_defaults=True)},
        }
    )
    _, problems = check_manifest(manifest)
    assert [problem.path for problem in problems] == ["spec.trainer.normalization.observations"]
    assert "Discrete(5)" in problems[0].message
    population = yaml.safe_load(manifest)
    trainer = population["spec"]["trainer"]
    population["spec"]["trainer"] = {
        "algorithm": "PBT",
        "env": trainer.pop("env"),
        "stop": trainer.pop("stop"),
        "trainer": trainer,
    }
    _, problems = check_manifest(yaml.safe_dump(population))
    assert [problem.path for problem in problems] == [
        "spec.trainer.trainer.normalization.observations"
    ]
    # rewards alone are scaled whatever the observations
    rewards_only = trainer_config(
        algorithm="PPO", env="custom_envs:Corridor", normalization={"rewards": True}
    )
    RolloutWorker(PPOPolicy, rewards_only, num_envs=1, seed=0).close()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"algorithm": "ES"}, "normalization: ES learns from the returns of whole episodes"),
        (
            {"algorithm": "PBT", "trainer": {"algorithm": "PPO"}},
            "normalization: PBT normalizes nothing itself; set normalization in trainer",
        ),
    ],
)
def test_algorithms_that_cannot_normalize_say_so(fields, message):
    with pytest.raises(ValidationError, match=message):
        trainer_config(normalization={"observations": True}, **fields)


def test_off_by_default_keeps_no_statistics():
    config = trainer_config(algorithm="PPO", hyperparameters={"rollout_length": 8})
    assert not config.normalization.enabled
    worker = RolloutWorker(PPOPolicy, config, num_envs=2, seed=0)
    batch = worker.sample()
    assert batch.normalization is None
    raw = batch.columns["obs"]
    assert np.abs(raw).max() < 10  # CartPole's own observations, as they came


@pytest.mark.slow
def test_ppo_with_normalization_solves_cartpole_within_the_examples_budget(tmp_path):
    """The PPO example (test_learning's budget: 475 within 100k env steps) with observations
    normalized and rewards scaled. Seeds 0-3 reached 475 at 16k-44k env steps (seed 0: 29k),
    where the example without normalization took 27k-41k (seed 0: 38k)."""
    job = load_rljob(EXAMPLES / "cartpole-ppo.yaml")
    config = job.spec.trainer.model_copy(update={"normalization": NormalizationConfig(**ON)})
    result = Driver(config, job.spec.rollout_workers, tmp_path, job.name).run()
    assert result.stopped_by == "episodeReturnMean>=475", result
    assert result.timesteps <= 100_000
