"""The Policy interface, free of torch: what optimizers and rollout workers talk to, and what a
remote worker that only acts imports (see policy/acting.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.sample_batch import SampleBatch

if TYPE_CHECKING:  # a remote worker gets a Frozen copy, the config never imported (frozen.py)
    from kuberl_contract.config import AnyTrainerConfig

Weights = dict[str, np.ndarray]
Stats = dict[str, float]


class Policy(ABC):
    """What the RLlib paper calls a policy graph: a model, how to act, how to postprocess a
    trajectory and how to learn. Optimizers and workers only ever talk to this interface."""

    STAT_KEYS: ClassVar[tuple[str, ...]] = ()
    """The statistics its learn step returns (progress_row.POLICY_STATS); GRAD_NORM only where
    max_grad_norm clips."""

    LEARNS_ON_WHOLE_ROLLOUTS: ClassVar[bool] = False
    """Its learn step cuts a batch into sequences of rollout_length steps (V-trace), so the
    synchronous optimizers give each worker whole rollouts to sample."""

    # Set by the rollout worker that holds the policy: 0 for the driver's local worker, 1..N for
    # the remote ones (Ape-X explores at a rate per worker).
    worker_index: int = 0
    num_workers: int = 0

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        self.spaces = spaces
        self.config = config
        self.hp = config.hyperparameters
        self.global_timesteps = 0

    @abstractmethod
    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions to send to the envs for a (N, obs_dim) batch, and the columns to record for
        them (at least `actions`, in the form the loss needs)."""

    @abstractmethod
    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Turn time-major (T, N, ...) rollout columns into the flat training columns. Estimators
        run over the whole window; the `valid` column marks the envs' reset steps, which must not
        be learned from (see sample_batch.VALID)."""

    @abstractmethod
    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        """Improve the policy on a batch; returns scalar statistics (losses, KL, ...)."""

    @abstractmethod
    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Stats]: ...

    @abstractmethod
    def apply_gradients(self, gradients: list[np.ndarray]) -> None: ...

    @abstractmethod
    def get_weights(self) -> Weights: ...

    @abstractmethod
    def set_weights(self, weights: Weights) -> None: ...

    @abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue training: weights, optimizer state, RNG, schedules."""

    @abstractmethod
    def set_state(self, state: dict[str, Any]) -> None: ...

    def begin_episodes(self, starts: np.ndarray) -> None:
        """Told by the rollout worker after each env step which lanes (a (N,) bool mask) begin an
        episode with the observation the step returned: a recurrent policy starts their memory
        afresh on its next `compute_actions`. Nothing for a policy without memory."""
        return None

    def get_memory(self) -> Any:
        """What a recurrent policy carries across `compute_actions` calls for its lanes (None: a
        fresh memory, and for a policy without one)."""
        return None

    def set_memory(self, memory: Any) -> None:
        """Carry `memory` (a `get_memory()`, or None for a fresh one) from now on."""
        return None

    def set_global_timesteps(self, timesteps: int) -> None:
        """Told by the optimizer before sampling and learning, for schedules such as epsilon or a
        decaying learning rate."""
        self.global_timesteps = timesteps

    def limit_threads(self, threads: int) -> None:
        """Compute on at most `threads` threads of this process (a remote worker's CPUs). Numpy
        needs nothing: Ray sets a worker's OMP_NUM_THREADS, which OpenBLAS reads, to its CPUs."""
        return None

    @staticmethod
    def worker_start_order(num_workers: int) -> list[int]:
        """The remote workers' indices (1..num_workers) in the order they start where not all
        can start at once (see WorkerSet): any order serves workers that differ only in their
        seeds."""
        return list(range(1, num_workers + 1))


PolicyFactory = Callable[[SpaceInfo, "AnyTrainerConfig", int], Policy]
"""What a rollout worker builds its policy with from its spaces, the config and its seed: a policy
class, or policy.acting.ActingOnly."""


class EpisodeStarts:
    """Which lanes begin an episode at each of `run_episodes`' acts, from the episode each lane is
    on (its `episodes`): all at the first act; then a lane whose episode changed at an act was on
    its reset step there (run_episodes moves a lane on once its episode ended), and it begins the
    new episode at the next act."""

    def __init__(self) -> None:
        self.previous: np.ndarray | None = None
        self.resetting: np.ndarray | None = None

    def __call__(self, episodes: np.ndarray) -> np.ndarray:
        if self.previous is None or self.resetting is None:
            starts = np.ones(len(episodes), dtype=bool)
            self.resetting = np.zeros(len(episodes), dtype=bool)
        else:
            starts, self.resetting = self.resetting, episodes != self.previous
        self.previous = episodes.copy()
        return starts


@contextmanager
def memory_of_its_own(policy: Policy) -> Iterator[Callable[[np.ndarray], None]]:
    """Play episodes on other envs with `policy` (an evaluation's) without disturbing the memory
    a recurrent policy carries for its sampling lanes: a fresh memory meanwhile, the sampling one
    back after. Yields `follow(episodes)`, to call before each of `run_episodes`' acts with the
    episode each lane is on (see EpisodeStarts)."""
    saved = policy.get_memory()
    policy.set_memory(None)
    starts = EpisodeStarts()
    try:
        yield lambda episodes: policy.begin_episodes(starts(episodes))
    finally:
        policy.set_memory(saved)
