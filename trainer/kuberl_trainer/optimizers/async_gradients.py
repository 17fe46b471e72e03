"""AsyncGradients (A3C): every worker samples and computes gradients on its own batch; the driver
applies each gradient as it arrives and sends the new weights back to that worker only.

A step applies a gradient per remote worker at least (one synchronous iteration's worth of
samples: replicas x envsPerWorker x rollout_length env steps), and every other one that has
arrived by then. Without remote workers the local worker computes and applies in turn.

With `requests_in_flight_per_worker` calls on each worker, its next gradient is already being
computed on its old weights while its last one is applied: `policy_lag`, the gradients applied
between a worker's weights and its gradient, is about N - 1 with one call on each of N workers
and 2N - 1 with two. kuberl keeps the default of 2, measured on CartPole-v1 with 2 workers: it
learned no worse (a return of 400 within 20-70k env steps on seeds 0-5, against 25-154k with 1)
at about the same env steps per second on 2 CPUs (4.7k, 4.6k with 1), and a worker on another
node does not idle while its gradient and new weights travel. With many workers, 1 halves the
lag.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kuberl_contract.progress_row import POLICY_LAG
from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult, mean_statistics
from kuberl_trainer.optimizers.flow_control import calls_to_top_up
from kuberl_trainer.policies.sample_batch import merged_policy_returns
from kuberl_trainer.rollouts.pool_events import Completed
from kuberl_trainer.rollouts.rollout_worker import Gradients
from kuberl_trainer.rollouts.worker_set import WorkerSet


class AsyncGradientsOptimizer(PolicyOptimizer):
    def __init__(self, workers: WorkerSet, config: Any):
        super().__init__(workers, config)
        self.requests_per_worker = config.optimizer_config.requests_in_flight_per_worker or 2
        self.num_applied = 0  # gradients applied: the version of the learner's weights
        self._synced = False

    def step(self) -> StepResult:
        if not self._synced:  # workers start from weights of their own seeds
            self.workers.sync_weights(self.counters.steps_sampled)
            self._synced = True
        results: list[Gradients] = []
        lags: list[int] = []
        while len(results) < max(1, self.workers.num_remote):
            healthy = self.workers.healthy_indices
            if not healthy:  # no remote worker (yet): the local one computes and applies
                self.workers.refresh_local_copy()  # gradients were applied since it last sampled
                results.append(self._apply(self.workers.local_worker.compute_gradients()))
                lags.append(0)
                continue
            for index in healthy:
                self._request_gradients(index)  # new workers, and replacements
            with self.timer("wait"):
                events = self.workers.events()
            # A lost worker's calls are dropped with it: nothing here depends on them.
            for event in events:
                if isinstance(event, Completed):
                    lags.append(self.num_applied - event.tag)
                    results.append(self._apply(event.result, event.worker))
                    if self.workers.takes_calls(event.worker):  # not if its node drains
                        self._request_gradients(event.worker)  # behind the weights just sent
        stats = mean_statistics([r.stats for r in results])
        sampled = sum(r.steps for r in results)
        self.counters.steps_sampled += sampled
        self.counters.steps_trained += sampled
        return StepResult(
            stats | {POLICY_LAG: float(np.mean(lags))},
            np.concatenate([r.episode_returns for r in results]),
            np.concatenate([r.episode_lengths for r in results]),
            sampled,
            sampled,
            merged_policy_returns(results),
        )

    def _request_gradients(self, index: int) -> None:
        """Top worker `index` up to its calls in flight, each tagged with the weights version it
        starts from (the worker's newest, which are the learner's)."""
        for _ in range(calls_to_top_up(self.workers.in_flight(index), self.requests_per_worker)):
            self.workers.call_tagged(index, self.num_applied, "compute_gradients")

    def _apply(self, gradients: Gradients, index: int = 0) -> Gradients:
        """Apply a worker's gradients and send the new weights to it alone (remote workers)."""
        with self.timer("apply"):
            self.policy.set_global_timesteps(self.counters.steps_sampled)
            self.policy.apply_gradients(gradients.gradients)
            self.num_applied += 1
        if index:
            with self.timer("weight_sync"):
                self.workers.offer_weights(
                    index, self.num_applied, self.policy.get_weights, self.counters.steps_sampled
                )
        return gradients
