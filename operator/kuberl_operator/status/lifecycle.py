"""The lifecycle both backends share: the five conditions a phase implies (Ready, Progressing,
Complete, Failed, Suspended), when a job started and finished, and how a new status meets the
previous one (a condition's lastTransitionTime moves only when its status does).

The operator's `compute_status` builds on it and adds what only a cluster has (Preempted,
UpToDate, Schedulable, KubeRayAvailable, the restart backoff, rollout workers still joining); the
API's local backend computes its whole status with `enter`, from the events `local_decide` finds,
so a job's conditions read alike wherever it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from kuberl_operator.spec import Condition, ConditionType, Phase, Reason, RLJobStatus
from kuberl_operator.status.observed import condition_of
from kuberl_operator.status.phases import (
    ACTIVE,
    TERMINAL,
    PhaseEvent,
    applies,
    attempt_after,
    next_phase,
    resumes,
)

LIFECYCLE_CONDITIONS = (
    ConditionType.READY,
    ConditionType.PROGRESSING,
    ConditionType.COMPLETE,
    ConditionType.FAILED,
    ConditionType.SUSPENDED,
)
"""The condition types every backend writes; the other four describe a Kubernetes cluster."""

SUSPENDED_MESSAGE = "spec.suspend is true"


@dataclass(frozen=True)
class Want:
    """A condition as the new status wants it, before it meets the previous one."""

    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Entered:
    """The transition this status makes: why the job enters (or re-enters) its phase, as a
    reason and in words. The words stay on the phase's condition while the phase lasts."""

    reason: str
    message: str


def lifecycle_conditions(
    phase: Phase, previous: RLJobStatus, attempt: int, entered: Entered | None
) -> dict[str, Want]:
    """Ready, Progressing, Complete, Failed and Suspended as `phase` implies them. A job that
    succeeded or failed keeps the words of the transition that finished it."""
    detail = entered.message if entered else None
    failed = condition_of(previous, ConditionType.FAILED)
    complete = condition_of(previous, ConditionType.COMPLETE)
    return {
        ConditionType.READY: (
            Want("True", Reason.DRIVER_RUNNING, f"attempt {attempt} is training")
            if phase == Phase.RUNNING
            else Want("False", phase.value)
        ),
        ConditionType.PROGRESSING: _progressing(phase, previous, detail),
        ConditionType.COMPLETE: (
            Want("True", Reason.DRIVER_SUCCEEDED, detail or (complete.message if complete else ""))
            if phase == Phase.SUCCEEDED
            else Want("False", Reason.NOT_COMPLETE)
        ),
        ConditionType.FAILED: (
            Want(
                "True",
                entered.reason if entered else (failed.reason if failed else Reason.NOT_FAILED),
                detail or (failed.message if failed else ""),
            )
            if phase == Phase.FAILED
            else Want("False", Reason.NOT_FAILED)
        ),
        ConditionType.SUSPENDED: (
            Want("True", Reason.SUSPENDED, SUSPENDED_MESSAGE)
            if phase == Phase.SUSPENDED
            else Want("False", Reason.NOT_SUSPENDED)
        ),
    }


def _progressing(phase: Phase, previous: RLJobStatus, detail: str | None) -> Want:
    """True while the job is on its way (reason: its phase, or DriverRunning), with the words of
    the transition that brought it there; False once it is finished or suspended."""
    if phase in TERMINAL or phase == Phase.SUSPENDED:
        return Want("False", phase.value)
    reason = Reason.DRIVER_RUNNING if phase == Phase.RUNNING else phase.value
    if detail is None:
        kept = condition_of(previous, ConditionType.PROGRESSING)
        same = kept is not None and kept.status == "True" and kept.reason == reason
        detail = kept.message if same else ""
    return Want("True", reason, detail)


def merge_conditions(
    wanted: dict[str, Want], previous: RLJobStatus, now: datetime, generation: int | None
) -> tuple[list[Condition], list[Condition]]:
    """The new conditions, and those among them whose status changed (or that appear False).
    lastTransitionTime moves only when the status does."""
    conditions, changed = [], []
    for type_, want in wanted.items():
        old = condition_of(previous, type_)
        flipped = old is None or old.status != want.status
        condition = Condition(
            type=type_,
            status=want.status,
            reason=want.reason,
            message=want.message,
            last_transition_time=now if flipped else old.last_transition_time,
            observed_generation=generation,
        )
        conditions.append(condition)
        if flipped and (old is not None or want.status == "False"):
            changed.append(condition)
    return conditions, changed


def started_at(
    previous: RLJobStatus, phase: Phase, resumed: bool, now: datetime
) -> datetime | None:
    """When the job started, as Kubernetes Jobs count it for activeDeadlineSeconds: when it first
    left Pending, and again when it is resumed from suspension."""
    if resumed:
        return now
    if previous.start_time is not None:
        return previous.start_time
    return now if phase in ACTIVE - {Phase.PENDING} else None


def finished_at(previous: RLJobStatus, phase: Phase, now: datetime) -> datetime | None:
    """When the job succeeded or failed (the phases it never leaves)."""
    return previous.completion_time or (now if phase in TERMINAL else None)


def enter(
    previous: RLJobStatus,
    events: Sequence[PhaseEvent],
    entered: Entered,
    at: datetime,
    generation: int,
) -> RLJobStatus:
    """The status after `events`, in order, each taken through the phase machine (one that does
    not apply to the phase it meets changes nothing), with what they imply: the attempt
    (`attempt_after`), startTime (anew when resumed), completionTime and the lifecycle conditions,
    which carry `entered`'s words when the phase changed (or the job is new). Progress is kept.
    Several events happen at once where a backend sees only their end: a local trainer starts and
    runs, or is suspended and unsuspended while it checkpoints."""
    phase, attempt, resumed = previous.phase or Phase.PENDING, previous.attempt, False
    moved = previous.phase is None
    for event in events:
        if applies(phase, event):
            attempt = attempt_after(attempt, event)
            resumed = resumed or resumes(phase, event)
            phase, moved = next_phase(phase, event), True
    wanted = lifecycle_conditions(phase, previous, attempt, entered if moved else None)
    return RLJobStatus(
        phase=phase,
        conditions=merge_conditions(wanted, previous, at, generation)[0],
        progress=previous.progress,
        attempt=attempt,
        cluster_attempt=attempt,  # each attempt's trainer starts afresh: nothing is carried over
        start_time=started_at(previous, phase, resumed, at),
        completion_time=finished_at(previous, phase, at),
        observed_generation=generation,
    )
