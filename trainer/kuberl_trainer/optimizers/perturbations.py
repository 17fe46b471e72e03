"""Perturbations (ES): broadcast the parameters, have the workers evaluate antithetic pairs of
perturbations of them, and step the parameters along the gradient the returns estimate
(Salimans et al. 2017, as RLlib's ES).

The noise is never sent: the driver draws one table from a fixed seed, puts it once in the object
store, and every call names it, so the workers of a node share one copy (a replacement worker's
first call fetches it like any other). A worker picks where its perturbations start in the table
and returns only those indices and the returns, a few numbers per episode, so one driver feeds
many cheap workers. The update ranks all the returns together (centered ranks in [-0.5, 0.5],
ties sharing a rank), weighs each pair's noise by the difference of its two ranks, and hands the
negated sum to the policy's Adam step (with l2_coeff weight decay).

A step keeps requestsInFlightPerWorker calls on each worker until the calls finished or in flight
cover episodes_per_batch episodes; each call runs one episode per env of its worker. A worker lost
mid-step loses its calls: others take them over, and the worker pool replaces and counts the worker.
Without remote workers the local worker evaluates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult
from kuberl_trainer.policies.evolution import noise_rows, noise_table
from kuberl_trainer.rollouts.pool_events import Completed
from kuberl_trainer.rollouts.rollout_worker import Perturbations
from kuberl_trainer.rollouts.worker_set import WorkerSet

# Noise rows multiplied at a time in the gradient estimate: bounds its memory for large networks.
_ROWS_PER_CHUNK = 256


class PerturbationsOptimizer(PolicyOptimizer):
    def __init__(self, workers: WorkerSet, config: Any):
        super().__init__(workers, config)
        hp = config.hyperparameters
        num_params = self.policy.num_params
        if hp.noise_size <= num_params:
            raise InvalidJobError(
                f"hyperparameters.noise_size: {hp.noise_size:,} numbers cannot hold a perturbation "
                f"of the network's {num_params:,} parameters: give far more (a perturbation is a "
                "slice that long starting at a random place in the table)"
            )
        self.pairs_per_batch = hp.episodes_per_batch // 2
        self.pairs_per_call = math.ceil(workers.local_worker.num_envs / 2)
        self.requests_per_worker = config.optimizer_config.requests_in_flight_per_worker or 2
        self.noise = noise_table(hp.noise_size)  # the driver's copy, for the gradient estimate
        self._noise_ref = None
        if workers.num_remote:  # never Ray without remote workers
            import ray

            self._noise_ref = ray.put(self.noise)

    def step(self) -> StepResult:
        with self.timer("weight_sync"):
            self.workers.sync_weights(self.counters.steps_sampled)
        results = self._evaluate()
        indices = np.concatenate([r.noise_indices for r in results])
        returns = np.concatenate([r.returns for r in results])
        lengths = np.concatenate([r.lengths for r in results])
        with self.timer("learn"):
            stats = self._update(indices, returns)
            # For the next batch: this one's returns were earned with the statistics it began with.
            count, total, sumsq = zip(*(r.observations for r in results), strict=True)
            self.policy.add_observation_stats(sum(count), sum(total), sum(sumsq))
        steps = int(lengths.sum())
        self.counters.steps_sampled += steps
        self.counters.steps_trained += steps
        return StepResult(stats, returns.ravel(), lengths.ravel(), steps, steps)

    def _evaluate(self) -> list[Perturbations]:
        """Results covering pairs_per_batch pairs, all evaluated with the current parameters: no
        call is left in flight, so none brings back an older theta's returns."""
        results: list[Perturbations] = []
        pairs = 0
        while pairs < self.pairs_per_batch:
            healthy = self.workers.healthy_indices
            if not healthy:  # none asked for, or all being replaced: the local worker evaluates
                results.append(
                    self.workers.local_worker.evaluate_perturbations(
                        self.noise, self.pairs_per_call
                    )
                )
                pairs += self.pairs_per_call
                continue
            for index in healthy:
                while self.workers.in_flight(index) < self.requests_per_worker and (
                    pairs + self._pairs_in_flight(healthy) < self.pairs_per_batch
                ):
                    self.workers.call(
                        index, "evaluate_perturbations", self._noise_ref, self.pairs_per_call
                    )
            with self.timer("wait"):
                events = self.workers.events()
            for event in events:  # a lost worker's calls are dropped: others take them over
                if isinstance(event, Completed):
                    results.append(event.result)
                    pairs += len(event.result.noise_indices)
        return results

    def _pairs_in_flight(self, healthy: list[int]) -> int:
        return self.pairs_per_call * sum(self.workers.in_flight(index) for index in healthy)

    def _update(self, indices: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        """An Adam step along the gradient the pairs' returns estimate."""
        ranks = centered_ranks(returns)
        weights = ranks[:, 0] - ranks[:, 1]
        gradient = weighted_noise(self.noise, indices, weights, self.policy.num_params)
        gradient /= returns.size  # as RLlib's ES: the mean over the episodes
        self.policy.set_global_timesteps(self.counters.steps_sampled)
        return self.policy.apply_flat_gradient(-gradient)  # a loss gradient: ascend the returns


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank among all of them, scaled to [-0.5, 0.5], in `values`' shape. Equal values
    share their mean rank, so a pair whose episodes returned the same contributes nothing
    (CartPole's many returns of exactly 500 would otherwise be ranked by chance)."""
    flat = values.ravel()
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # the lowest rank of each distinct value
    ranks = (first + (counts - 1) / 2)[inverse]
    return (ranks / (flat.size - 1) - 0.5).reshape(values.shape)


def weighted_noise(
    noise: np.ndarray, indices: np.ndarray, weights: np.ndarray, dim: int
) -> np.ndarray:
    """sum_i weights[i] * eps_i over the perturbations of `dim` numbers starting at `indices`."""
    total = np.zeros(dim)
    for start in range(0, len(indices), _ROWS_PER_CHUNK):
        rows = noise_rows(noise, indices[start : start + _ROWS_PER_CHUNK], dim)
        total += weights[start : start + _ROWS_PER_CHUNK] @ rows
    return total
