"""The spaces real envs use (MultiDiscrete, MultiBinary, Dict and Tuple observations, nested;
MultiDiscrete actions) and action masks (PettingZoo's `action_mask`), end to end: encoded flat
with the mask last, sampled, learned from, replayed, evaluated, predicted on the env's own
observations, exported and recorded; illegal actions never taken by any acting path."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from masked_envs import PickTheTarget

from kuberl_contract.config import ModelConfig, RolloutConfig, frozen
from kuberl_trainer.envs.encoding import encode_structured
from kuberl_trainer.envs.making import EnvError, make_vector_env
from kuberl_trainer.envs.normalization import make_normalizer
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.envs.space_record import space_from_record, space_kind, spaces_record
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.policies.acting import ActingDQNPolicy, ActingPolicy
from kuberl_trainer.policies.distributions import ILLEGAL, EpsilonGreedy, MultiCategorical
from kuberl_trainer.policies.dqn import DQNPolicy
from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.trained.export import export
from kuberl_trainer.trained.inference import load
from testkit import progress_rows, trainer_config

MASKED = "masked_envs:PickTheTarget"
MASKED_MULTI = "masked_envs:PickTheTargets"
EVERY_SPACE = "masked_envs:EverySpace"
SMALL = {"hidden_sizes": [32, 32]}
ON_POLICY = {**SMALL, "rollout_length": 16}

pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.load` is deprecated:DeprecationWarning"
)


def spaces_of(env: str, **env_config):
    envs = make_vector_env(env, env_config, 2)
    try:
        return envs, space_info(envs.single_observation_space, envs.single_action_space)
    finally:
        envs.close()


# -- encoding and describing the spaces ---------------------------------------------------------


def test_structured_observations_are_flat_in_the_spaces_order_with_the_mask_last():
    space = gym.spaces.Dict(
        {
            "md": gym.spaces.MultiDiscrete([3, 2], start=[1, 0]),
            "action_mask": gym.spaces.MultiBinary(3),
            "t": gym.spaces.Tuple((gym.spaces.Discrete(2, start=5), gym.spaces.Box(-1, 1, (2,)))),
            "mb": gym.spaces.MultiBinary(2),
        }
    )
    obs = {
        "md": np.array([[3, 0]]),
        "action_mask": np.array([[1, 0, 1]], dtype=np.int8),
        "t": (np.array([6]), np.array([[0.5, -0.25]], dtype=np.float32)),
        "mb": np.array([[0, 1]], dtype=np.int8),
    }
    encoded = encode_structured(space, obs)
    # gymnasium sorts a Dict's keys: mb, md (3 - 1 of 3, 0 of 2), t (6 - 5 of 2, the Box), then
    # the mask last
    mb, md, t, mask = [0, 1], [0, 0, 1, 1, 0], [0, 1, 0.5, -0.25], [1, 0, 1]
    expected = [*mb, *md, *t, *mask]
    np.testing.assert_array_equal(encoded, np.array([expected], dtype=np.float32))
    info = space_info(space, gym.spaces.Discrete(3))
    assert (info.obs_dim, info.feature_dim, info.action_mask_n) == (14, 11, 3)


def test_an_env_with_every_structured_space_encodes_its_vector_observations():
    envs = make_vector_env(EVERY_SPACE, {}, 3)
    try:
        info = space_info(envs.single_observation_space, envs.single_action_space)
        encoded = encode_obs(envs.reset(seed=0)[0], info)
    finally:
        envs.close()
    assert encoded.shape == (3, 3 + 4 + 3 + 3 + 2 + 2) and encoded.dtype == np.float32
    assert info.action_mask_n is None


def test_a_dict_holding_an_image_refuses_the_cnn_naming_model_encoder():
    space = gym.spaces.Dict({"frame": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})
    with pytest.raises(EnvError) as raised:
        space_info(space, gym.spaces.Discrete(2), ModelConfig(encoder="cnn"))
    assert raised.value.field == "model.encoder"
    assert space_info(space, gym.spaces.Discrete(2)).obs_dim == 192  # flat for the MLP


def test_a_mask_that_does_not_fit_the_actions_is_refused():
    space = gym.spaces.Dict({"x": gym.spaces.Discrete(2), "action_mask": gym.spaces.MultiBinary(4)})
    with pytest.raises(EnvError, match="does not fit the action space"):
        space_info(space, gym.spaces.Discrete(3))
    with pytest.raises(EnvError, match="Box actions"):
        space_info(space, gym.spaces.Box(-1, 1, (4,)))
    assert space_info(space, gym.spaces.MultiDiscrete([2, 2])).action_mask_n == 4


def test_validation_refuses_multidiscrete_actions_for_q_learning_and_takes_them_for_ppo():
    problem = env_problem(MASKED_MULTI, {}, discrete_actions_only=True)
    assert problem is not None and problem.field == "env" and "MultiDiscrete" in problem.message
    assert env_problem(MASKED_MULTI, {}) is None
    assert env_problem(EVERY_SPACE, {}, normalize_observations=True) is None
    with pytest.raises(EnvError, match="MultiDiscrete"):
        DQNPolicy(spaces_of(MASKED_MULTI)[1], trainer_config(algorithm="DQN", env=MASKED_MULTI), 0)


@pytest.mark.parametrize("env", [EVERY_SPACE, MASKED, MASKED_MULTI])
def test_the_new_spaces_are_recorded_and_rebuilt(env):
    envs, _ = spaces_of(env)
    observation, action = envs.single_observation_space, envs.single_action_space
    record = json.loads(json.dumps(spaces_record(observation, action)))
    rebuilt = space_from_record(record["observation"]), space_from_record(record["action"])
    assert rebuilt == (observation, action)
    assert list(rebuilt[0].spaces) == list(observation.spaces)  # the order the encoding follows
    assert space_kind(rebuilt[0]) == space_kind(observation)


def test_a_recorded_space_from_anywhere_is_checked():
    deep: dict = {"type": "MultiBinary", "shape": [1]}
    for _ in range(10):
        deep = {"type": "Tuple", "spaces": [deep]}
    for record, message in [
        (deep, "nest more than"),
        ({"type": "Dict", "spaces": [["a", {"type": "Discrete", "n": 2, "start": 0}]] * 2}, "keys"),
        ({"type": "MultiDiscrete", "shape": [2], "nvec": [0, 2], "start": [0, 0]}, "nvec"),
        ({"type": "MultiBinary", "shape": [1 << 25]}, "values"),
    ]:
        with pytest.raises(ValueError, match=message):
            space_from_record(record)


# -- distributions and masks --------------------------------------------------------------------


def test_multidiscrete_actions_are_a_product_of_categoricals():
    _, spaces = spaces_of(MASKED_MULTI)
    config = trainer_config(algorithm="PPO", env=MASKED_MULTI, hyperparameters=SMALL)
    policy = PPOPolicy(spaces, config, 0)
    obs = np.random.default_rng(0).random((64, spaces.obs_dim)).astype(np.float32)
    obs[:, -spaces.action_mask_n :] = 1.0  # all legal
    actions, columns = policy.compute_actions(obs)
    assert actions.shape == (64, 2) and actions.dtype == np.int64
    logits = torch.from_numpy(columns["dist_inputs"])
    logp = policy.model.logp_of(logits, torch.from_numpy(actions))
    by_hand = sum(
        torch.log_softmax(part, -1).gather(-1, torch.from_numpy(actions[:, [i]])).squeeze(-1)
        for i, part in enumerate(logits.split([4, 3], dim=-1))
    )
    torch.testing.assert_close(logp, by_hand)
    greedy = MultiCategorical((4, 3)).greedy(np, columns["dist_inputs"])
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0], greedy)


def masked_obs(spaces, rows: int, seed: int = 0) -> np.ndarray:
    """Random flat observations whose masks allow one or two actions per row, the last row
    none at all."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(rows, spaces.obs_dim)).astype(np.float32)
    n = spaces.action_mask_n
    mask = np.zeros((rows, n), dtype=np.float32)
    mask[np.arange(rows), rng.integers(0, n, rows)] = 1
    mask[np.arange(rows), rng.integers(0, n, rows)] = 1
    mask[-1] = 0
    obs[:, -n:] = mask
    return obs


