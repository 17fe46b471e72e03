"""LocalMultiGPU: every SGD minibatch split across towers on the learner's devices gives what one
device gives on the same minibatch, on CPU towers here and on GPUs where there are two."""

import logging

import numpy as np
import pytest
import torch

from kuberl_contract.config import OptimizerName, RolloutConfig
from kuberl_operator.validation import load_rljob
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.policies.base import mean_stats
from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.policies.towers import Towers
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import ROOT, trainer_config

# float32 sums in another order: the towers' results agree with one device's to about 1e-7
# relative; 1e-5 leaves room for other CPUs and GPU kernels.
RTOL, ATOL = 1e-5, 1e-6
needs_two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs 2 CUDA devices for GPU towers; {torch.cuda.device_count()} visible",
)


def trained_pair(devices: list[str], single_device: str = "cpu"):
    """Two PPO learners with the same state: one on `single_device`, one on towers on
    `devices`; and a batch sampled before they learned on another (so that the ratio, its clip
    and the KL are not trivial)."""
    hyperparameters = {"rollout_length": 32, "learning_rate": 0.03}  # a big step off the start
    config = trainer_config(algorithm="PPO", hyperparameters=hyperparameters)
    worker = RolloutWorker(PPOPolicy, config, num_envs=4, seed=0)
    single = worker.policy.to(single_device)
    first, batch = worker.sample(), worker.sample()
    single.learn_on_batch(first)
    split = RolloutWorker(PPOPolicy, config, num_envs=1, seed=1).policy.to_towers(devices)
    split.set_state(single.get_state())  # the replicas must follow weights set from outside
    return single, split, batch


def assert_same_loss_and_gradients(single, split, batch, rows: int) -> dict[str, float]:
    """On the batch's first `rows`; returns the single device's statistics."""
    minibatch = single.standardized(
        {k: v[:rows] for k, v in single.as_tensors(batch.columns).items()}
    )
    loss, stats = single.loss(minibatch)
    split_loss, split_stats = split.towers.loss(minibatch)
    stats = mean_stats([single.backward(loss, stats)])
    split_stats = mean_stats([split.backward(split_loss, split_stats)])

    torch.testing.assert_close(split_loss, loss, rtol=RTOL, atol=ATOL)
    assert split_stats.keys() == stats.keys() and "grad_norm" in stats  # clipped after gathering
    for key, value in stats.items():
        assert split_stats[key] == pytest.approx(value, rel=RTOL, abs=ATOL), key
    for param, split_param in zip(single.model.parameters(), split.model.parameters(), strict=True):
        torch.testing.assert_close(split_param.grad, param.grad, rtol=RTOL, atol=ATOL)
    assert all(p.grad is None for replica in split.towers.replicas for p in replica.parameters())
    return stats


@pytest.mark.parametrize("rows", [128, 77], ids=["even-shards", "uneven-shards"])
def test_two_cpu_towers_give_the_loss_and_gradients_of_one_device(rows):
    single, split, batch = trained_pair(["cpu", "cpu"])

    assert len(split.towers) == 2
    stats = assert_same_loss_and_gradients(single, split, batch, rows)
    assert stats["kl"] > 0 and stats["clip_fraction"] > 0  # the clipped surrogate was at work


def test_more_towers_than_rows_leaves_the_last_towers_idle():
    single, split, batch = trained_pair(["cpu", "cpu", "cpu"])

    assert_same_loss_and_gradients(single, split, batch, rows=2)


def test_two_cpu_towers_learn_a_batch_as_one_device_does():
    single, split, batch = trained_pair(["cpu", "cpu"])

    stats, split_stats = single.learn_on_batch(batch), split.learn_on_batch(batch)

    # 10 epochs of 2 minibatches: 20 Adam steps, whose differences stay at float32 rounding.
    assert split_stats.keys() == stats.keys()
    for key, value in stats.items():
        assert split_stats[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    for key, value in single.get_weights().items():
        np.testing.assert_allclose(split.get_weights()[key], value, rtol=1e-4, atol=1e-5)


@needs_two_gpus
def test_two_gpu_towers_give_the_loss_and_gradients_of_one_gpu():
    single, split, batch = trained_pair(["cuda:0", "cuda:1"], single_device="cuda:0")

    assert {p.device for p in split.towers.replicas[0].parameters()} == {torch.device("cuda:1")}
    assert_same_loss_and_gradients(single, split, batch, rows=77)


def test_driver_puts_the_towers_on_cpus_without_cuda(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    towers_used: list[int] = []  # by every minibatch's loss
    towers_loss = Towers.loss
    monkeypatch.setattr(
        Towers, "loss", lambda t, mb: towers_used.append(len(t)) or towers_loss(t, mb)
    )
    config = trainer_config(
        algorithm="PPO",
        optimizer="LocalMultiGPU",
        stop={"iterations": 2},
        hyperparameters={"rollout_length": 16, "num_epochs": 2},
    )
    with caplog.at_level(logging.WARNING):
        result = Driver(
            config, RolloutConfig(envs_per_worker=4), tmp_path, "job", learner_gpus=2
        ).run()

    assert (result.iteration, result.stopped_by) == (2, "iterations>=2")
    assert towers_used == [2] * 2 * 2  # 2 iterations of 2 epochs of one 64-sample minibatch
    assert "learner.gpus=2 but no CUDA device is visible: learning on the CPU" in caplog.text


@pytest.mark.parametrize("gpus", [0, 1])
def test_driver_refuses_local_multi_gpu_with_fewer_than_two_learner_gpus(tmp_path, gpus):
    config = trainer_config(algorithm="PPO", optimizer="LocalMultiGPU", stop={"iterations": 1})

    with pytest.raises(InvalidJobError, match=r"learner\.gpus: LocalMultiGPU splits every SGD"):
        Driver(config, RolloutConfig(), tmp_path, "job", learner_gpus=gpus).run()


@pytest.mark.slow
def test_ppo_on_two_cpu_towers_solves_cartpole_within_100k_steps(tmp_path):
    """The PPO example (its 256-sample minibatches split 128/128) on LocalMultiGPU with 2 CPU
    towers and no remote workers: seeds 0-4 reached a mean return of 475 within 36-41k env steps
    (about 12 s of CPU each), as SyncSamples did within 27-50k."""
    job = load_rljob(ROOT / "deploy" / "examples" / "cartpole-ppo.yaml")
    config = job.spec.trainer.model_copy(update={"optimizer": OptimizerName.LOCAL_MULTI_GPU})
    result = Driver(config, job.spec.rollout_workers, tmp_path, job.name, learner_gpus=2).run()

    assert result.stopped_by == "episodeReturnMean>=475", result
    assert result.timesteps <= 100_000
