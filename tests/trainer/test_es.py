"""Evolution strategies: the shared noise table, the perturbed policies a worker acts with, the
antithetic combination into one update, the Perturbations optimizer locally and through real Ray
actors, validation, and checkpoints."""

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from pydantic import ValidationError
from test_lost_workers import NoneReady

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.optimizers.perturbations import (
    PerturbationsOptimizer,
    centered_ranks,
    weighted_noise,
)
from kuberl_trainer.policies.es import ESPolicy, ObservationStats
from kuberl_trainer.policies.evolution import noise_rows, noise_table
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, progress_rows, trainer_config

NOISE_SIZE = 100_000


def es_config(stop=None, **hyperparameters):
    return trainer_config(
        algorithm="ES",
        hyperparameters={"noise_size": NOISE_SIZE, **hyperparameters},
        stop=stop or {"timesteps": 100_000},
    )


def es_policy(env: str = "CartPole-v1", seed: int = 0, **hyperparameters) -> ESPolicy:
    made = gym.make(env)
    spaces = space_info(made.observation_space, made.action_space)
    return ESPolicy(spaces, es_config(**hyperparameters), seed)


def local_workers(config, envs: int = 4, remote: int = 0, worker_set=WorkerSet) -> WorkerSet:
    policy = algorithms.policy_class(config)

    def kwargs(index):
        return {"policy_class": policy, "config": config, "num_envs": envs, "seed": 10 * index}

    return worker_set(RolloutWorker, kwargs, num_remote=remote, cpus_per_worker=0.5)


# -- the noise table and the perturbations ------------------------------------------------------


def test_the_noise_table_is_the_same_everywhere_and_a_row_is_a_slice_of_it():
    noise = noise_table(NOISE_SIZE)
    assert noise.dtype == np.float32 and noise.shape == (NOISE_SIZE,)
    assert np.array_equal(noise, noise_table(NOISE_SIZE))
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02
    rows = noise_rows(noise, np.array([0, 7, NOISE_SIZE - 5]), 5)
    assert np.array_equal(rows[1], noise[7:12]) and np.array_equal(rows[2], noise[-5:])


def test_perturbations_come_in_antithetic_pairs_from_indices_alone():
    policy = es_policy(noise_stdev=0.1)
    noise = noise_table(NOISE_SIZE)
    indices = policy.draw_noise_indices(NOISE_SIZE, 3)
    assert indices.max() <= NOISE_SIZE - policy.num_params  # every slice fits the table
    # The same seed draws the same indices: a worker's perturbations are reproducible.
    assert np.array_equal(indices, es_policy(noise_stdev=0.1).draw_noise_indices(NOISE_SIZE, 3))

    candidates = policy.perturbed_parameters(noise, indices)
    theta = policy.flat_parameters()
    assert candidates.shape == (6, policy.num_params) and candidates.dtype == np.float32
    # What the driver rebuilds from the indices is what the worker acted with.
    eps = 0.1 * noise_rows(noise, indices, policy.num_params)
    np.testing.assert_allclose(candidates[0::2], theta + eps, rtol=1e-6)
    np.testing.assert_allclose(candidates[1::2], theta - eps, rtol=1e-6)


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_acting_with_perturbed_parameters_is_acting_with_that_network(env):
    """One batched forward pass with a parameter vector per row gives each row the actions of the
    network holding those parameters (argmax for Discrete, clipped output for Box)."""
    policy = es_policy(env, hidden_sizes=[8, 8], noise_stdev=1.0)
    noise = noise_table(NOISE_SIZE)
    candidates = policy.perturbed_parameters(noise, policy.draw_noise_indices(NOISE_SIZE, 16))
    made = gym.make(env)
    obs = encode_obs(np.stack([made.reset(seed=k)[0] for k in range(32)]), policy.spaces)
    # Some observation statistics: both paths standardize with them.
    policy.add_observation_stats(len(obs), 3 * obs.sum(0), 9 * np.square(obs).sum(0))
    batched = policy.act_perturbed(obs, candidates)
    expected = []
    for k, parameters in enumerate(candidates):
        torch.nn.utils.vector_to_parameters(torch.from_numpy(parameters), policy.model.parameters())
        expected.append(policy.compute_actions(obs[k : k + 1])[0][0])
    np.testing.assert_allclose(batched, np.array(expected), rtol=1e-5, atol=1e-6)
    assert len(np.unique(batched, axis=0)) > 1  # the perturbations do act differently