@pytest.mark.parametrize("algorithm", ["PPO", "DQN"])
def test_illegal_actions_are_never_chosen_by_torch_nor_numpy_acting(algorithm):
    _, spaces = spaces_of(MASKED)
    config = trainer_config(algorithm=algorithm, env=MASKED, hyperparameters=SMALL)
    torch_policy = (PPOPolicy if algorithm == "PPO" else DQNPolicy)(spaces, config, 0)
    acting = ActingPolicy if algorithm == "PPO" else ActingDQNPolicy
    numpy_policy = acting(spaces, frozen(config), 0)
    numpy_policy.set_weights(torch_policy.get_weights())
    obs = masked_obs(spaces, 2000)
    legal = obs[:-1, -spaces.action_mask_n :] > 0.5
    for policy in (torch_policy, numpy_policy):
        policy.set_global_timesteps(0)  # DQN: epsilon 1, every action a random legal one
        for explore in (True, False):
            actions, columns = policy.compute_actions(obs, explore=explore)
            assert legal[np.arange(len(legal)), actions[:-1]].all(), (policy, explore)
    # Logits of the illegal actions are ILLEGAL; a row with none legal keeps finite numbers.
    _, columns = numpy_policy.compute_actions(obs) if algorithm == "PPO" else (None, None)
    if columns is not None:
        assert (columns["dist_inputs"][:-1][~legal] == ILLEGAL).all()
        logp = numpy_policy._logp(columns["dist_inputs"][None], columns["actions"][None])
        assert np.isfinite(logp).all()
        _, entropy = torch_policy.model.logp_entropy(
            torch.from_numpy(obs), torch.from_numpy(columns["actions"])
        )
        assert torch.isfinite(entropy).all() and entropy[-1] > 0


