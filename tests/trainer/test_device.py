"""The learner's device: cuda when the job has GPUs and one is visible, the CPU otherwise (with
one warning); whatever leaves a policy (actions, weights, gradients, checkpoint state) is on the
CPU, so rollout workers and checkpoints never depend on where the learner ran. The driver's local
worker samples with a CPU copy of a learner on a GPU (test_sampling_copy.py runs that path on the
CPU)."""

from __future__ import annotations

import io
import logging
import warnings

import numpy as np
import pytest
import torch

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.trainer import learner_devices
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.policies.dqn import DQNPolicy
from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.policies.replay import ReplayPolicy
from kuberl_trainer.policies.sac import SACPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

NO_CUDA_WARNING = "learner.gpus=1 but no CUDA device is visible: learning on the CPU"
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device: the learner on its GPU"
)

# (algorithm, policy class, env): discrete Gumbel noise, continuous Gaussian noise, Q-learning,
# a squashed Gaussian with twin critics
POLICIES = [
    ("PPO", PPOPolicy, "CartPole-v1"),
    ("PPO", PPOPolicy, "Pendulum-v1"),
    ("DQN", DQNPolicy, "CartPole-v1"),
    ("SAC", SACPolicy, "Pendulum-v1"),
]


def worker(algorithm, policy_class, env, seed=0) -> RolloutWorker:
    hyperparameters = {"rollout_length": 16} if algorithm == "PPO" else {}
    config = trainer_config(algorithm=algorithm, env=env, hyperparameters=hyperparameters)
    return RolloutWorker(policy_class, config, num_envs=4, seed=seed)


