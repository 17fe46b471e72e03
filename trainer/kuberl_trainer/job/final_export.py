"""The final checkpoint's greedy policy as a file beside it (spec.trainer.checkpoint.exportPolicy).

How a policy is written (ONNX) belongs to using a trained policy, a room above running a job, so
the driver is handed the export (`PolicyExport`: kuberl_trainer.trained.export.export_checkpoint,
which `kuberl train` passes) rather than importing it."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from kuberl_contract.config import JobTrainerConfig
from kuberl_contract.progress_row import POLICY_FILE
from kuberl_trainer.job.checkpoint import Checkpoint, CheckpointStore
from kuberl_trainer.job.checkpoint_format import MANIFEST
from kuberl_trainer.job.fencing import CheckpointFenced
from kuberl_trainer.job.resume import checkpoint_meta
from kuberl_trainer.job.trainer import Trainer

log = logging.getLogger(__name__)

PolicyExport = Callable[[Checkpoint, Path], Path]
"""Writes a checkpoint's greedy policy to a file and returns its path."""


def export_final_policy(
    export: PolicyExport,
    checkpoint: str,
    config: JobTrainerConfig,
    trainer: Trainer,
    store: CheckpointStore,
) -> str | None:
    """The greedy policy of `trainer`, whose final checkpoint is `checkpoint`, written by
    `export` and put beside the checkpoints in `store`; returns its location, or None, with a
    warning, when it cannot be exported. CheckpointFenced when a newer attempt owns the store."""
    # The final checkpoint's policy as it is in memory: reading the checkpoint back would
    # load all of it again (a replay buffer too, where it is saved) for the policy alone.
    meta = checkpoint_meta(config, trainer.iteration, trainer.timesteps, None, trainer.env_spaces)
    try:
        final = Checkpoint(checkpoint, meta, trainer.policy_state())
        with tempfile.TemporaryDirectory(prefix="kuberl-policy-") as scratch:
            written = export(final, Path(scratch) / POLICY_FILE)
            return store.put_file(written, POLICY_FILE)
    except CheckpointFenced:  # stale: the driver stops, the newer attempt's policy stays
        raise
    except Exception as exc:  # the job's outcome stands: its checkpoint holds the model
        log.warning("could not export the final policy of %s: %s", checkpoint, exc)
        return None


def exported_since(store: CheckpointStore, checkpoint: str) -> str | None:
    """The policy file in `store` when it was written after `checkpoint` was: the export of that
    very checkpoint, by an earlier run of the job that ended there (a finished run run again has
    nothing new to export). None otherwise, or when the store cannot tell."""
    name = checkpoint.rsplit("/", 1)[-1]
    try:
        written = store.fs.modified(f"{store.root}/{POLICY_FILE}")
        saved = store.fs.modified(f"{store.root}/{name}/{MANIFEST}")
    except (OSError, NotImplementedError, ValueError):  # none yet, or a store without times
        return None
    return store.uri(POLICY_FILE) if written >= saved else None
