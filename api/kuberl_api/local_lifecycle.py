"""The local backend's job documents: what is stored at submission, what the trainer reads, and
each move through the lifecycle the operator shares (`kuberl_operator.status.lifecycle`): the same
conditions, reasons, attempts, startTime, completionTime and observedGeneration, so a client reads
a job alike on both backends. What only a cluster has (Preempted, UpToDate, Schedulable,
KubeRayAvailable, restarts after failures) is not written here.

The local phases: Pending (queued for a trainer slot), Running, Suspended, Resuming (queued again
after a suspension), Succeeded and Failed. A job suspended while it runs is Suspended once its
trainer has checkpointed and exited."""

from __future__ import annotations

import signal
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kuberl_contract.final_record import EXIT_INVALID_JOB, EXIT_SIGNAL_BASE, FinalRecord
from kuberl_operator.spec import Phase, Reason, RLJob, RLJobStatus
from kuberl_operator.status.lifecycle import (
    Entered,
    finished_at,
    lifecycle_conditions,
    merge_conditions,
    started_at,
)

QUEUED = Entered(Reason.QUEUED, "waiting for a free trainer slot")
RESUMED = Entered(Reason.RESUMING, "unsuspended: resuming from the newest checkpoint")
WAITING = (Phase.PENDING, Phase.RESUMING)  # the queue, in submission order

EXIT_SIGTERM, EXIT_SIGINT = EXIT_SIGNAL_BASE + signal.SIGTERM, EXIT_SIGNAL_BASE + signal.SIGINT


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def initial_document(job: RLJob, namespace: str, created: datetime) -> dict[str, Any]:
    """The job as stored at submission: validated spec with defaults, server-set metadata, and a
    first status (Suspended when submitted with spec.suspend, else Pending)."""
    document = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["metadata"] |= {
        "namespace": namespace,
        "uid": str(uuid.uuid4()),
        "creationTimestamp": timestamp(created),
        "generation": 1,
    }
    document["status"] = {}
    if job.spec.suspend:
        submitted = Entered(Reason.SUSPENDED, "submitted suspended")
        return transition(document, Phase.SUSPENDED, submitted, created)
    return transition(document, Phase.PENDING, QUEUED, created)


def manifest_of(document: dict[str, Any]) -> dict[str, Any]:
    """What the trainer reads: the job without status and server-set metadata."""
    metadata = {key: document["metadata"][key] for key in ("name", "namespace", "labels")}
    return {
        "apiVersion": document["apiVersion"],
        "kind": document["kind"],
        "metadata": metadata,
        "spec": document["spec"],
    }


def with_suspend(document: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """`spec.suspend` set as asked; the generation moves only when the spec changes."""
    if document["spec"].get("suspend", False) == suspend:
        return document
    metadata = {**document["metadata"], "generation": document["metadata"]["generation"] + 1}
    return {**document, "metadata": metadata, "spec": {**document["spec"], "suspend": suspend}}


def transition(
    document: dict[str, Any], phase: Phase, entered: Entered, at: datetime
) -> dict[str, Any]:
    """The document entering `phase`, its status computed by the lifecycle the operator shares:
    the five conditions (their lastTransitionTime moves only when they flip), the attempt (one
    more with each trainer started from the queue, or when resumed), startTime (on leaving
    Pending, and anew when resumed) and completionTime."""
    previous = RLJobStatus.model_validate(document["status"])
    generation = document["metadata"]["generation"]
    resumed = phase == Phase.RESUMING and previous.phase != Phase.RESUMING
    attempt = next_attempt(previous, phase)
    wanted = lifecycle_conditions(phase, previous, attempt, entered)
    status = RLJobStatus(
        phase=phase,
        conditions=merge_conditions(wanted, previous, at, generation)[0],
        progress=previous.progress,
        attempt=attempt,
        start_time=started_at(previous, phase, resumed, at),
        completion_time=finished_at(previous, phase, at),
        observed_generation=generation,
    )
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {**document, "status": dumped}


def next_attempt(previous: RLJobStatus, phase: Phase) -> int:
    """The attempt of a job entering `phase`, counted as the operator counts it: the first when
    its trainer leaves the queue, one more when it is resumed (its next trainer belongs to it)."""
    entering = phase != previous.phase
    started = phase == Phase.RUNNING and previous.phase == Phase.PENDING
    if entering and (phase == Phase.RESUMING or started):
        return previous.attempt + 1
    return previous.attempt


def outcome(
    code: int | None,
    stopping: bool,
    document: dict[str, Any],
    lost: bool,
    pid: int | None,
    final: FinalRecord | None = None,
) -> tuple[Phase, Entered]:
    """The phase a job whose trainer ended with exit status `code` (None when it left none)
    enters, and why, in the words of its final record when it printed one and in the operator's
    words where a cluster's driver would end alike. `stopping`: the API sent it SIGTERM to
    suspend it."""
    said = final.message if final is not None and final.message else ""
    if code == 0:
        return Phase.SUCCEEDED, Entered(Reason.DRIVER_SUCCEEDED, said or "training finished")
    if stopping and code in (EXIT_SIGTERM, EXIT_SIGINT):
        if document["spec"].get("suspend"):
            return Phase.SUSPENDED, Entered(Reason.SUSPENDED, "suspended after a checkpoint")
        return Phase.RESUMING, replace(RESUMED, message="resumed while it was stopping")
    if code is None:
        when = "while the API was down" if lost else "without an exit status"
        message = f"the trainer process (pid {pid}) ended {when}"
        return Phase.FAILED, Entered(Reason.TRAINER_LOST, message)
    if code == EXIT_INVALID_JOB:
        message = f"the driver found the job invalid: {said or 'no message'}"
        return Phase.FAILED, Entered(Reason.INVALID_SPEC, message)
    message = f"the trainer exited with status {code}" + (f": {said}" if said else "")
    return Phase.FAILED, Entered(Reason.DRIVER_FAILED, message)