def tensors_of(value) -> list[torch.Tensor]:
    """Every tensor in nested dicts, lists and tuples (a policy's state)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for v in value for t in tensors_of(v)]
    return []


def assert_cpu_numpy(weights: dict[str, np.ndarray]) -> None:
    assert weights and all(type(v) is np.ndarray for v in weights.values())


def run_driver(
    tmp_path, monkeypatch, learner_gpus: int, learner_device: str = "gpu", iterations: int = 3
) -> tuple[TorchPolicy, object, RolloutWorker]:
    """A tiny PPO run without remote workers; returns the learner's policy, the result and the
    local worker."""
    moved: list[TorchPolicy] = []
    original_to = TorchPolicy.to

    def recording_to(policy, device):
        moved.append(policy)
        return original_to(policy, device)

    monkeypatch.setattr(TorchPolicy, "to", recording_to)
    config = trainer_config(
        algorithm="PPO",
        stop={"iterations": iterations},
        hyperparameters={"rollout_length": 32, "num_epochs": 2},
        evaluation={"everyIterations": iterations, "episodes": 1},
    )
    rollout = RolloutConfig(replicas=0, envs_per_worker=4)
    driver = Driver(
        config,
        rollout,
        tmp_path,
        "job",
        learner_gpus=learner_gpus,
        learner_device=learner_device,
    )
    result = driver.run()
    # Only the learner moves (the device trial moves it more than once); nothing else builds
    # a device policy.
    [policy] = {id(p): p for p in moved}.values()
    return policy, result, driver.trainer.workers.local_worker


# -- on any machine --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpus, cuda_count, expected",
    [
        (0, 0, (["cpu"], None)),
        (0, 1, (["cpu"], None)),  # a visible GPU the job did not ask for stays unused
        (1, 0, (["cpu"], NO_CUDA_WARNING)),
        (1, 1, (["cuda:0"], None)),
        (1, 4, (["cuda:0"], None)),
        (2, 2, (["cuda:0", "cuda:1"], None)),
        # One device per GPU asked for, whatever is visible: LocalMultiGPU's towers stay alike.
        (
            2,
            0,
            (["cpu", "cpu"], "learner.gpus=2 but no CUDA device is visible: learning on the CPU"),
        ),
        (
            3,
            2,
            (
                ["cuda:0", "cuda:1", "cuda:0"],
                "learner.gpus=3 but 2 CUDA devices are visible: its 3 devices share them",
            ),
        ),
    ],
)
def test_learner_devices(gpus, cuda_count, expected):
    assert learner_devices(gpus, cuda_count) == expected


def test_gpu_job_without_a_gpu_learns_on_the_cpu_and_warns_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with caplog.at_level(logging.WARNING):
        policy, result, local_worker = run_driver(tmp_path, monkeypatch, learner_gpus=1)
    assert (result.iteration, result.stopped_by) == (3, "iterations>=3")
    assert result.evaluation_return_mean is not None
    assert policy.device == torch.device("cpu")
    assert local_worker.acting_policy is policy  # a CPU learner samples itself: no copy
    assert all(p.device.type == "cpu" for p in policy.model.parameters())
    warnings = [r for r in caplog.records if r.getMessage() == NO_CUDA_WARNING]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


@pytest.mark.parametrize("algorithm, policy_class, env", POLICIES)
def test_weights_for_workers_are_fresh_cpu_numpy(algorithm, policy_class, env):
    learner = worker(algorithm, policy_class, env).policy
    weights = learner.get_weights()
    assert_cpu_numpy(weights)
    fresh = worker(algorithm, policy_class, env, seed=1).policy
    fresh.set_weights(weights)
    for key, value in fresh.get_weights().items():
        np.testing.assert_array_equal(value, weights[key])
    # Copies: what went to the workers does not change as the learner trains.
    next(iter(weights.values()))[...] = 123.0
    assert not any((v == 123.0).all() for v in learner.get_weights().values())


def test_arrays_become_tensors_without_copies_on_the_cpu_except_read_only_ones():
    policy = worker("PPO", PPOPolicy, "CartPole-v1").policy
    writable = np.arange(6, dtype=np.float32)
    assert policy.as_tensor(writable).data_ptr() == writable.ctypes.data
    read_only = np.arange(6, dtype=np.float32)
    read_only.flags.writeable = False  # as Ray's object store hands out sample batches
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it shares a read-only array
        tensor = policy.as_tensor(read_only)
    assert tensor.data_ptr() != read_only.ctypes.data
    np.testing.assert_array_equal(tensor.numpy(), read_only)


def test_checkpoint_state_holds_only_cpu_tensors():
    learner = worker("PPO", PPOPolicy, "CartPole-v1")
    learner.policy.learn_on_batch(learner.sample())  # Adam has moments to save now
    state = learner.policy.get_state()
    assert_cpu_numpy(state["weights"])
    assert tensors_of(state["optimizer"]["state"])
    assert all(t.device.type == "cpu" for t in tensors_of(state))


# -- on a GPU ---------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("algorithm, policy_class, env", POLICIES)
def test_policy_on_cuda_samples_learns_and_hands_out_cpu_numpy(algorithm, policy_class, env):
    on_gpu, on_cpu = worker(algorithm, policy_class, env), worker(algorithm, policy_class, env)
    on_gpu.policy.to("cuda")
    assert all(p.device.type == "cuda" for p in on_gpu.policy.model.parameters())

    # The noise is drawn on the CPU generator: the same seed acts alike on both devices.
    actions_gpu, columns_gpu = on_gpu.policy.compute_actions(on_gpu.obs)
    actions_cpu, columns_cpu = on_cpu.policy.compute_actions(on_cpu.obs)
    assert type(actions_gpu) is np.ndarray
    for key, value in columns_cpu.items():
        np.testing.assert_allclose(columns_gpu[key], value, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(actions_gpu, actions_cpu, rtol=1e-4, atol=1e-4)

    batch = on_gpu.sample()  # compute_actions and postprocessing on the GPU model
    assert all(type(v) is np.ndarray for v in batch.columns.values())
    before = on_gpu.policy.get_weights()
    stats = on_gpu.policy.learn_on_batch(batch)
    assert all(np.isfinite(v) for v in stats.values())
    after = on_gpu.policy.get_weights()
    assert_cpu_numpy(after)
    assert any(not np.array_equal(before[k], after[k]) for k in before)

    gradients, _ = on_gpu.policy.compute_gradients(batch)
    assert all(type(g) is np.ndarray for g in gradients)
    on_gpu.policy.apply_gradients(gradients)
    assert all(p.device.type == "cuda" for p in on_gpu.policy.model.parameters())
    if isinstance(on_gpu.policy, ReplayPolicy):
        assert all(p.device.type == "cuda" for p in on_gpu.policy.target_model.parameters())


@needs_cuda
@pytest.mark.parametrize("algorithm, policy_class, env", POLICIES)
def test_checkpoint_round_trips_between_cuda_and_cpu(algorithm, policy_class, env):
    on_gpu = worker(algorithm, policy_class, env)
    on_gpu.policy.to("cuda")
    batch = on_gpu.sample()
    on_gpu.policy.learn_on_batch(batch)

    # What the checkpoint store writes and reads back: it loads on a machine without a GPU.
    buffer = io.BytesIO()
    torch.save(on_gpu.policy.get_state(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    assert all(t.device.type == "cpu" for t in tensors_of(state))

    on_cpu = worker(algorithm, policy_class, env, seed=1).policy
    on_cpu.set_state(state)
    for key, value in on_gpu.policy.get_weights().items():
        np.testing.assert_array_equal(on_cpu.get_weights()[key], value)
    on_cpu.learn_on_batch(batch)  # its Adam moments arrived on the CPU

    back_on_gpu = worker(algorithm, policy_class, env, seed=2).policy.to("cuda")
    back_on_gpu.set_state(on_cpu.get_state())
    moments = tensors_of(back_on_gpu.optimizer.state_dict()["state"])
    assert moments and all(t.device.type == "cuda" for t in moments)
    back_on_gpu.learn_on_batch(batch)


@needs_cuda
def test_moving_a_trained_policy_moves_its_optimizer_state():
    learner = worker("PPO", PPOPolicy, "Pendulum-v1")
    batch = learner.sample()
    learner.policy.learn_on_batch(batch)
    learner.policy.to("cuda")
    moments = tensors_of(learner.policy.optimizer.state_dict()["state"])
    assert moments and all(t.device.type == "cuda" for t in moments)
    learner.policy.learn_on_batch(batch)


@needs_cuda
def test_gpu_job_learns_on_cuda_and_samples_on_the_cpu(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.INFO):
        policy, result, local_worker = run_driver(tmp_path, monkeypatch, learner_gpus=1)
    assert (result.iteration, result.stopped_by) == (3, "iterations>=3")
    assert policy.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in policy.model.parameters())
    assert NO_CUDA_WARNING not in caplog.text
    # The driver's sampling and evaluation act with a CPU copy, refreshed before the evaluation.
    copy = local_worker.acting_policy
    assert local_worker.policy is policy and copy is not policy
    assert copy.device.type == "cpu"
    assert all(t.device.type == "cpu" for t in copy.model.state_dict().values())
    learned = policy.model.state_dict()
    for key, value in copy.model.state_dict().items():
        assert torch.equal(value, learned[key].cpu()), key
    assert "learner on cuda:0; sampling on the CPU" in caplog.text


@needs_cuda
def test_auto_device_moves_a_small_mlp_learner_to_the_cpu(tmp_path, monkeypatch, caplog):
    """CartPole PPO's 64x64 MLP learns faster on the CPU than on a GPU (kernel launches)."""
    with caplog.at_level(logging.INFO):
        policy, result, _ = run_driver(
            tmp_path, monkeypatch, learner_gpus=1, learner_device="auto", iterations=6
        )
    assert (result.iteration, result.stopped_by) == (6, "iterations>=6")
    assert policy.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in policy.model.parameters())
    assert "learning on the CPU" in caplog.text
    assert "learn_on_batch" not in vars(policy)  # the trial's timing is gone


