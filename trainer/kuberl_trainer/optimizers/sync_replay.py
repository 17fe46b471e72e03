"""SyncReplay: gather samples from every worker into a replay buffer, then take gradient steps on
minibatches drawn from it: a fixed number per iteration (DQN) or one per env step sampled (SAC),
as the hyperparameters say. The iteration samples as many env steps whatever the number of
healthy workers, and stragglers are dropped, as in SyncSamples."""

from __future__ import annotations

from typing import Any

from kuberl_contract.progress_row import REPLAY_SIZE
from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult, mean_statistics
from kuberl_trainer.optimizers.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from kuberl_trainer.optimizers.sync_samples import fixed_batch_fragments, sample_timeout
from kuberl_trainer.rollouts.worker_set import WorkerSet

# Mixed into the seed so the buffer's draws are independent of the policy's exploration draws.
_REPLAY_STREAM = 1


class SyncReplayOptimizer(PolicyOptimizer):
    def __init__(self, workers: WorkerSet, config: Any):
        super().__init__(workers, config)
        self.hp = config.hyperparameters
        # The whole buffer in save(): exact resumption, checkpoints as large as the buffer.
        self.checkpoint_buffer = config.checkpoint.replay_buffer
        seed = None if config.seed is None else [config.seed, _REPLAY_STREAM]
        if self.hp.prioritized_replay:
            self.buffer: ReplayBuffer = PrioritizedReplayBuffer(
                self.hp.buffer_size,
                self.hp.prioritized_replay_alpha,
                self.hp.prioritized_replay_eps,
                seed,
            )
        else:
            self.buffer = ReplayBuffer(self.hp.buffer_size, seed)

    def step(self) -> StepResult:
        with self.timer("weight_sync"):
            self.workers.sync_weights(self.counters.steps_sampled)
        with self.timer("sample"):
            batches = self.workers.sample(
                sample_timeout(self.config),
                fixed_batch_fragments(self.config, self.workers.batch_replicas, self.policy),
            )
        with self.timer("replay_add"):
            for batch in batches:
                self.buffer.add(batch.columns)
        learning = len(self.buffer) >= self.hp.learning_starts
        gradient_steps = self.hp.gradient_steps_for(sum(map(len, batches))) if learning else 0
        stats: dict[str, float] = {}
        if gradient_steps:
            with self.timer("learn"):
                stats = self._learn(gradient_steps)
        trained = gradient_steps * self.hp.batch_size
        stats |= self.policy.exploration_stats() | {REPLAY_SIZE: len(self.buffer)}
        return self._result(batches, stats, trained)

    def _learn(self, gradient_steps: int) -> dict[str, float]:
        """`gradient_steps` steps on fresh minibatches; the mean of each statistic."""
        learned = []
        prioritized = isinstance(self.buffer, PrioritizedReplayBuffer)
        for _ in range(gradient_steps):
            if prioritized:
                columns = self.buffer.sample(self.hp.batch_size, self.hp.prioritized_replay_beta)
                indices = columns.pop("indices")
            else:
                columns = self.buffer.sample(self.hp.batch_size)
            stats, td_errors = self.policy.learn_on_replay_batch(columns)
            if prioritized:
                self.buffer.update_priorities(indices, td_errors)
            learned.append(stats)
        return mean_statistics(learned)

    def save(self) -> dict[str, Any]:
        state = super().save()
        if self.checkpoint_buffer:
            state["replay_buffer"] = self.buffer.state()
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if "replay_buffer" in state:
            self.buffer.load_state(state["replay_buffer"])
