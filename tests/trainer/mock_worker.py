"""The bookkeeping of a mock rollout worker for the optimizers' control-flow tests: it runs as a
real Ray actor and records the calls it served and the weights versions it was sent. Each test
module adds its sampling or gradient method and its mock policy."""

import os

from kuberl_trainer.rollouts.rollout_worker import RolloutWorker


class MockWorker:
    as_remote = classmethod(RolloutWorker.as_remote.__func__)

    def __init__(self, index, policy):
        self.index = index
        self.policy = policy
        self.calls = 0
        self.received: list[int] = []  # weights versions (weights["w"][0]), in the order they came

    def set_weights(self, weights, global_timesteps):
        self.received.append(int(weights["w"][0]))

    def get_weights(self):
        return self.policy.get_weights()

    def report(self):
        return self.index, self.calls, self.received

    def pid(self):
        return os.getpid()

    def close(self):
        pass
