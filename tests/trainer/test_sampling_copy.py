"""With the learner off the CPU, the driver's local worker acts (samples, evaluates, runs ES's
perturbations) with a CPU copy of the learner's policy, refreshed from the learner's weights after
each learn step; with the learner on the CPU it acts with the learner's policy itself.

There is no GPU here: these tests make the trainer take the CPU for a device off it
(`samples_on_a_cpu_copy`), so the copy's path runs on the CPU, where it must train exactly as
the learner's own policy does: the copy shares the learner's random generators and holds its
weights whenever it acts, so any refresh missed or mistimed shows as a difference."""

from __future__ import annotations

import logging

import pytest
import torch

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job import trainer as trainer_module
from kuberl_trainer.job.trainer import Trainer, placement, samples_on_a_cpu_copy
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

# (algorithm, optimizer, env, hyperparameters, learner GPUs): every optimizer that samples with
# the local worker (without remote workers), on small networks and short windows.
JOBS = {
    "PPO/SyncSamples": ("PPO", None, "CartPole-v1", {"rollout_length": 32, "num_epochs": 2}, 0),
    "DQN/SyncReplay": ("DQN", None, "CartPole-v1", {"learning_starts": 64}, 0),
    "SAC/SyncReplay": (
        "SAC",
        None,
        "Pendulum-v1",
        {"learning_starts": 64, "hidden_sizes": [32, 32]},
        0,
    ),
    "A3C/AsyncGradients": ("A3C", None, "CartPole-v1", {}, 0),
    "ES/Perturbations": (
        "ES",
        None,
        "CartPole-v1",
        {"noise_size": 100_000, "episodes_per_batch": 8, "normalize_observations": True},
        0,
    ),
    "PPO/LocalMultiGPU": (
        "PPO",
        "LocalMultiGPU",
        "CartPole-v1",
        {"rollout_length": 32, "num_epochs": 2},
        2,
    ),
}
ITERATIONS = 3


@pytest.fixture
def learner_off_the_cpu(monkeypatch):
    """The trainer treats its CPU learner as one on a GPU: the local worker acts with a copy."""
    monkeypatch.setattr(trainer_module, "samples_on_a_cpu_copy", lambda device: True)


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    """Learner GPUs become CPU devices (LocalMultiGPU's towers), as on a machine without CUDA."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def built_trainer(job: str, evaluate: bool = False) -> Trainer:
    algorithm, optimizer, env, hyperparameters, gpus = JOBS[job]
    fields = {"optimizer": optimizer} if optimizer else {}
    if evaluate:
        fields["evaluation"] = {"everyIterations": 1, "episodes": 2}
    config = trainer_config(algorithm=algorithm, env=env, hyperparameters=hyperparameters, **fields)
    trainer = Trainer(config, RolloutConfig(replicas=0, envs_per_worker=4), 0, gpus)
    trainer.seed_everything()
    trainer.build()
    return trainer


def trained_weights(job: str, evaluate: bool = False) -> tuple[dict, list[float]]:
    trainer = built_trainer(job, evaluate)
    try:
        returns = [trainer.step()[0]["episode_return_mean"] for _ in range(ITERATIONS)]
        return trainer.optimizer.policy.get_weights(), returns
    finally:
        trainer.stop()


def assert_same_state(copy: TorchPolicy, learner: TorchPolicy) -> None:
    """Every parameter and buffer (SAC's log alpha, ES's observation statistics) equal, and the
    timesteps that schedules such as DQN's epsilon read."""
    learned = learner.model.state_dict()
    held = copy.model.state_dict()
    assert held.keys() == learned.keys()
    for key, value in learned.items():
        assert torch.equal(held[key], value.cpu()), key
    assert copy.global_timesteps == learner.global_timesteps


def record_acting(worker: RolloutWorker, monkeypatch) -> list[str]:
    """Check, whenever the worker acts, that its copy holds the learner's state; returns the
    list of the methods that acted, in order."""
    acted: list[str] = []
    for method in ("sample", "evaluate_perturbations", "evaluate"):
        original = getattr(worker, method)

        def checked(*args, _original=original, _method=method, **kwargs):
            assert_same_state(worker.acting_policy, worker.policy)
            acted.append(_method)
            return _original(*args, **kwargs)

        monkeypatch.setattr(worker, method, checked)
    return acted


# -- the decision ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device, copy", [("cpu", False), ("cuda:0", True), ("cuda:1", True), ("mps", True)]
)
def test_the_local_worker_samples_with_a_copy_only_of_a_learner_off_the_cpu(device, copy):
    assert samples_on_a_cpu_copy(device) is copy


@pytest.mark.parametrize("job", JOBS)
def test_a_cpu_learner_samples_with_its_own_policy_and_fetches_no_weights(job, monkeypatch):
    fetched: list[int] = []
    original = TorchPolicy.get_weights
    monkeypatch.setattr(TorchPolicy, "get_weights", lambda p: fetched.append(1) or original(p))
    trainer = built_trainer(job)
    try:
        worker = trainer.workers.local_worker
        assert worker.acting_policy is worker.policy is trainer.optimizer.policy
        assert not trainer.workers.local_copy
        trainer.step()
        assert not fetched  # no remote workers, no copy: no weights leave the learner
    finally:
        trainer.stop()