def test_epsilon_exploration_is_uniform_among_the_legal_actions():
    legal = np.zeros((30_000, 5))
    legal[:, [1, 3]] = 1
    actions = EpsilonGreedy(5).explore(np.random.default_rng(0), np.zeros(30_000, int), 1.0, legal)
    counts = np.bincount(actions, minlength=5)
    assert counts[[0, 2, 4]].sum() == 0 and abs(counts[1] - counts[3]) < 600


def test_dqns_target_bootstraps_from_the_next_observations_legal_actions_only():
    _, spaces = spaces_of(MASKED)
    hyperparameters = SMALL | {"double_q": False}
    config = trainer_config(algorithm="DQN", env=MASKED, hyperparameters=hyperparameters)
    policy = DQNPolicy(spaces, config, 0)
    next_obs = torch.from_numpy(masked_obs(spaces, 256, seed=1))
    with torch.no_grad():
        raw = policy.target_model._q_values(next_obs[:, : spaces.feature_dim])
    legal = next_obs[:, -spaces.action_mask_n :] > 0.5
    expected = torch.where(legal, raw, -torch.inf).max(-1).values
    expected[-1] = 0.0  # no legal action: nothing to bootstrap from
    batch = {
        "next_obs": next_obs,
        "rewards": torch.zeros(256),
        "bootstrap_discounts": torch.ones(256),
    }
    torch.testing.assert_close(policy.td_targets(batch), expected)


def test_normalization_never_touches_the_mask_columns():
    _, spaces = spaces_of(MASKED)
    config = trainer_config(algorithm="PPO", env=MASKED, normalization={"observations": True})
    normalizer = make_normalizer(config, spaces, 2)
    obs = masked_obs(spaces, 100) * 1
    obs[:, : spaces.feature_dim] *= 50.0
    normalizer.observe(obs)
    normalizer.merge(normalizer.take_delta())
    normalized = normalizer.normalize_obs(obs)
    n = spaces.action_mask_n
    np.testing.assert_array_equal(normalized[:, -n:], obs[:, -n:])
    assert len(normalizer.stats.obs.mean) == spaces.feature_dim
    assert np.abs(normalized[:, :-n]).max() < np.abs(obs[:, :-n]).max()


# -- end to end ---------------------------------------------------------------------------------


