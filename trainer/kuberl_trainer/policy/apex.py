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


def worker_epsilon(base: float, alpha: float, index: int, num_workers: int) -> float:
    """The Ape-X schedule: remote worker i of N (1..N) explores with
    base ** (1 + alpha * (i - 1) / (N - 1)), from base for the first to base ** (1 + alpha) for
    the last. The driver's local worker (index 0) acts greedily: it evaluates, and it samples only
    while no remote worker is up. Without remote workers it is the only sampler, and explores as
    worker 1 of 1."""
    if index == 0:
        return 0.0 if num_workers else base
    return base ** (1 + alpha * (index - 1) / max(1, num_workers - 1))