# -- the copy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.usefixtures("learner_off_the_cpu")
def test_the_copy_is_a_cpu_policy_of_its_own_sharing_the_learners_generators(job):
    trainer = built_trainer(job)
    try:
        worker = trainer.workers.local_worker
        learner, copy = trainer.optimizer.policy, worker.acting_policy
        assert worker.policy is learner and copy is not learner
        assert type(copy) is type(learner)
        assert copy.model is not learner.model
        assert copy.device == torch.device("cpu")
        assert all(t.device.type == "cpu" for t in copy.model.state_dict().values())
        assert copy.towers is None  # LocalMultiGPU's towers are the learner's alone
        # One random stream for acting and learning, saved with the learner's state.
        assert copy.generator is learner.generator and copy.rng is learner.rng
    finally:
        trainer.stop()


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.usefixtures("learner_off_the_cpu")
def test_the_copy_holds_the_learners_weights_whenever_it_acts(job, monkeypatch):
    trainer = built_trainer(job, evaluate=True)
    try:
        worker = trainer.workers.local_worker
        acted = record_acting(worker, monkeypatch)
        for _ in range(ITERATIONS):
            trainer.step()
            # Evaluated after the learn step: the copy has the learner's newest weights.
            assert acted[-1] == "evaluate"
            assert_same_state(worker.acting_policy, trainer.optimizer.policy)
        assert len(acted) > ITERATIONS  # it sampled (or ran perturbations) too
    finally:
        trainer.stop()


@pytest.mark.parametrize("job", JOBS)
def test_training_with_the_copy_is_training_with_the_learners_policy(job, monkeypatch):
    """The copy changes where acting runs, never what is learned: bit for bit on one device."""
    own, own_returns = trained_weights(job, evaluate=True)
    monkeypatch.setattr(trainer_module, "samples_on_a_cpu_copy", lambda device: True)
    copied, copied_returns = trained_weights(job, evaluate=True)
    assert copied_returns == pytest.approx(own_returns, nan_ok=True)
    assert copied.keys() == own.keys()
    for key, value in own.items():
        assert torch.equal(torch.from_numpy(copied[key]), torch.from_numpy(value)), key


@pytest.mark.usefixtures("learner_off_the_cpu")
def test_the_copy_explores_as_the_learner_schedules(monkeypatch):
    """DQN's epsilon follows the timesteps the learner is told, on the copy too."""
    trainer = built_trainer("DQN/SyncReplay")
    try:
        worker = trainer.workers.local_worker
        epsilons: list[tuple[float, float]] = []
        original = worker.sample
        monkeypatch.setattr(
            worker,
            "sample",
            lambda *steps: (
                epsilons.append((worker.acting_policy.epsilon, worker.policy.epsilon))
                or original(*steps)
            ),
        )
        for _ in range(ITERATIONS):
            trainer.step()
        assert [copy for copy, _ in epsilons] == [learner for _, learner in epsilons]
        assert epsilons[-1][0] < epsilons[0][0]  # decaying
    finally:
        trainer.stop()


@pytest.mark.usefixtures("learner_off_the_cpu")
def test_async_samples_refreshes_the_copy_before_the_local_worker_samples(monkeypatch):
    config = trainer_config(
        algorithm="PPO",
        optimizer="AsyncSamples",
        hyperparameters={"rollout_length": 32, "num_epochs": 1},
    )
    trainer = Trainer(config, RolloutConfig(replicas=0, envs_per_worker=4), 0)
    trainer.seed_everything()
    trainer.build()
    try:
        worker = trainer.workers.local_worker
        assert worker.acting_policy is not worker.policy
        acted = record_acting(worker, monkeypatch)  # sampling holds the learner's lock
        for _ in range(4):
            trainer.step()
        assert acted.count("sample") == 4
    finally:
        trainer.stop()


# -- the log -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "devices, copy, replicas, expected",
    [
        (
            ["cpu"],
            False,
            0,
            "learner on cpu; sampling on the CPU (the driver's with the learner's policy)",
        ),
        (
            ["cuda:0"],
            True,
            4,
            "learner on cuda:0; sampling on the CPU (4 rollout workers; the driver's with a CPU "
            "copy of the policy, refreshed from the learner after each learn step)",
        ),
        (
            ["cuda:0", "cuda:1"],
            True,
            1,
            "learner on cuda:0, cuda:1 (2 towers); sampling on the CPU (1 rollout worker; the "
            "driver's with a CPU copy of the policy, refreshed from the learner after each learn "
            "step)",
        ),
    ],
)
def test_placement_names_where_each_part_runs(devices, copy, replicas, expected):
    assert placement(devices, copy, replicas) == expected


@pytest.mark.usefixtures("learner_off_the_cpu")
def test_the_placement_is_logged_once_at_start(caplog):
    with caplog.at_level(logging.INFO, logger="kuberl_trainer.job.trainer"):
        trainer = built_trainer("PPO/SyncSamples")
        try:
            trainer.step()
        finally:
            trainer.stop()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("learner on")]
    assert logged == [trainer.placement]
    assert "a CPU copy of the policy" in trainer.placement
