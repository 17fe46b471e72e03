"""What a run resumes from: whose checkpoints a job may resume (`checkpoint_identity`), what a
checkpoint records beside the state (`checkpoint_meta`, with the progress row of its iteration),
and the progress file cut back to the checkpoint (`restore_progress`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kuberl_contract.config import PBT, JobTrainerConfig
from kuberl_contract.config.checkpoint import WarmStartConfig
from kuberl_contract.progress_row import CHECKPOINT, ITERATION, read_progress_file
from kuberl_trainer.envs.space_record import SPACES, spaces_record
from kuberl_trainer.errors import IncompatibleCheckpointError, InvalidJobError
from kuberl_trainer.job.checkpoint import Checkpoint, CheckpointNotFound, checkpoint_named

META_ROW = "row"
"""The checkpoint meta's key for the progress row of the checkpoint's iteration."""


def checkpoint_identity(config: JobTrainerConfig) -> dict[str, Any]:
    """What a checkpoint must have been written for to be resumed by this job: its algorithm and
    env, and for PBT the trials' algorithm and how many there are."""
    identity = {"algorithm": config.algorithm, "env": config.env}
    if config.algorithm == PBT:
        identity |= {
            "trials": config.trainer.algorithm,
            "population": config.hyperparameters.population,
        }
    return identity


