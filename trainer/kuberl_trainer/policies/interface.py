"""The Policy interface, free of torch: what optimizers and rollout workers talk to, and what a
remote worker that only acts imports (see policy/acting.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
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
