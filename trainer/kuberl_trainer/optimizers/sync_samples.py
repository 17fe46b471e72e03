"""SyncSamples: broadcast weights, gather a batch from every worker, learn on it (PG, A2C, PPO).

The batch keeps the size the manifest implies (rollout_length x envsPerWorker x max(1, replicas)
env steps) whatever the number of healthy workers: each samples its share of it
(`fragment_lengths`), so the learning per env step does not depend on the fleet (an elastic one
grows and shrinks while the job runs; a worker lost waits for its replacement).

With `optimizerConfig.sampleTimeoutSeconds`, a step learns on the batches that arrived in time;
the stragglers' batches are dropped (see `WorkerSet.sample`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult
from kuberl_trainer.policies.sample_batch import SampleBatch


class SyncSamplesOptimizer(PolicyOptimizer):
    def step(self) -> StepResult:
        with self.timer("weight_sync"):
            self.workers.sync_weights(self.counters.steps_sampled)
        with self.timer("sample"):
            batches = self.workers.sample(sample_timeout(self.config), self.fragments)
        batch = SampleBatch.concat(batches)
        with self.timer("learn"):
            stats = self.policy.learn_on_batch(batch)
        return self._result(batches, stats, batch.env_steps)

    @property
    def fragments(self) -> Callable[[int], list[int]] | None:
        """Env steps for each of n workers sampling an iteration's batch (see
        `fixed_batch_fragments`)."""
        return fixed_batch_fragments(self.config, self.workers.batch_replicas, self.policy)


def sample_timeout(config: Any) -> float | None:
    """The job's sample timeout; None (wait for every worker) also without a config, as the
    mock-worker tests build optimizers."""
    return None if config is None else config.optimizer_config.sample_timeout_seconds


def fixed_batch_fragments(
    config: Any, replicas: int, policy: Any
) -> Callable[[int], list[int]] | None:
    """n → the env steps each of n workers samples so that together they sample the batch of
    `replicas` workers of rollout_length steps; in whole rollouts of rollout_length where the
    policy learns on sequences of that length (`LEARNS_ON_WHOLE_ROLLOUTS`: V-trace). None (each
    worker its rollout_length) without a config, as the mock-worker tests build optimizers."""
    if config is None:
        return None
    length = config.hyperparameters.rollout_length
    unit = length if getattr(policy, "LEARNS_ON_WHOLE_ROLLOUTS", False) else 1
    return partial(fragment_lengths, length, max(1, replicas), unit=unit)


def fragment_lengths(rollout_length: int, replicas: int, workers: int, unit: int = 1) -> list[int]:
    """The env steps of each of `workers` workers sampling what `replicas` workers of
    `rollout_length` steps would: the same total however many there are, split as evenly as
    whole `unit`s allow (those first in line take one unit more; a worker given 0 sits out)."""
    if workers < 1:
        raise ValueError(f"workers: {workers}; at least one worker samples")
    if rollout_length % unit:
        raise ValueError(f"unit: {unit} does not divide rollout_length {rollout_length}")
    units, extra = divmod(rollout_length * replicas // unit, workers)
    return [(units + (index < extra)) * unit for index in range(workers)]
