"""SyncSamples: broadcast weights, gather a batch from every worker, learn on it (PG, A2C, PPO)."""

from __future__ import annotations

from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult
from kuberl_trainer.sample_batch import SampleBatch


class SyncSamplesOptimizer(PolicyOptimizer):
    def step(self) -> StepResult:
        with self.timer("weight_sync"):
            self.workers.sync_weights(self.counters.steps_sampled)
        with self.timer("sample"):
            batches = self.workers.sample()
        batch = SampleBatch.concat(batches)
        with self.timer("learn"):
            stats = self.policy.learn_on_batch(batch)
        return self._result(batches, stats, len(batch))
