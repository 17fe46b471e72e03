"""The policy optimizers (the execution strategy, `spec.trainer.optimizer`) and their settings
(`spec.trainer.optimizerConfig`), with which optimizers read each setting."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from kuberl_trainer.config.base import Spec


class OptimizerName(StrEnum):
    """The policy optimizers of the RLlib paper that kuberl implements."""

    SYNC_SAMPLES = "SyncSamples"
    SYNC_REPLAY = "SyncReplay"
    ASYNC_GRADIENTS = "AsyncGradients"
    ASYNC_REPLAY = "AsyncReplay"
    ASYNC_SAMPLES = "AsyncSamples"
    LOCAL_MULTI_GPU = "LocalMultiGPU"
    PERTURBATIONS = "Perturbations"


SYNC_SAMPLES, SYNC_REPLAY = OptimizerName.SYNC_SAMPLES, OptimizerName.SYNC_REPLAY
ASYNC_SAMPLES, ASYNC_REPLAY = OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY
ASYNC_GRADIENTS, LOCAL_MULTI_GPU = OptimizerName.ASYNC_GRADIENTS, OptimizerName.LOCAL_MULTI_GPU
PERTURBATIONS = OptimizerName.PERTURBATIONS

# What each optimizer hands the policy, for the message that rejects a pair that cannot work.
OPTIMIZER_FEEDS: dict[OptimizerName, str] = {
    OptimizerName.SYNC_SAMPLES: "learns on a fresh batch from every worker",
    OptimizerName.ASYNC_SAMPLES: "learns on batches of slightly older policies",
    OptimizerName.ASYNC_GRADIENTS: "applies one gradient per worker batch, computed on the worker",
    OptimizerName.SYNC_REPLAY: "learns on transitions replayed from a buffer",
    OptimizerName.ASYNC_REPLAY: "learns on transitions replayed from sharded buffers",
    OptimizerName.LOCAL_MULTI_GPU: (
        "splits every SGD minibatch of a fresh batch across the learner's devices"
    ),
    OptimizerName.PERTURBATIONS: "steps the parameters by the returns of perturbed copies of them",
}

# Said by the RLJob's validation and, for a driver started without one, by the optimizer.
LEARNER_GPUS_NEEDED = (
    "learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's GPUs and needs 2 "
    "or more (where no CUDA device is visible, each one becomes a CPU tower); set gpus to 2 or "
    "more, or use SyncSamples"
)


class OptimizerConfig(Spec):
    """Settings of the execution strategy. Each applies to the optimizers its description names;
    setting one the job's optimizer does not use is rejected."""

    sample_timeout_seconds: float | None = Field(None, gt=0)
    """SyncSamples, SyncReplay, LocalMultiGPU: seconds a step waits for its rollout workers before
    learning on the batches that arrived (at least one). The late workers' batches are dropped and
    counted as stragglers, and a straggler sits out the steps until it is free again. Null waits
    for every worker."""

    requests_in_flight_per_worker: int | None = Field(None, ge=1, le=16)
    """AsyncSamples, AsyncGradients, AsyncReplay, Perturbations: calls kept queued on each rollout
    worker, so a worker never idles while its last result travels (RLlib's
    max_requests_in_flight_per_env_runner, 2). Null takes the optimizer's own: 1 for AsyncSamples
    (each call in flight adds a learner step of lag per worker, and the lag is what bounds how
    many workers IMPALA can take; a CartPole call of 64 envs x 32 steps leaves a worker idle for
    a few milliseconds only), 2 for the others."""

    learner_queue_size: int | None = Field(None, ge=1, le=1024)
    """AsyncSamples, AsyncReplay: batches waiting for the learner thread at most. A full queue
    holds the driver back (backpressure) instead of growing memory (RLlib's learner_queue_size,
    16). Null takes the optimizer's own: 1 for AsyncSamples (every queued batch is one more step
    of lag for the batches behind it, and one waiting batch keeps the learner fed: 2 sampled no
    faster with 2 or 12 workers of 64 envs on CartPole, and learned slower), 16 for AsyncReplay
    (its batches are replayed minibatches, which do not age)."""

    broadcast_interval: int = Field(1, ge=1)
    """AsyncSamples, AsyncReplay: learner steps between fresh weights for a worker that returns a
    result; larger values save object-store traffic at the cost of policy lag (RLlib's IMPALA
    broadcast_interval 1; Ape-X's max_weight_sync_delay plays the same part)."""

    max_policy_lag: int | None = Field(32, ge=1)
    """AsyncSamples: the most learner steps a batch may lag when the learner takes it (steps
    between the weights it was sampled with and the learner's). An older batch is dropped, not
    learned on, and counted in stale_batches_dropped; in a train batch concatenated from several
    sample calls only the stale ones are cut out. With one call in flight per worker, a batch lags
    about workers / (sample calls per learner step) steps, plus the batches queued for the
    learner: 12 workers of 64 envs on CartPole lag 10-16 steps on average, and learn stably. What it
    costs: the dropped env steps, sampled for nothing; dropping is what keeps the lag bounded as
    workers are added beyond what the learner can take (at 64 workers with one sample call per
    learner step, about half the batches). Null never drops (RLlib's IMPALA)."""

    replay_shards: int = Field(2, ge=1, le=256)
    """AsyncReplay: replay-buffer actors, each holding buffer_size / replay_shards transitions and
    sampling its own prioritized minibatches (RLlib's num_replay_buffer_shards, 4)."""

    cpus_per_replay_shard: float = Field(0.0, ge=0.0)
    """AsyncReplay: CPUs reserved for each replay shard. 0 as in RLlib: shards mostly wait on the
    learner, and they are placed beside the driver, off the preemptible rollout nodes."""


# Which optimizers read each OptimizerConfig field.
OPTIMIZER_SETTINGS: dict[str, frozenset[OptimizerName]] = {
    "sample_timeout_seconds": frozenset({SYNC_SAMPLES, SYNC_REPLAY, LOCAL_MULTI_GPU}),
    "requests_in_flight_per_worker": frozenset(
        {ASYNC_SAMPLES, ASYNC_GRADIENTS, ASYNC_REPLAY, PERTURBATIONS}
    ),
    "learner_queue_size": frozenset({OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY}),
    "broadcast_interval": frozenset({OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY}),
    "max_policy_lag": frozenset({OptimizerName.ASYNC_SAMPLES}),
    "replay_shards": frozenset({OptimizerName.ASYNC_REPLAY}),
    "cpus_per_replay_shard": frozenset({OptimizerName.ASYNC_REPLAY}),
}
