"""SyncSamples: broadcast weights, gather a batch from every worker, learn on it (PG, A2C, PPO).

With `optimizerConfig.sampleTimeoutSeconds`, a step learns on the batches that arrived in time;
the stragglers' batches are dropped (see `WorkerSet.sample`)."""

from __future__ import annotations

from typing import Any

from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult
from kuberl_trainer.policies.sample_batch import SampleBatch


class SyncSamplesOptimizer(PolicyOptimizer):
    def step(self) -> StepResult:
        with self.timer("weight_sync"):
            self.workers.sync_weights(self.counters.steps_sampled)
        with self.timer("sample"):
            batches = self.workers.sample(sample_timeout(self.config))
        batch = SampleBatch.concat(batches)
        with self.timer("learn"):
            stats = self.policy.learn_on_batch(batch)
        return self._result(batches, stats, batch.env_steps)


def sample_timeout(config: Any) -> float | None:
    """The job's sample timeout; None (wait for every worker) also without a config, as the
    mock-worker tests build optimizers."""
    return None if config is None else config.optimizer_config.sample_timeout_seconds
