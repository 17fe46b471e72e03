"""The PolicyOptimizer interface: `step()` does one iteration of distributed work."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kuberl_trainer.policies.sample_batch import SampleBatch, merged_policy_returns
from kuberl_trainer.rollouts.worker_set import WorkerSet


@dataclass
class StepResult:
    """What one optimizer step produced, for the driver's metrics."""

    learner_stats: dict[str, float]
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    steps_sampled: int
    steps_trained: int
    policy_returns: dict[str, np.ndarray] | None = None
    """A multi-agent job's returns of each policy's agents (see SampleBatch.policy_returns)."""


@dataclass
class StepCounters:
    """Counters that survive checkpoints: schedules and stop conditions depend on them."""

    steps_sampled: int = 0
    steps_trained: int = 0
    timers: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class PolicyOptimizer(ABC):
    def __init__(self, workers: WorkerSet, config: Any):
        self.workers = workers
        self.config = config
        self.counters = StepCounters()

    @property
    def policy(self):
        """The learner's policy: the local worker's."""
        return self.workers.local_worker.policy

    @abstractmethod
    def step(self) -> StepResult: ...

    def place(self, devices: list[str]) -> None:
        """Put the learner on its devices, one per learner GPU (see trainer.learner_devices):
        the policy learns on the first."""
        self.policy.to(devices[0])

    @property
    def policy_lock(self) -> AbstractContextManager | threading.Lock:
        """Held by whoever reads or changes the learner's policy outside `step()` (the driver's
        evaluations and checkpoints) while a learner thread may be training it."""
        return nullcontext()

    def stop(self) -> None:  # noqa: B027 (optional: the synchronous optimizers start nothing)
        """End what the optimizer started beside the workers (a learner thread, replay actors)."""

    def save(self) -> dict[str, Any]:
        return {
            "steps_sampled": self.counters.steps_sampled,
            "steps_trained": self.counters.steps_trained,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.counters.steps_sampled = state["steps_sampled"]
        self.counters.steps_trained = state["steps_trained"]

    @contextmanager
    def timer(self, name: str):
        start = time.perf_counter()
        yield
        self.counters.timers[name] += time.perf_counter() - start

    def _result(self, batches: list[SampleBatch], stats: dict[str, float], trained: int):
        sampled = sum(b.env_steps for b in batches)
        self.counters.steps_sampled += sampled
        self.counters.steps_trained += trained
        return StepResult(
            stats,
            np.concatenate([b.episode_returns for b in batches]),
            np.concatenate([b.episode_lengths for b in batches]),
            sampled,
            trained,
            merged_policy_returns(batches),
        )


def mean_statistics(stats: list[dict[str, float]]) -> dict[str, float]:
    """Each statistic's mean over the learn calls that reported it (a multi-agent job's policy
    reports none in a call without rows of its agents)."""
    keys = dict.fromkeys(key for each in stats for key in each)
    return {key: float(np.mean([each[key] for each in stats if key in each])) for key in keys}
