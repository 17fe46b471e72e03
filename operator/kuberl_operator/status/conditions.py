"""The conditions of each status (Ready, Progressing, Preempted, Complete, Failed, Suspended,
UpToDate, Schedulable, KubeRayAvailable): each one's status, reason and message, worked out from
the phase, the decision and the observation. Why Ready is False is in `_ready`, and why the job
is not progressing in `_progressing`.

Pods the scheduler cannot place (no GPU node, a request larger than any node, a node selector
nothing matches) leave the phase alone (the job waits where it is; activeDeadlineSeconds still
counts) but turn the Schedulable condition False with the scheduler's message per
group, and post one Warning Event per distinct message, until they are scheduled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kuberl_operator.constants import (
    RAYCLUSTER_CRD_NAME,
)
from kuberl_operator.spec import Condition, ConditionType, Phase, Reason
from kuberl_operator.status.decide import Decision, workers_preempted_message
from kuberl_operator.status.observed import Observed, condition_of
from kuberl_operator.status.phases import TERMINAL, PhaseEvent, applies

KUBERAY_MISSING_MESSAGE = (
    f"KubeRay's RayCluster CRD ({RAYCLUSTER_CRD_NAME}) is not installed, so no Ray cluster can be "
    "created: install KubeRay (helm install kuberay-operator kuberay/kuberay-operator) or enable "
    "the kuberl chart's kuberay dependency; the job starts once it is there"
)


@dataclass(frozen=True)
class _Want:
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""


def wanted_conditions(phase: Phase, decision: Decision, observed: Observed) -> dict[str, _Want]:
    previous = observed.status
    failed = condition_of(previous, ConditionType.FAILED)
    complete = condition_of(previous, ConditionType.COMPLETE)
    entered = applies(previous.phase, decision.event)
    detail = decision.message if entered else None
    return {
        ConditionType.READY: _ready(phase, decision),
        ConditionType.PROGRESSING: _progressing(phase, decision, observed),
        ConditionType.PREEMPTED: _preempted(phase, decision, observed),
        ConditionType.COMPLETE: (
            _Want("True", Reason.DRIVER_SUCCEEDED, detail or (complete.message if complete else ""))
            if phase == Phase.SUCCEEDED
            else _Want("False", Reason.NOT_COMPLETE)
        ),
        ConditionType.FAILED: (
            _Want(
                "True",
                decision.reason if entered else (failed.reason if failed else Reason.NOT_FAILED),
                detail or (failed.message if failed else ""),
            )
            if phase == Phase.FAILED
            else _Want("False", Reason.NOT_FAILED)
        ),
        ConditionType.SUSPENDED: (
            _Want("True", Reason.SUSPENDED, "spec.suspend is true")
            if phase == Phase.SUSPENDED
            else _Want("False", Reason.NOT_SUSPENDED)
        ),
        ConditionType.UP_TO_DATE: _up_to_date(observed),
        ConditionType.SCHEDULABLE: _schedulable(phase, observed),
        ConditionType.KUBERAY_AVAILABLE: (
            _Want("True", Reason.CRD_FOUND)
            if observed.kuberay_available
            else _Want("False", Reason.CRD_NOT_FOUND, KUBERAY_MISSING_MESSAGE)
        ),
    }


def _ready(phase: Phase, decision: Decision) -> _Want:
    if phase == Phase.RUNNING:
        return _Want("True", Reason.DRIVER_RUNNING, f"attempt {decision.attempt} is training")
    return _Want("False", phase.value)


def _progressing(phase: Phase, decision: Decision, observed: Observed) -> _Want:
    if not observed.kuberay_available and not decision.in_backoff:
        return _Want("False", Reason.CRD_NOT_FOUND, "waiting for KubeRay's RayCluster CRD")
    if decision.in_backoff:
        if decision.event == PhaseEvent.RESTART:
            return _Want("False", Reason.RESTART_BACKOFF, decision.message)
        kept = condition_of(observed.status, ConditionType.PROGRESSING)
        return _Want("False", Reason.RESTART_BACKOFF, kept.message if kept else "")
    if phase in TERMINAL or phase == Phase.SUSPENDED:
        return _Want("False", phase.value)
    if decision.waiting_for_workers:
        return _Want(
            "True",
            Reason.WAITING_FOR_WORKERS,
            f"the driver of attempt {decision.attempt} waits for the Ray nodes of its rollout "
            "workers to join (their pods are still starting); it fails the attempt if they do "
            "not join in time",
        )
    if phase == Phase.RUNNING:
        return _Want("True", Reason.DRIVER_RUNNING)
    return _Want("True", phase.value)


def _preempted(phase: Phase, decision: Decision, observed: Observed) -> _Want:
    kept = condition_of(observed.status, ConditionType.PREEMPTED)
    if decision.event == PhaseEvent.HEAD_PREEMPTED:
        return _Want("True", Reason.HEAD_PREEMPTED, decision.message)
    if decision.workers_preempted:
        return _Want(
            "True", Reason.WORKER_PREEMPTED, workers_preempted_message(decision.workers_preempted)
        )
    if kept is not None and kept.status == "True":
        if kept.reason == Reason.HEAD_PREEMPTED and phase in (Phase.PREEMPTED, Phase.RESUMING):
            return _Want("True", kept.reason, kept.message)
        if kept.reason == Reason.WORKER_PREEMPTED and phase == Phase.PREEMPTED:
            return _Want("True", kept.reason, kept.message)
    return _Want("False", Reason.NOT_PREEMPTED)


def _up_to_date(observed: Observed) -> _Want:
    if observed.stale_spec and observed.cluster is not None:
        fields = ", ".join(f"spec.{name}" for name in observed.stale_spec)
        return _Want(
            "False",
            Reason.RESTART_REQUIRED,
            f"{fields} changed after attempt {observed.cluster.attempt} started and applies on "
            "the next attempt; suspend and resume the job to apply it now (it resumes from the "
            "newest checkpoint)",
        )
    return _Want("True", Reason.SPEC_APPLIED)


def _schedulable(phase: Phase, observed: Observed) -> _Want:
    """False, with each group's scheduler message, while pods of an active job cannot be placed;
    a finished or suspended job's cluster is on its way out, so what it lacks no longer matters."""
    if observed.unschedulable and phase not in TERMINAL and phase != Phase.SUSPENDED:
        message = "; ".join(group.describe() for group in observed.unschedulable)
        return _Want("False", Reason.UNSCHEDULABLE, message)
    return _Want("True", Reason.NO_UNSCHEDULABLE_PODS)


def merge_conditions(
    wanted: dict[str, _Want], observed: Observed
) -> tuple[list[Condition], list[Condition]]:
    """The new conditions, and those among them whose status changed (or that appear False).
    lastTransitionTime moves only when the status does."""
    conditions, changed = [], []
    for type_, want in wanted.items():
        old = condition_of(observed.status, type_)
        flipped = old is None or old.status != want.status
        condition = Condition(
            type=type_,
            status=want.status,
            reason=want.reason,
            message=want.message,
            last_transition_time=observed.now if flipped else old.last_transition_time,
            observed_generation=observed.generation,
        )
        conditions.append(condition)
        if flipped and (old is not None or want.status == "False"):
            changed.append(condition)
    return conditions, changed
