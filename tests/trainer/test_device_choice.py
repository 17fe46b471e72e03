"""spec.learner.device: auto, the learner's choice between its GPU and the CPU by the time its
first learn calls take per row on each (see device_choice.py).

There is no GPU here. The trial's decisions are tested on a policy whose learn calls advance a
test clock by what each device is made to cost, with torch's meta device standing in for the GPU;
the trial's wiring is tested on a real trainer whose "GPU" is the CPU, where learning with the
trial must be learning without it, bit for bit. tests/trainer/test_device.py runs it on a real
GPU where there is one."""

from __future__ import annotations

import pytest
import torch

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job import device_choice
from kuberl_trainer.job import trainer as trainer_module
from kuberl_trainer.job.device_choice import LEARN_METHODS, DeviceTrial
from kuberl_trainer.job.trainer import Trainer
from kuberl_trainer.policies.sample_batch import SampleBatch
from testkit import trainer_config

FAKE_GPU = "meta"


class TimedPolicy:
    """A policy whose learn calls cost `cost[device type]` seconds per row on `clock`."""

    def __init__(self, cost: dict[str, float]):
        self.cost = cost
        self.device = torch.device(FAKE_GPU)  # the optimizer placed it on the GPU
        self.now = 0.0
        self.moves: list[str] = []
        self.learned: list[tuple[str, str]] = []  # (method, device type) of each call

    def clock(self) -> float:
        return self.now

    def to(self, device: str) -> TimedPolicy:
        self.device = torch.device(device)
        self.moves.append(self.device.type)
        return self

    def _learn(self, method: str, rows: int) -> dict[str, float]:
        self.learned.append((method, self.device.type))
        self.now += rows * self.cost[self.device.type]
        return {"loss": 0.0}

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        return self._learn("learn_on_batch", len(batch))

    def learn_on_replay_batch(self, columns: dict) -> tuple[dict[str, float], list]:
        return self._learn("learn_on_replay_batch", len(columns["obs"])), []

    def apply_gradients(self, gradients: list) -> None:
        self._learn("apply_gradients", 1)


def batch(rows: int) -> SampleBatch:
    return SampleBatch({"obs": torch.zeros(rows, 4).numpy()})


def trial(policy: TimedPolicy) -> tuple[DeviceTrial, list[tuple[str, str]]]:
    choices: list[tuple[str, str]] = []
    installed = DeviceTrial(
        policy, FAKE_GPU, lambda device, reason: choices.append((device, reason)), policy.clock
    )
    return installed.install(), choices


def test_a_gpu_slower_per_row_leaves_the_learner_on_the_cpu():
    policy = TimedPolicy({FAKE_GPU: 2e-6, "cpu": 1e-6})
    _, choices = trial(policy)
    for _ in range(6):
        policy.learn_on_batch(batch(100))
    # Warm-up and 2 timed calls on the GPU, 2 timed on the CPU, then the CPU for good.
    assert [device for _, device in policy.learned] == [FAKE_GPU] * 3 + ["cpu"] * 3
    assert policy.moves == ["cpu"]
    [(device, reason)] = choices
    assert device == "cpu"
    assert reason == (
        "learn calls took 2.00 us per row on meta and 1.00 on the CPU: learning on the CPU, 2.0x "
        "faster (learner.device: auto; gpu keeps the GPU)"
    )
    assert set(LEARN_METHODS).isdisjoint(vars(policy))


def test_a_gpu_faster_per_row_gets_the_learner_back():
    policy = TimedPolicy({FAKE_GPU: 1e-6, "cpu": 1.5e-6})
    _, choices = trial(policy)
    for _ in range(6):
        policy.learn_on_batch(batch(100))
    assert [device for _, device in policy.learned] == [FAKE_GPU] * 3 + ["cpu"] * 2 + [FAKE_GPU]
    assert policy.moves == ["cpu", FAKE_GPU]
    assert [device for device, _ in choices] == [FAKE_GPU]
    assert "learning on meta, 1.5x faster" in choices[0][1]


def test_a_cpu_clearly_slower_ends_the_trial_after_one_cpu_call():
    """A CNN's learn call can take seconds on a CPU: a second one would only cost time."""
    policy = TimedPolicy({FAKE_GPU: 1e-6, "cpu": 5e-6})
    _, choices = trial(policy)
    for _ in range(5):
        policy.learn_on_batch(batch(100))
    assert [device for _, device in policy.learned] == [FAKE_GPU] * 3 + ["cpu"] + [FAKE_GPU]
    assert [device for device, _ in choices] == [FAKE_GPU]


def test_the_gpus_first_call_is_not_timed():
    """CUDA's lazy start and cuDNN's search make the first call slow: it must not count."""
    policy = TimedPolicy({FAKE_GPU: 1e-6, "cpu": 1.5e-6})
    _, choices = trial(policy)
    policy.cost[FAKE_GPU] = 1e-3  # the warm-up
    policy.learn_on_batch(batch(100))
    policy.cost[FAKE_GPU] = 1e-6
    for _ in range(4):
        policy.learn_on_batch(batch(100))
    assert [device for device, _ in choices] == [FAKE_GPU]


