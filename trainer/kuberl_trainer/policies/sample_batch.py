"""SampleBatch: what rollout workers hand the optimizer, as plain numpy arrays.

Numpy arrays travel through Ray's object store without copies; torch tensors are made only where
the learner needs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

OBS = "obs"
NEXT_OBS = "next_obs"
ACTIONS = "actions"
REWARDS = "rewards"
TERMINATEDS = "terminateds"
TRUNCATEDS = "truncateds"
LOGP = "logp"
VALUES = "values"
ADVANTAGES = "advantages"
VALUE_TARGETS = "value_targets"
# n-step DQN: gamma^steps, or 0 where the n-step window ended in a termination
BOOTSTRAP_DISCOUNTS = "bootstrap_discounts"
# False on an env's reset step (the step after its episode ended, which only resets it): no
# transition, so nothing to learn from. Policies drop these rows, or keep them masked where they
# need whole sequences (IMPALA).
VALID = "valid"


@dataclass
class SampleBatch:
    """Columns of equal length plus the episodes that finished while sampling them."""

    columns: dict[str, np.ndarray]
    episode_returns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    episode_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    policy_lag: float = 0.0
    """Learner steps between the weights that sampled the rows and the learner's, as the
    optimizer that hands the batch to its learner measured it (their mean over the sample calls
    in it); 0 where sampling and learning take turns. IMPALA splits a batch by it."""
    sample_s: float = 0.0
    """Seconds the worker took to sample it (its `sample()` call; 0 for a concatenation):
    AsyncSamples keeps as many calls in flight as its learner takes batches in that time less
    cpu_wait_s, and counts a worker as held up once it has kept a call ten times that long (at
    least 1 s)."""
    cpu_wait_s: float = 0.0
    """Of sample_s, the seconds the sampling thread waited for a CPU (see cpu_quota.cpu_wait_s):
    on CPUs shared by more processes than they hold, a call is slow because others run, and
    more calls in flight would only slow each other and the learner down."""
    normalization: dict | None = None
    """With spec.trainer.normalization on, the statistics of what the remote worker that sampled
    the batch saw since its previous one (a NormalizationStats state), which the driver's
    WorkerSet merges into the global statistics when the batch arrives; None otherwise. A
    concatenation carries none: its parts' were merged on arrival."""

    policy_returns: dict[str, np.ndarray] | None = None
    """In a multi-agent job of several policies, each policy's agents' returns in the episodes
    that finished (episode_returns are whole episodes': the sum of their agents'); None
    otherwise."""

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    @property
    def env_steps(self) -> int:
        """The env steps the batch holds: its rows, less the reset steps kept as masked rows."""
        if VALID in self.columns:
            return int(np.count_nonzero(self.columns[VALID]))
        return len(self)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]

    @staticmethod
    def concat(batches: list[SampleBatch]) -> SampleBatch:
        if len(batches) == 1:
            return batches[0]
        keys = batches[0].columns.keys()
        return SampleBatch(
            {k: np.concatenate([b.columns[k] for b in batches]) for k in keys},
            np.concatenate([b.episode_returns for b in batches]),
            np.concatenate([b.episode_lengths for b in batches]),
            policy_returns=merged_policy_returns(batches),
        )

    def minibatches(self, size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        """One shuffled pass in minibatches of `size` rows (the last one may be larger, so
        no sample is dropped and no minibatch is tiny)."""
        n = len(self)
        order = rng.permutation(n)
        count = max(1, n // size)
        for chunk in np.array_split(order, count):
            yield {k: v[chunk] for k, v in self.columns.items()}


def merged_policy_returns(parts: list) -> dict[str, np.ndarray] | None:
    """The `policy_returns` of batches (or anything carrying them), merged; None where none has
    any."""
    merged: dict[str, list[np.ndarray]] = {}
    for part in parts:
        for name, returns in (part.policy_returns or {}).items():
            merged.setdefault(name, []).append(returns)
    return {name: np.concatenate(values) for name, values in merged.items()} or None
