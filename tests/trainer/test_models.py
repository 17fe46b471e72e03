"""The model section (spec.trainer.model): the encoder chosen from the observation space, the CNN
for images (uint8 kept uint8 up to its first layer), shared or separate trunks, every algorithm
family learning through it, and validation naming the field; then CNN policies learning Catch
from pixels."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from kuberl_cli.validate import check_manifest
from kuberl_contract.config import ALGORITHMS, ModelConfig, RolloutConfig
from kuberl_trainer.envs.making import EnvError
from kuberl_trainer.envs.problems import env_problem
from kuberl_trainer.envs.spaces import space_info
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.policies import models
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.policies.models import ActorCritic, ConvEncoder, use_float32
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # Atari's stacked frames
CATCH = "custom_envs:Catch"
SMALL_CNN = {"convFilters": [[16, 3, 1], [32, 3, 1]], "features": 64}
"""A CNN for Catch's 10x10 frames (the Nature CNN's 8x8 kernels need larger images)."""


def catch_config(algorithm: str, **fields):
    fields = {"env": CATCH, "model": SMALL_CNN, "algorithm": algorithm, **fields}
    return trainer_config(**fields)


@pytest.mark.parametrize(
    "space, image_shape, channels_last",
    [
        (FRAMES, (4, 84, 84), False),
        (gym.spaces.Box(0, 255, (210, 160, 3), np.uint8), (210, 160, 3), True),  # a raw frame
        (gym.spaces.Box(0, 255, (84, 84), np.uint8), (84, 84), False),  # one grey frame
        (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), None, None),
        (gym.spaces.Box(-1.0, 1.0, (2, 5, 5), np.float32), None, None),  # not uint8: not auto
    ],
)
def test_auto_picks_the_cnn_for_uint8_images_only(space, image_shape, channels_last):
    info = space_info(space, gym.spaces.Discrete(3))
    if image_shape is None:
        assert info.image is None
        assert (info.obs_shape, info.obs_dtype) == ((int(np.prod(space.shape)),), np.float32)
        return
    assert (info.image.shape, info.image.channels_last) == (image_shape, channels_last)
    assert (info.obs_shape, info.obs_dtype) == (image_shape, np.uint8)


def test_the_cnn_can_be_asked_for_float_images_and_the_mlp_for_any():
    floats = gym.spaces.Box(-1.0, 1.0, (2, 12, 12), np.float32)
    cnn = ModelConfig(encoder="cnn", conv_filters=[(8, 3, 1)])
    info = space_info(floats, gym.spaces.Discrete(2), cnn)
    assert (info.obs_shape, info.obs_dtype, info.image.uint8) == ((2, 12, 12), np.float32, False)
    flat = space_info(FRAMES, gym.spaces.Discrete(2), ModelConfig(encoder="mlp"))
    assert (flat.image, flat.obs_shape) == (None, (4 * 84 * 84,))


def test_channels_last_images_are_transposed_inside_the_model():
    """(H, W, C) frames give what the same network gives their (C, H, W) transpose."""
    model = ModelConfig(conv_filters=[(8, 3, 2)], features=16)
    hwc = space_info(gym.spaces.Box(0, 255, (12, 10, 3), np.uint8), gym.spaces.Discrete(2), model)
    chw = space_info(gym.spaces.Box(0, 255, (3, 12, 10), np.uint8), gym.spaces.Discrete(2), model)
    torch.manual_seed(0)
    channels_last = ConvEncoder(hwc.image, model)
    channels_first = ConvEncoder(chw.image, model)
    channels_first.load_state_dict(channels_last.state_dict())
    frames = torch.randint(0, 256, (5, 12, 10, 3), dtype=torch.uint8)
    torch.testing.assert_close(
        channels_last(frames), channels_first(frames.permute(0, 3, 1, 2).contiguous())
    )


@pytest.mark.parametrize(
    "env, model, images, field, message",
    [
        (
            "CartPole-v1",
            {"encoder": "cnn"},
            True,
            "model.encoder",
            "the observation space Box(",
        ),
        ("custom_envs:Corridor", {"encoder": "cnn"}, True, "model.encoder", "is no image"),
        (  # the Nature CNN's second kernel (4x4) on what its first leaves of 10x10 (1x1)
            CATCH,
            {},
            True,
            "model.convFilters[1]",
            "its 4x4 kernel does not fit the 1x1 image that the convolutions before it leave",
        ),
        (
            CATCH,
            {"convFilters": [[8, 11, 1]]},
            True,
            "model.convFilters[0]",
            "its 11x11 kernel does not fit the 10x10 image observations",
        ),
        (CATCH, SMALL_CNN, False, "model.encoder", "set encoder: mlp to flatten them"),
    ],
)
def test_a_model_that_does_not_fit_the_space_is_refused_naming_the_field(
    env, model, images, field, message
):
    problem = env_problem(env, {}, model=ModelConfig.model_validate(model), images=images)
    assert problem is not None and problem.field == field, problem
    assert message in problem.message


def test_kuberl_validate_names_the_model_field(tmp_path):
    def problems(trainer: dict) -> list[tuple[str, str]]:
        manifest = {
            "apiVersion": "kuberl.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "catch"},
            "spec": {"trainer": trainer},
        }
        _, found = check_manifest(yaml.safe_dump(manifest))
        return [(problem.path, problem.message) for problem in found]

    trainer = {"algorithm": "PPO", "env": CATCH, "stop": {"timesteps": 1000}}
    [(path, message)] = problems(trainer)  # the Nature CNN does not fit 10x10 frames
    assert path == "spec.trainer.model.convFilters[1]"
    assert "does not fit" in message
    assert problems({**trainer, "model": SMALL_CNN}) == []
    [(path, _)] = problems({**trainer, "algorithm": "SAC", "env": "CartPole-v1"})
    assert path == "spec.trainer.env"  # SAC needs Box actions: the env's problem comes first
    [(path, message)] = problems({**trainer, "algorithm": "ES", "model": SMALL_CNN})
    assert (path, "flat observations only" in message) == ("spec.trainer.model.encoder", True)
    [(path, _)] = problems({**trainer, "model": SMALL_CNN, "normalization": {"observations": True}})
    assert path == "spec.trainer.normalization.observations"
    population = {
        "algorithm": "PBT",
        "env": CATCH,
        "stop": {"timesteps": 1000},
        "trainer": {"algorithm": "PPO"},
    }
    [(path, _)] = problems(population)
    assert path == "spec.trainer.trainer.model.convFilters[1]"
    assert problems({**population, "model": SMALL_CNN}) == []


def test_the_cnn_shares_its_trunk_by_default_and_the_mlp_keeps_its_parameter_names():
    small = ModelConfig.model_validate(SMALL_CNN)
    catch = space_info(gym.spaces.Box(0, 255, (1, 10, 10), np.uint8), gym.spaces.Discrete(3), small)

    def count(module: torch.nn.Module, kind: type) -> int:
        return sum(isinstance(m, kind) for m in module.modules())

    shared = ActorCritic(catch, [64], "tanh", True, model=small)
    assert count(shared, torch.nn.Conv2d) == 2  # one trunk, one forward pass per batch
    separate = ActorCritic(
        catch, [64], "tanh", True, model=small.model_copy(update={"vf_share_layers": False})
    )
    assert count(separate, torch.nn.Conv2d) == 4
    cartpole = space_info(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2))
    # checkpoints written before the model section load into the same names
    assert list(ActorCritic(cartpole, [64, 64], "tanh", True).state_dict()) == [
        f"{network}.{layer}.{kind}"
        for network in ("actor", "critic")
        for layer in (0, 2, 4)
        for kind in ("weight", "bias")
    ]
    mlp_shared = ActorCritic(cartpole, [32], "tanh", True, model=ModelConfig(vf_share_layers=True))
    assert mlp_shared.encoder is not None
    obs, actions = torch.randn(6, 4), torch.randint(0, 2, (6,))
    logp, entropy, values = mlp_shared.logp_entropy_value(obs, actions)
    torch.testing.assert_close(values, mlp_shared.value(obs))
    torch.testing.assert_close((logp, entropy), mlp_shared.logp_entropy(obs, actions))


IMAGE_ALGORITHMS = [name for name, row in ALGORITHMS.items() if row.image_observations]


@pytest.mark.parametrize("algorithm", IMAGE_ALGORITHMS)
def test_every_image_algorithm_samples_uint8_frames_and_learns_through_the_cnn(algorithm):
    config = catch_config(algorithm, hyperparameters={"rollout_length": 9})
    policy_type = policy_class(config)
    worker = RolloutWorker(policy_type, config, num_envs=4, seed=0)
    try:
        batch = worker.sample()
        assert batch.columns["obs"].dtype == np.uint8
        assert batch.columns["obs"].shape[1:] == (1, 10, 10)
        if "next_obs" in batch.columns:
            assert batch.columns["next_obs"].dtype == np.uint8
        policy: TorchPolicy = worker.policy
        before = [p.detach().clone() for p in policy.model.parameters()]
        stats = policy.learn_on_batch(batch)
        assert all(np.isfinite(value) for value in stats.values()), stats
        convs = [m for m in policy.model.modules() if isinstance(m, torch.nn.Conv2d)]
        assert convs, "the images went through no CNN"
        changed = [
            not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True)
        ]
        assert any(changed)
        assert not torch.equal(before[0], next(policy.model.parameters()))  # the first conv
    finally:
        worker.close()


@pytest.mark.parametrize(
    "precision, native, image_shape, model, bfloat16_on",
    [
        ("auto", True, (4, 84, 84), {}, {"cpu"}),  # the Nature CNN: 9.3M multiply-adds
        ("auto", False, (4, 84, 84), {}, set()),  # emulated bfloat16 is slower than float32
        ("auto", True, (1, 10, 10), SMALL_CNN, set()),  # 0.3M: faster in float32
        ("float32", True, (4, 84, 84), {}, set()),
        ("bfloat16", False, (1, 10, 10), SMALL_CNN, {"cpu", "cuda"}),  # asked: everywhere
    ],
)
def test_precision_auto_takes_bfloat16_for_large_cnns_on_cpus_that_have_it(
    monkeypatch, precision, native, image_shape, model, bfloat16_on
):
    monkeypatch.setattr(models, "native_bfloat16_cpu", lambda: native)
    config = ModelConfig.model_validate({**model, "precision": precision})
    info = space_info(gym.spaces.Box(0, 255, image_shape, np.uint8), gym.spaces.Discrete(2), config)
    encoder = ConvEncoder(info.image, config)
    assert encoder.bfloat16_on & {"cpu", "cuda"} == bfloat16_on
    assert not use_float32(encoder).bfloat16_on


@pytest.mark.parametrize("algorithm", IMAGE_ALGORITHMS)
def test_bfloat16_acts_with_the_weights_as_they_are_after_every_change(algorithm):
    """Acting casts the weights to bfloat16 once and again whenever they change: after each learn
    step (whose fused Adam kernel alone would not tell) and after weights arrive from elsewhere.
    Learning keeps float32 weights and gradients, and its features are what acting computes."""
    model = {**SMALL_CNN, "precision": "bfloat16"}
    config = catch_config(algorithm, model=model, hyperparameters={"rollout_length": 9})
    worker = RolloutWorker(policy_class(config), config, num_envs=4, seed=0)
    other = RolloutWorker(policy_class(config), config, num_envs=4, seed=1)
    try:
        encoders = [m for m in worker.policy.model.modules() if isinstance(m, ConvEncoder)]
        obs = torch.from_numpy(worker.sample().columns["obs"][:16])

        def acting_is_current(encoder: ConvEncoder) -> bool:
            uncached = copy.deepcopy(encoder)
            uncached._acting_weights = None
            with torch.inference_mode():
                acted, fresh = encoder(obs), uncached(obs)
            return acted.dtype == torch.float32 and torch.equal(acted, fresh)

        for _ in range(2):
            worker.policy.learn_on_batch(worker.sample())
            assert all(acting_is_current(encoder) for encoder in encoders)
        assert all(p.dtype == torch.float32 for p in worker.policy.model.parameters())
        grads = [p.grad for p in worker.policy.model.parameters() if p.grad is not None]
        assert grads and all(g.dtype == torch.float32 for g in grads)
        features = encoders[0](obs)  # learning: autocast
        with torch.inference_mode():
            acted = encoders[0](obs)
        torch.testing.assert_close(features.detach(), acted, rtol=0.02, atol=0.02)
        worker.policy.set_weights(other.policy.get_weights())
        assert all(acting_is_current(encoder) for encoder in encoders)
    finally:
        worker.close()
        other.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm, hyperparameters, budget",
    [
        # seeds 0-12 reached a greedy 0.95 within 16k-33k env steps (6-29 s on 2 loaded cores)
        (
            "PPO",
            {
                "rollout_length": 32,
                "minibatch_size": 64,
                "num_epochs": 4,
                "learning_rate": 5e-4,
                "entropy_coeff": 0.01,
            },
            60_000,
        ),
        # seeds 0-9 reached it within 2.3k-6.5k env steps (5-44 s)
        (
            "DQN",
            {"learning_starts": 500, "epsilon_timesteps": 5_000, "target_update_interval": 200},
            20_000,
        ),
        # the same in bfloat16 (acting on cast weights, learning under autocast): seeds 0-4
        # reached it within 4.2k-6.9k env steps
        (
            "DQN-bfloat16",
            {"learning_starts": 500, "epsilon_timesteps": 5_000, "target_update_interval": 200},
            20_000,
        ),
    ],
)
def test_cnn_policies_learn_catch_from_pixels(tmp_path, algorithm, hyperparameters, budget):
    """Catch's optimal return is 1 (every ball caught); a random policy's is about -0.6."""
    algorithm, _, precision = algorithm.partition("-")
    config = catch_config(
        algorithm,
        model={**SMALL_CNN, "precision": precision or "auto"},
        hyperparameters=hyperparameters,
        stop={"evaluationReturnMean": 0.95, "timesteps": budget},
        evaluation={"everyIterations": 2, "episodes": 20},
    )
    result = Driver(config, RolloutConfig(envs_per_worker=8), tmp_path, "catch").run()
    assert result.stopped_by == "evaluationReturnMean>=0.95", result


def test_an_env_error_of_the_model_is_raised_by_the_worker_too():
    with pytest.raises(EnvError) as raised:
        RolloutWorker(
            policy_class(catch_config("PPO", model={})), catch_config("PPO", model={}), 1, 0
        )
    assert raised.value.field == "model.convFilters[1]"