def test_calls_are_compared_per_row():
    """An asynchronous learner's batches differ in size: a big batch's longer call on the GPU
    is still the faster per row."""
    policy = TimedPolicy({FAKE_GPU: 1e-6, "cpu": 1.5e-6})
    _, choices = trial(policy)
    for rows in (4096, 4096, 4096, 64, 64):
        policy.learn_on_batch(batch(rows))
    assert [device for device, _ in choices] == [FAKE_GPU]


def test_every_learn_entry_point_counts_towards_one_trial():
    """Replayed minibatches (DQN, SAC, Ape-X) and applied gradients (A3C) are learn calls too;
    applied gradients count as one row each."""
    policy = TimedPolicy({FAKE_GPU: 3e-6, "cpu": 1e-6})
    _, choices = trial(policy)
    policy.learn_on_replay_batch({"obs": [0] * 256})
    policy.apply_gradients([])
    policy.learn_on_replay_batch({"obs": [0] * 256})
    policy.apply_gradients([])
    policy.learn_on_replay_batch({"obs": [0] * 256})
    policy.apply_gradients([])
    assert policy.learned == [
        ("learn_on_replay_batch", FAKE_GPU),
        ("apply_gradients", FAKE_GPU),
        ("learn_on_replay_batch", FAKE_GPU),
        ("apply_gradients", "cpu"),
        ("learn_on_replay_batch", "cpu"),
        ("apply_gradients", "cpu"),
    ]
    assert [device for device, _ in choices] == ["cpu"]


def test_a_learn_call_inside_another_is_timed_with_it():
    class NestedPolicy(TimedPolicy):
        def learn_on_batch(self, batch):
            return self.learn_on_replay_batch({"obs": [0] * len(batch)})[0]

    policy = NestedPolicy({FAKE_GPU: 2e-6, "cpu": 1e-6})
    trial(policy)
    for _ in range(5):
        policy.learn_on_batch(batch(10))
    assert [device for _, device in policy.learned] == [FAKE_GPU] * 3 + ["cpu"] * 2


# -- on a real trainer, its "GPU" the CPU ------------------------------------------------------


def trained(learner_device: str, monkeypatch) -> tuple[Trainer, dict, list]:
    """PPO on CartPole for 6 iterations (a learn call each) with learner.gpus 1 where no CUDA
    device is visible, the trainer made to take its CPU learner for one off the CPU."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(trainer_module, "samples_on_a_cpu_copy", lambda device: True)
    config = trainer_config(
        algorithm="PPO", hyperparameters={"rollout_length": 32, "num_epochs": 2}
    )
    trainer = Trainer(
        config,
        RolloutConfig(replicas=0, envs_per_worker=4),
        0,
        learner_gpus=1,
        learner_device=learner_device,
    )
    trainer.seed_everything()
    trainer.build()
    try:
        placements = [trainer.placement]
        for _ in range(6):
            trainer.step()
            placements.append(trainer.placement)
        return trainer, trainer.optimizer.policy.get_weights(), placements
    finally:
        trainer.stop()


def test_learning_through_the_trial_is_learning_without_it(monkeypatch):
    # Both sides are this CPU, so which is faster is noise: on a loaded machine the first CPU
    # call once took 2.2x the GPU side's and ended the trial a call early. The early end is
    # tested with set timings above; here the trial runs its whole plan.
    monkeypatch.setattr(device_choice, "CLEARLY_SLOWER", float("inf"))
    _, without, _ = trained("gpu", monkeypatch)
    trainer, with_trial, placements = trained("auto", monkeypatch)
    assert with_trial.keys() == without.keys()
    for key, value in without.items():
        assert torch.equal(torch.from_numpy(with_trial[key]), torch.from_numpy(value)), key
    policy = trainer.optimizer.policy
    assert "learn_on_batch" not in vars(policy)
    # Announced at start, decided after the fifth learn call.
    assert placements[0].endswith(
        "its first learn calls are timed there and on the CPU, and it stays on the faster "
        "(learner.device: auto)"
    )
    assert placements[4] == placements[0]
    assert placements[5].startswith("learn calls took ") and placements[6] == placements[5]


def test_device_gpu_times_nothing(monkeypatch):
    trainer, _, placements = trained("gpu", monkeypatch)
    assert set(placements) == {
        "learner on cpu; sampling on the CPU (the driver's with a CPU copy of the policy, "
        "refreshed from the learner after each learn step)"
    }
    assert "learn_on_batch" not in vars(trainer.optimizer.policy)


@pytest.mark.parametrize("device", ["auto", "gpu"])
def test_no_gpu_asked_for_no_trial(device, monkeypatch):
    """learner.gpus 0 trains on the CPU whatever learner.device says (validation refuses gpu)."""
    monkeypatch.setattr(trainer_module, "samples_on_a_cpu_copy", lambda device: True)
    config = trainer_config(algorithm="PPO", hyperparameters={"rollout_length": 32})
    trainer = Trainer(config, RolloutConfig(replicas=0, envs_per_worker=4), 0, 0, None, device)
    trainer.build()
    try:
        assert "timed" not in trainer.placement
        assert "learn_on_batch" not in vars(trainer.optimizer.policy)
    finally:
        trainer.stop()
