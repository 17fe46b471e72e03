"""The policy optimizers (the execution strategy, `spec.trainer.optimizer`) and their settings
(`spec.trainer.optimizerConfig`), with which optimizers read each setting."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import Field

from kuberl_contract.config.base import Spec


class OptimizerName(StrEnum):
    """The policy optimizers of the RLlib paper that kuberl implements."""

    SYNC_SAMPLES = "SyncSamples"
    SYNC_REPLAY = "SyncReplay"
    ASYNC_GRADIENTS = "AsyncGradients"
    ASYNC_REPLAY = "AsyncReplay"
    ASYNC_SAMPLES = "AsyncSamples"
    LOCAL_MULTI_GPU = "LocalMultiGPU"
    PERTURBATIONS = "Perturbations"


# Short names for the tables.
SYNC_SAMPLES, SYNC_REPLAY = OptimizerName.SYNC_SAMPLES, OptimizerName.SYNC_REPLAY
ASYNC_SAMPLES, ASYNC_REPLAY = OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY
ASYNC_GRADIENTS, LOCAL_MULTI_GPU = OptimizerName.ASYNC_GRADIENTS, OptimizerName.LOCAL_MULTI_GPU
PERTURBATIONS = OptimizerName.PERTURBATIONS


@dataclass(frozen=True)
class OptimizerRow:
    """One optimizer: what it hands the policy, which settings it reads, and its class. Adding an
    optimizer is its OptimizerName, its row here and its file."""

    feeds: str
    """What it hands the policy, for the message that rejects a pairing that cannot work."""
    settings: frozenset[str]
    """The OptimizerConfig fields it reads; each field's description starts with the names of
    the optimizers that read it (tests hold the two together)."""
    implementation: str
    """Its class as "module:Class", imported only when a job runs it
    (kuberl_trainer.job.algorithms), so that the config stays free of torch."""


_PACKAGE = "kuberl_trainer.optimizers"

OPTIMIZERS: dict[OptimizerName, OptimizerRow] = {
    SYNC_SAMPLES: OptimizerRow(
        "learns on a fresh batch from every worker",
        frozenset({"sample_timeout_seconds"}),
        f"{_PACKAGE}.sync_samples:SyncSamplesOptimizer",
    ),
    SYNC_REPLAY: OptimizerRow(
        "learns on transitions replayed from a buffer",
        frozenset({"sample_timeout_seconds"}),
        f"{_PACKAGE}.sync_replay:SyncReplayOptimizer",
    ),
    ASYNC_GRADIENTS: OptimizerRow(
        "applies one gradient per worker batch, computed on the worker",
        frozenset({"requests_in_flight_per_worker"}),
        f"{_PACKAGE}.async_gradients:AsyncGradientsOptimizer",
    ),
    ASYNC_REPLAY: OptimizerRow(
        "learns on transitions replayed from sharded buffers",
        frozenset(
            {
                "requests_in_flight_per_worker",
                "learner_queue_size",
                "broadcast_interval",
                "replay_shards",
                "cpus_per_replay_shard",
            }
        ),
        f"{_PACKAGE}.async_replay:AsyncReplayOptimizer",
    ),
    ASYNC_SAMPLES: OptimizerRow(
        "learns on batches of slightly older policies",
        frozenset(
            {
                "requests_in_flight_per_worker",
                "learner_queue_size",
                "broadcast_interval",
                "max_policy_lag",
            }
        ),
        f"{_PACKAGE}.async_samples:AsyncSamplesOptimizer",
    ),
    LOCAL_MULTI_GPU: OptimizerRow(
        "splits every SGD minibatch of a fresh batch across the learner's devices",
        frozenset({"sample_timeout_seconds"}),
        f"{_PACKAGE}.local_multi_gpu:LocalMultiGPUOptimizer",
    ),
    PERTURBATIONS: OptimizerRow(
        "steps the parameters by the returns of perturbed copies of them",
        frozenset({"requests_in_flight_per_worker"}),
        f"{_PACKAGE}.perturbations:PerturbationsOptimizer",
    ),
}
"""The one optimizer table: every other view of the optimizers is derived from it."""


def optimizers_using(setting: str) -> frozenset[OptimizerName]:
    """The optimizers that read an OptimizerConfig field."""
    return frozenset(name for name, row in OPTIMIZERS.items() if setting in row.settings)


# Said by the RLJob's validation and, for a driver started without one, by the optimizer.
LEARNER_GPUS_NEEDED = (
    "learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's GPUs and needs 2 "
    "or more (where no CUDA device is visible, each one becomes a CPU tower); set gpus to 2 or "
    "more, or use SyncSamples"
)

# spec.learner.device (see kuberl_trainer.job.device_choice): with a learner GPU, whether the
# learner times its first learn calls on the GPU and on the CPU and keeps the faster, or keeps the
# GPU.
LearnerDevice = Literal["auto", "gpu"]


class OptimizerConfig(Spec):
    """Settings of the execution strategy. Each applies to the optimizers its description names;
    setting one the job's optimizer does not use is rejected."""

    sample_timeout_seconds: float | None = Field(None, gt=0)
    """SyncSamples, SyncReplay, LocalMultiGPU: seconds a step waits for its rollout workers before
    learning on the batches that arrived (at least one). The late workers' batches are dropped and
    counted as stragglers, and a straggler sits out the steps until it is free again. Null waits
    for every worker."""

    requests_in_flight_per_worker: int | None = Field(None, ge=1, le=16)
    """AsyncSamples, AsyncGradients, AsyncReplay, Perturbations: calls kept queued on each
    rollout worker, so a worker never idles while its last result travels (RLlib's
    max_requests_in_flight_per_env_runner, 2). Null takes the optimizer's own: 1 for
    AsyncSamples, where each call in flight adds a learner step of lag per worker (the lag is
    what bounds how many workers IMPALA can take) and saves a worker only the moments its result
    takes to travel; 2 for the others. AsyncSamples keeps fewer in flight in all where its
    learner cannot take more: as many as it learns on while one call samples, plus a train
    batch's (see its module)."""

    learner_queue_size: int | None = Field(None, ge=1, le=1024)
    """AsyncSamples, AsyncReplay: batches waiting for the learner thread at most. A full queue
    holds the driver back (backpressure) instead of growing memory (RLlib's learner_queue_size,
    16). Null takes the optimizer's own: 1 for AsyncSamples (every queued batch is one more step
    of lag for the batches behind it, and one waiting batch keeps the learner fed), 16 for
    AsyncReplay (its batches are replayed minibatches, which do not age)."""

    broadcast_interval: int = Field(1, ge=1)
    """AsyncSamples, AsyncReplay: learner steps between fresh weights for a worker that returns a
    result; larger values save object-store traffic at the cost of policy lag (RLlib's IMPALA
    broadcast_interval 1; Ape-X's max_weight_sync_delay plays the same part)."""

    max_policy_lag: int | None = Field(32, ge=1)
    """AsyncSamples: the most learner steps a batch may lag when the learner takes it (steps
    between the weights it was sampled with and the learner's). An older batch is dropped, not
    learned on, and counted in stale_batches_dropped; in a train batch concatenated from several
    sample calls only the stale ones are cut out. AsyncSamples keeps a batch's lag to a few
    learner steps by keeping in flight only the sample calls its learner takes while one
    samples; 32 catches what is left (the first batch of a worker that started late, sampled
    with the first weights, and workers beyond what the learner can take) at the cost of the env
    steps dropped. Null never drops (RLlib's IMPALA)."""

    replay_shards: int = Field(2, ge=1, le=256)
    """AsyncReplay: replay-buffer actors, each holding buffer_size / replay_shards transitions and
    sampling its own prioritized minibatches (RLlib's num_replay_buffer_shards, 4)."""

    cpus_per_replay_shard: float = Field(0.0, ge=0.0)
    """AsyncReplay: CPUs reserved for each replay shard. 0 as in RLlib: shards mostly wait on the
    learner, and they are placed beside the driver, off the preemptible rollout nodes."""