def checkpoint_meta(
    config: JobTrainerConfig,
    iteration: int,
    timesteps: int,
    row: dict[str, Any] | None,
    spaces: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """A checkpoint's meta: the job's identity, where training stood and its config; with the
    iteration's progress row when it is not written yet (strict JSON, without its checkpoint:
    resuming restores it naming the checkpoint); with the envs' observation and action `spaces`
    when the job has one policy, so that using it needs no env (space_record.py)."""
    meta = {
        **checkpoint_identity(config),
        "iteration": iteration,
        "timesteps": timesteps,
        "created": time.time(),
        "config": config.model_dump(mode="json", by_alias=True),
    }
    if spaces is not None:
        meta[SPACES] = spaces_record(*spaces)
    if row is not None:
        meta[META_ROW] = json.loads(json.dumps(row), parse_constant=lambda _: None)  # NaN: null
    return meta


def config_changes(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """What differs between two `spec.trainer`s as checkpoint metas record them (JSON, by
    alias): `hyperparameters.learning_rate 0.002 -> 0.001`, one entry per field, sorted."""
    changes = []
    for key in sorted(saved.keys() | current.keys()):
        before, after = saved.get(key), current.get(key)
        if isinstance(before, dict) and isinstance(after, dict):
            changes += config_changes(before, after, f"{prefix}{key}.")
        elif before != after:
            changes.append(f"{prefix}{key} {json.dumps(before)} -> {json.dumps(after)}")
    return changes


CONTINUING_FIELDS = (
    "stop",
    "checkpoint",
    "evaluation",
    "metricsWindow",
    "tensorboard",
    "warmStart",
)
"""spec.trainer's fields a run may change and still continue its own checkpoint: when to stop (a
larger stop.timesteps trains further), how it checkpoints, evaluates and reports, and the warm
start (read only by a run's first start). Any other change trains another run."""


def other_run_changes(changes: list[str]) -> list[str]:
    """The entries of `config_changes` that make the checkpoint's run another one than this job's:
    every field outside CONTINUING_FIELDS (a learning rate, the env's settings, the seed), in
    spec.trainer or in a population's inner `trainer` alike."""
    return [
        change
        for change in changes
        if change.split(" ", 1)[0].removeprefix("trainer.").split(".", 1)[0]
        not in CONTINUING_FIELDS
    ]


def other_run_refusal(found: Checkpoint, config: JobTrainerConfig) -> str | None:
    """Why the job does not resume `found` when it was trained with another spec.trainer
    (other_run_changes) and the two ways out; None when it is the job's own run."""
    current = config.model_dump(mode="json", by_alias=True)
    other = other_run_changes(config_changes(found.meta.get("config", current), current))
    if not other:
        return None
    return (
        f"the checkpoint {found.uri} was trained with another spec.trainer ({', '.join(other)}): "
        "resuming it would record this job's result under that run. Train in a run directory of "
        "its own (--run-dir, or another checkpoint.uri), or continue that run with the changed "
        "spec (--resume)"
    )


WARM_START_FIELD = "spec.trainer.warmStart.checkpoint"
WARM_START_JOB_FIELD = "spec.trainer.warmStart.job"


def warm_start_location(warm_start: WarmStartConfig) -> str:
    """The checkpoint spec.trainer.warmStart names. A warmStart.job reaches the trainer already
    resolved to that job's checkpoint location by the kuberl API or the operator, which know
    where jobs keep them; one left as it was written (`kuberl train FILE`) is an InvalidJobError
    naming the field."""
    if warm_start.checkpoint is not None:
        return warm_start.checkpoint
    raise InvalidJobError(
        f"{WARM_START_JOB_FIELD}: {warm_start.job!r} names a job of the kuberl API or a cluster, "
        "which finds its checkpoint when the job is submitted there (kuberl submit); to train "
        "this file here, set warmStart.checkpoint to that job's run directory instead"
    )


def warm_start_source(named: str) -> Checkpoint:
    """The checkpoint spec.trainer.warmStart names; an InvalidJobError naming the field when it
    names none, or a population (a CheckpointError when the store cannot be read now)."""
    try:
        source = checkpoint_named(named)
    except CheckpointNotFound as exc:
        raise InvalidJobError(f"{WARM_START_FIELD}: {exc}") from None
    if source.meta.get("algorithm") == PBT:
        raise InvalidJobError(
            f"{WARM_START_FIELD}: {source.uri} holds a PBT population, not one policy to start from"
        )
    return source


WARM_START_STATE = ("policy", "normalization")
"""What a warm start takes of a checkpoint's state (Trainer.warm_start): the policy's weights and
moments, and the observation statistics where the source normalized."""


def warm_start_part(source: Checkpoint) -> Checkpoint:
    """`source` with only WARM_START_STATE of its state, so that a replay buffer or counters saved
    with it are not held while the run starts."""
    state = {key: source.state[key] for key in WARM_START_STATE if key in source.state}
    return Checkpoint(source.uri, source.meta, state)


def warm_start_misfit(source: Checkpoint, exc: IncompatibleCheckpointError) -> str:
    """Why the job cannot start from `source`, its networks being of other shapes."""
    meta = source.meta
    return (
        f"{WARM_START_FIELD}: cannot start from {source.uri} ({meta.get('algorithm')} on "
        f"{meta.get('env')}): {exc}"
    )


def saved_row(found: Checkpoint) -> dict[str, Any] | None:
    """The progress row saved with a checkpoint, naming it; None when it has none (a checkpoint
    saved after its row was written, or by an older kuberl)."""
    row = found.meta.get(META_ROW)
    if not isinstance(row, dict) or row.get(ITERATION) != found.meta["iteration"]:
        return None
    return {**row, CHECKPOINT: found.uri}


def restore_progress(path: Path, iteration: int, saved_row: dict[str, Any] | None) -> None:
    """Drop rows of iterations after the checkpoint: that training was lost and is redone. When
    the checkpoint's own row is missing as well (the process died after saving the checkpoint,
    before writing its row), the row saved with the checkpoint is put back."""
    found = read_progress_file(path)
    if found is None:  # a run directory of its own (a new pod): its rows start after the resume
        return
    rows, whole = found
    kept = [row for row in rows if row[ITERATION] <= iteration]
    if saved_row is not None and (not kept or kept[-1][ITERATION] < iteration):
        kept.append(saved_row)
    # A row cut short by a crash is not in `rows`: rewriting drops it too.
    if kept != rows or not whole:
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
        os.replace(tmp, path)