def test_a_worker_evaluates_whole_episodes_and_returns_only_indices_and_returns():
    config = es_config()
    workers = local_workers(config, envs=3)  # 2 pairs per call on 3 envs: envs take turns
    try:
        worker = workers.local_worker
        result = worker.evaluate_perturbations(noise_table(NOISE_SIZE), 5)
        assert result.noise_indices.shape == (5,)
        assert result.returns.shape == result.lengths.shape == (5, 2)
        # CartPole pays 1 per step: each return is its episode's length, a whole episode.
        np.testing.assert_array_equal(result.returns, result.lengths)
        assert result.lengths.min() >= 8 and result.lengths.max() <= 500
        # The envs start afresh after it: sampling afterwards would begin new episodes.
        assert not worker.episodes.lengths.any()
        # Statistics of every observation acted on, idle envs' included, for the standardizer.
        count, total, sumsq = result.observations
        assert count >= result.lengths.sum() and total.shape == sumsq.shape == (4,)
        assert worker.policy.take_observation_stats()[0] == 0  # reported once
    finally:
        workers.stop()


def test_observations_are_standardized_by_the_statistics_of_all_seen():
    stats = ObservationStats(2)
    obs = torch.tensor([[1.0, 10.0], [3.0, 30.0]])
    assert torch.equal(stats.normalize(obs), obs)  # nothing counted yet
    seen = np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]])
    for half in (seen[:2], seen[2:]):  # from two workers
        stats.add(len(half), half.sum(0), np.square(half).sum(0))
    expected = (obs.numpy() - seen.mean(0)) / seen.std(0)
    np.testing.assert_allclose(stats.normalize(obs).numpy(), expected, rtol=1e-6)
    far = torch.tensor([[1e6, -1e6]])
    assert stats.normalize(far).tolist() == [[5.0, -5.0]]  # clipped to 5 standard deviations


# -- the combination ----------------------------------------------------------------------------


def test_centered_ranks_span_minus_half_to_half_and_ties_share_a_rank():
    ranks = centered_ranks(np.array([[10.0, 500.0], [500.0, -3.0], [7.0, 500.0]]))
    # Sorted: -3, 7, 10, then 500 three times, sharing ranks 3, 4 and 5; scaled by 1/5.
    np.testing.assert_allclose(ranks, [[-0.1, 0.3], [0.3, -0.5], [-0.3, 0.3]])
    assert centered_ranks(np.array([1.0, 2.0])).tolist() == [-0.5, 0.5]
    assert centered_ranks(np.array([5.0, 5.0, 5.0])).tolist() == [0.0, 0.0, 0.0]


def test_antithetic_pairs_estimate_the_gradient_of_the_return():
    """Returns linear in the parameters, c . theta: the update points along c. Pairs whose two
    episodes tie add nothing, and swapping the pair's returns turns the update round."""
    dim, pairs = 50, 400
    noise = noise_table(NOISE_SIZE)
    indices = np.random.default_rng(0).integers(0, NOISE_SIZE - dim, pairs)
    direction = np.random.default_rng(1).standard_normal(dim)
    eps = noise_rows(noise, indices, dim)
    theta = np.ones(dim)
    returns = np.stack([(theta + 0.05 * eps) @ direction, (theta - 0.05 * eps) @ direction], 1)

    ranks = centered_ranks(returns)
    gradient = weighted_noise(noise, indices, ranks[:, 0] - ranks[:, 1], dim)
    cosine = gradient @ direction / (np.linalg.norm(gradient) * np.linalg.norm(direction))
    assert cosine > 0.9

    swapped = centered_ranks(returns[:, ::-1])
    np.testing.assert_allclose(
        weighted_noise(noise, indices, swapped[:, 0] - swapped[:, 1], dim), -gradient
    )
    tied = centered_ranks(np.full((pairs, 2), 500.0))
    assert not weighted_noise(noise, indices, tied[:, 0] - tied[:, 1], dim).any()


# -- the optimizer ------------------------------------------------------------------------------


def test_a_local_step_evaluates_the_batch_and_moves_the_parameters():
    config = es_config(episodes_per_batch=10)
    workers = local_workers(config, envs=4)  # 2 pairs per call: 3 calls cover 5 pairs
    try:
        optimizer = PerturbationsOptimizer(workers, config)
        theta = optimizer.policy.flat_parameters()
        result = optimizer.step()
        assert len(result.episode_returns) == 12
        assert (
            result.steps_sampled == result.episode_lengths.sum() == optimizer.counters.steps_sampled
        )
        assert not np.array_equal(optimizer.policy.flat_parameters(), theta)
        assert 0 < result.learner_stats["update_ratio"] < 1
        # The batch's observations now standardize the next one's.
        assert optimizer.policy.model.obs_stats.count >= result.steps_sampled
    finally:
        workers.stop()


