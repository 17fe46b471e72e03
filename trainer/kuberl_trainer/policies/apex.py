"""Ape-X DQN's policy (Horgan et al. 2018): DQN whose every rollout worker explores at a fixed
rate of its own, so that together they cover a range from nearly random to nearly greedy."""

from __future__ import annotations

from kuberl_trainer.policies.distributions import worker_epsilon
from kuberl_trainer.policies.dqn import DQNPolicy


class APEXPolicy(DQNPolicy):
    @property
    def epsilon(self) -> float:
        return worker_epsilon(self.hp, self.worker_index, self.num_workers)

    @staticmethod
    def worker_start_order(num_workers: int) -> list[int]:
        """The most and the least exploring workers first, alternately (1, N, 2, N-1, ...): the
        first samples with the highest rate, so that learning starts from varied play, and the
        second is among the least exploring third, whose returns AsyncReplay reports. In index
        order, 12 workers on a loaded 2-core machine sampled without a return to report for over
        a minute. With the least exploring first, 2 workers beside a busy process took 132-136k
        env steps to 400 (52-123k with the most exploring first), and failed a 150k budget twice
        in such runs: the nearly greedy one sampled alone while the other started."""
        return [1 + i // 2 if i % 2 == 0 else num_workers - i // 2 for i in range(num_workers)]