@needs_cuda
def test_auto_device_keeps_a_large_network_on_the_gpu():
    """A 1024x1024 MLP on 4,096 rows learns several times faster on any GPU than on a CPU."""
    from kuberl_trainer.job.device_choice import DeviceTrial

    config = trainer_config(
        algorithm="PPO",
        hyperparameters={
            "rollout_length": 256,
            "num_epochs": 1,
            "minibatch_size": 4096,
            "hidden_sizes": [1024, 1024],
        },
    )
    sampler = RolloutWorker(PPOPolicy, config, num_envs=16, seed=0)
    policy = sampler.policy.to("cuda")
    chosen: list[str] = []
    DeviceTrial(policy, "cuda:0", lambda device, reason: chosen.append(device)).install()
    batch = sampler.sample()
    for _ in range(5):
        policy.learn_on_batch(batch)
    assert chosen == ["cuda:0"]
    assert policy.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in policy.model.parameters())


@needs_cuda
@pytest.mark.parametrize("algorithm, policy_class, env", POLICIES)
def test_the_copy_of_a_cuda_learner_acts_on_the_cpu_with_its_weights(algorithm, policy_class, env):
    on_gpu = worker(algorithm, policy_class, env)
    on_gpu.act_with_a_cpu_copy()
    on_gpu.policy.to("cuda")
    batch = on_gpu.sample()  # acting and postprocessing on the copy
    assert all(type(v) is np.ndarray for v in batch.columns.values())
    on_gpu.policy.learn_on_batch(batch)
    on_gpu.refresh_acting_policy()
    copy = on_gpu.acting_policy
    assert all(t.device.type == "cpu" for t in copy.model.state_dict().values())
    for key, value in on_gpu.policy.get_weights().items():
        np.testing.assert_array_equal(copy.model.state_dict()[key].numpy(), value)
