"""A learn call reads from the learner's device once: its statistics (and a prioritized buffer's
TD errors) come home in one transfer at its end. Every read of a device tensor from the host
(`.item()`, `float()`, `.numpy()`, `.tolist()`, a boolean mask's selection, ...) waits for the
device to finish all queued work, so one per statistic and SGD step, as before, serialised a GPU
learner on its host. The reads are counted on the CPU, where a torch function mode sees them as
they would happen on a GPU."""

import pytest
import torch
from torch.overrides import TorchFunctionMode

from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.optimizers.replay_buffer import PrioritizedReplayBuffer
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

# What makes the host wait for the device: reading values, or sizes that depend on them.
READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.cpu,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.nonzero,
    torch.nonzero,
    torch.Tensor.masked_select,
    torch.masked_select,
    torch.Tensor.unique,
    torch.unique,
}


class HostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS:
            self.reads.append(func.__name__)
        elif func is torch.Tensor.__getitem__ and _is_mask(args[1]):
            self.reads.append("boolean mask")
        return func(*args, **(kwargs or {}))


def _is_mask(index) -> bool:
    indices = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


@pytest.mark.parametrize(
    ("algorithm", "env"),
    [
        ("PPO", "CartPole-v1"),
        ("PPO", "Pendulum-v1"),
        ("A2C", "CartPole-v1"),
        ("IMPALA", "CartPole-v1"),
        ("APPO", "CartPole-v1"),
        ("APPO", "Pendulum-v1"),
    ],
)
def test_an_on_policy_learn_call_reads_the_device_once(algorithm, env):
    config = trainer_config(algorithm=algorithm, env=env)
    worker = RolloutWorker(policy_class(config), config, num_envs=4, seed=0)
    batch = worker.sample()
    with HostReads() as mode:
        stats = worker.policy.learn_on_batch(batch)
    assert mode.reads == ["numpy"], mode.reads
    assert all(isinstance(value, float) for value in stats.values())


@pytest.mark.parametrize(("algorithm", "env"), [("DQN", "CartPole-v1"), ("SAC", "Pendulum-v1")])
def test_a_replayed_gradient_step_reads_the_device_once(algorithm, env):
    """Its statistics and the TD errors a prioritized buffer turns into priorities, together."""
    config = trainer_config(algorithm=algorithm, env=env)
    worker = RolloutWorker(policy_class(config), config, num_envs=4, seed=0)
    buffer = PrioritizedReplayBuffer(1000, alpha=0.6, seed=0)
    buffer.add(worker.sample().columns)
    columns = buffer.sample(32, beta=0.4)
    with HostReads() as mode:
        stats, td_errors = worker.policy.learn_on_replay_batch(columns)
    assert mode.reads == ["numpy"], mode.reads
    assert td_errors.shape == (32,)
    assert all(isinstance(value, float) for value in stats.values())