def first_of(batch):
    """The first observation of a vector env's batch of Dict (or Tuple, nested) observations."""
    if isinstance(batch, dict):
        return {key: first_of(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(first_of(value) for value in batch)
    return batch[0]


def returns_min(rows: list[dict]) -> list[float]:
    """The lowest episode return of each iteration that ended episodes."""
    return [row["episode_return_min"] for row in rows if row.get("episode_return_min") is not None]


ROUND_TRIPS = {
    "PPO-every-space": {"algorithm": "PPO", "env": EVERY_SPACE},
    "PPO-every-space-multidiscrete": {
        "algorithm": "PPO",
        "env": EVERY_SPACE,
        "envConfig": {"multi": True},
        "normalization": {"observations": True},
    },
    "DQN-every-space": {"algorithm": "DQN", "env": EVERY_SPACE},
    "DQN-masked": {"algorithm": "DQN", "env": MASKED, "envConfig": {"mask_as_box": True}},
    "PPO-masked-multidiscrete": {"algorithm": "PPO", "env": MASKED_MULTI},
    "ES-masked": {
        "algorithm": "ES",
        "env": MASKED,
        "hyperparameters": {"episodes_per_batch": 4, "noise_size": 100_000},
    },
}


def hyperparameters_of(case: dict) -> dict:
    own = case.get("hyperparameters", {})
    if case["algorithm"] == "DQN":
        return {**SMALL, "learning_starts": 0, "batch_size": 32, **own}
    if case["algorithm"] == "ES":
        return {**SMALL, **own}
    return {**ON_POLICY, **own}


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_a_space_round_trips_from_sampling_to_the_exported_graph(case, tmp_path):
    fields = ROUND_TRIPS[case] | {"hyperparameters": hyperparameters_of(ROUND_TRIPS[case])}
    config = trainer_config(**fields, stop={"iterations": 3})
    Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, case).run()
    rows = progress_rows(tmp_path)
    assert rows[-1]["timesteps_total"] > 0
    assert min(returns_min(rows)) >= 0
    policy = load(tmp_path, trust_env_code=True)
    try:
        exported = export(policy, tmp_path / "policy.onnx")  # checked to act as the policy
        envs = make_vector_env(config.env, config.env_config, 3)
        obs, _ = envs.reset(seed=0)
        envs.close()
        one = first_of(obs)
        for predictor in (policy, load(exported, trust_env_code=True)):
            batch_actions, _ = predictor.predict(obs)
            one_action, _ = predictor.predict(one)
            np.testing.assert_array_equal(one_action, batch_actions[0])
            assert predictor.evaluate(episodes=3).returns.min() >= 0  # greedy: no illegal action
        np.testing.assert_array_equal(load(exported).predict(obs)[0], policy.predict(obs)[0])
    finally:
        policy.close()


def test_ppo_learns_a_masked_task_in_seconds(tmp_path):
    """Random legal play returns about 10/3 (a third of the legal actions is the target);
    learning which legal one pays brings it past 8 of 10."""
    config = trainer_config(
        algorithm="PPO",
        env=MASKED,
        hyperparameters=ON_POLICY | {"rollout_length": 64, "minibatch_size": 128},
        stop={"episodeReturnMean": 8, "timesteps": 40_000},
    )
    result = Driver(config, RolloutConfig(envs_per_worker=8), tmp_path, "job").run()
    assert result.stopped_by == "episodeReturnMean>=8", result


@pytest.mark.parametrize(
    "algorithm, replicas",
    [("PPO", 0), ("A2C", 0), ("DQN", 0), ("IMPALA", 1), ("APEX", 1)],
)
def test_no_illegal_action_is_taken_by_any_optimizer_nor_in_evaluation(
    algorithm, replicas, tmp_path
):
    """SyncSamples (PPO, A2C), SyncReplay (DQN), AsyncSamples (IMPALA) and AsyncReplay (APEX),
    whose remote workers (replicas 1) act with the numpy policies; an illegal action would end
    an episode with a return of about -1000."""
    replay = algorithm in ("DQN", "APEX")
    config = trainer_config(
        algorithm=algorithm,
        env=MASKED,
        hyperparameters={**SMALL, "learning_starts": 0} if replay else ON_POLICY,
        stop={"timesteps": 1_000},
        evaluation={"everyIterations": 1, "episodes": 3},
    )
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=4, cpus_per_worker=0.5)
    Driver(config, rollout, tmp_path, "job").run()
    rows = progress_rows(tmp_path)
    minima = returns_min(rows)
    evaluations = [row["evaluation_return_mean"] for row in rows if "evaluation_return_mean" in row]
    assert minima and min(minima) >= 0
    assert evaluations and min(evaluations) >= 0


def test_an_env_instance_counts_no_illegal_action_under_a_loaded_policy(tmp_path):
    config = trainer_config(
        algorithm="PPO", env=MASKED, hyperparameters=ON_POLICY, stop={"iterations": 1}
    )
    Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()
    policy = load(tmp_path, trust_env_code=True)
    env = PickTheTarget()
    obs, _ = env.reset(seed=0)
    for _ in range(500):
        action, _ = policy.predict(obs, deterministic=False)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    assert env.illegal_actions == 0
    policy.close()


def test_exported_file_records_how_it_takes_a_dict(tmp_path):
    config = trainer_config(
        algorithm="PPO", env=MASKED, hyperparameters=ON_POLICY, stop={"iterations": 1}
    )
    Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()
    policy = load(tmp_path)
    path = export(policy, Path(tmp_path) / "policy.pt")
    exported = load(path)
    assert exported.meta["obs_encoding"] == "flat"
    assert json.loads(exported.meta["obs_shape"]) == [policy.spaces.obs_dim]
    policy.close()
