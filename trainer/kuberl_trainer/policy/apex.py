"""Ape-X DQN's policy (Horgan et al. 2018): DQN whose every rollout worker explores at a fixed
rate of its own, so that together they cover a range from nearly random to nearly greedy."""

from __future__ import annotations

from kuberl_trainer.policy.dqn import DQNPolicy


class APEXPolicy(DQNPolicy):
    @property
    def epsilon(self) -> float:
        return worker_epsilon(
            self.hp.worker_epsilon,
            self.hp.worker_epsilon_alpha,
            self.worker_index,
            self.num_workers,
        )

    @staticmethod
    def worker_start_order(num_workers: int) -> list[int]:
        """The least and the most exploring workers first, alternately (N, 1, N-1, 2, ...): a
        few workers up already span the range of rates, and the returns reported, those of the
        least exploring third (AsyncReplay), come from the first. In index order, the first
        thirds sampled alone for minutes on a loaded 2-core machine, with no return to report
        and no nearly greedy worker to reach the long episodes."""
        return [num_workers - i // 2 if i % 2 == 0 else 1 + i // 2 for i in range(num_workers)]


def worker_epsilon(base: float, alpha: float, index: int, num_workers: int) -> float:
    """The Ape-X schedule: remote worker i of N (1..N) explores with
    base ** (1 + alpha * (i - 1) / (N - 1)), from base for the first to base ** (1 + alpha) for
    the last. The driver's local worker (index 0) acts greedily: it evaluates, and it samples only
    while no remote worker is up. Without remote workers it is the only sampler, and explores as
    worker 1 of 1."""
    if index == 0:
        return 0.0 if num_workers else base
    return base ** (1 + alpha * (index - 1) / max(1, num_workers - 1))