def test_observations_stay_raw_without_normalization():
    config = es_config(episodes_per_batch=4, normalize_observations=False)
    workers = local_workers(config, envs=4)
    try:
        optimizer = PerturbationsOptimizer(workers, config)
        optimizer.step()
        assert optimizer.policy.model.obs_stats.count == 0
    finally:
        workers.stop()


def test_a_noise_table_too_small_for_the_network_is_an_invalid_job():
    config = es_config(noise_size=1_000, hidden_sizes=[64, 64])
    workers = local_workers(config)
    try:
        with pytest.raises(InvalidJobError, match=r"hyperparameters.noise_size: 1,000 numbers"):
            PerturbationsOptimizer(workers, config)
    finally:
        workers.stop()


def test_remote_workers_share_one_noise_table_and_the_step_waits_for_every_call(ray_local):
    config = es_config(episodes_per_batch=16)
    workers = local_workers(config, envs=2, remote=2)  # 1 pair per call, 8 calls
    calls = []
    call = workers.call
    workers.call = lambda index, method, *args: (
        calls.append((index, args)) or call(index, method, *args)
    )
    try:
        all_started(workers)
        optimizer = PerturbationsOptimizer(workers, config)
        for _ in range(2):
            result = optimizer.step()
            assert len(result.episode_returns) == 16
            assert all(not workers.in_flight(index) for index in workers.healthy_indices)
        assert len(calls) == 16 and {index for index, _ in calls} == {1, 2}
        # One object in the object store, named by every call; never the array itself.
        assert isinstance(optimizer._noise_ref, ray.ObjectRef)
        assert all(noise is optimizer._noise_ref for _, (noise, _) in calls)
    finally:
        workers.stop()


def test_the_local_worker_evaluates_while_no_remote_worker_is_ready(ray_local):
    config = es_config(episodes_per_batch=8)
    workers = local_workers(config, envs=4, worker_set=NoneReady)
    try:
        result = PerturbationsOptimizer(workers, config).step()
        assert len(result.episode_returns) == 8 and result.steps_sampled > 0
    finally:
        workers.stop()


# -- validation and checkpoints ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"hyperparameters": {"episodes_per_batch": 51}}, "51 is odd: every perturbation"),
        ({"hyperparameters": {"gamma": 0.9}}, "gamma\n  Extra inputs are not permitted"),
        (
            {"optimizer": "SyncSamples"},
            "SyncSamples cannot drive ES: it learns on a fresh batch from every worker, but ES "
            "learns from the returns of perturbed copies of its parameters; compatible: "
            "Perturbations",
        ),
        (
            {"algorithm": "PPO", "optimizer": "Perturbations", "hyperparameters": {}},
            "Perturbations cannot drive PPO: it steps the parameters by the returns of perturbed "
            "copies of them",
        ),
        (
            {"optimizerConfig": {"sampleTimeoutSeconds": 5}},
            "used by LocalMultiGPU, SyncReplay, SyncSamples only, and this job runs Perturbations",
        ),
    ],
)
def test_invalid_es_jobs_are_rejected_naming_the_field(fields, message):
    with pytest.raises(ValidationError) as error:
        trainer_config(**{"algorithm": "ES", **fields})
    assert message in str(error.value)


def test_a_resumed_run_continues_from_the_saved_parameters_and_adam_state(tmp_path, monkeypatch):
    def run(iterations):
        config = es_config({"iterations": iterations}, episodes_per_batch=8)
        return Driver(config, RolloutConfig(envs_per_worker=4), tmp_path, "job")

    first = run(2)
    first_result = first.run()
    saved = first.store.latest({"algorithm": "ES", "env": "CartPole-v1"}).state

    policies = []
    original = PerturbationsOptimizer.step

    def step(optimizer):  # the policy as the resumed run starts its first step
        policies.append(optimizer.policy.get_state())
        return original(optimizer)

    monkeypatch.setattr(PerturbationsOptimizer, "step", step)
    result = run(3).run()
    assert result.resumed_from == first_result.checkpoint and result.iteration == 3
    for name, weight in saved["policy"]["weights"].items():
        np.testing.assert_array_equal(policies[0]["weights"][name], weight)
    restored_adam = policies[0]["optimizer"]
    assert restored_adam["state"][0]["step"] == 2  # two Adam steps before the checkpoint
    assert restored_adam["param_groups"][0]["weight_decay"] == 0.005
    rows = progress_rows(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[-1]["timesteps_total"] > rows[1]["timesteps_total"]
    assert {"update_ratio", "weights_norm", "gradient_norm"} <= rows[-1].keys()
