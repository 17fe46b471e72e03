"""The conditions of each status (Ready, Progressing, Preempted, Complete, Failed, Suspended,
UpToDate, Schedulable, KubeRayAvailable): each one's status, reason and message, worked out from
the phase, the decision and the observation. The five every backend writes come from
`lifecycle` (why Ready is False is there), but for a spent budget's Suspended (BudgetExceeded);
the cluster adds Preempted, UpToDate, Schedulable and KubeRayAvailable, and why the job is not
progressing in `_progressing`.

Pods the scheduler cannot place (no GPU node, a request larger than any node, a node selector
nothing matches) leave the phase alone (the job waits where it is; activeDeadlineSeconds still
counts) but turn the Schedulable condition False with the scheduler's message per
group, and post one Warning Event per distinct message, until they are scheduled."""

from __future__ import annotations

from kuberl_operator.constants import RAYCLUSTER_CRD_NAME
from kuberl_operator.spec import ConditionType, Phase, Reason
from kuberl_operator.status.actions import StopDrivers
from kuberl_operator.status.attempts import stopping_message
from kuberl_operator.status.decide import workers_preempted_message
from kuberl_operator.status.decision import Decision
from kuberl_operator.status.lifecycle import Entered, Want, lifecycle_conditions
from kuberl_operator.status.observed import Observed, condition_of
from kuberl_operator.status.phases import TERMINAL, PhaseEvent, applies

KUBERAY_MISSING_MESSAGE = (
    f"KubeRay's RayCluster CRD ({RAYCLUSTER_CRD_NAME}) is not installed, so no Ray cluster can be "
    "created: install KubeRay (helm install kuberay-operator kuberay/kuberay-operator) or enable "
    "the kuberl chart's kuberay dependency; the job starts once it is there"
)


def wanted_conditions(
    phase: Phase, decision: Decision, observed: Observed, ephemeral: str | None = None
) -> dict[str, Want]:
    """Every condition's status, reason and message; `ephemeral` is why the job's checkpoints
    die with its pods (see builders.driver.ephemeral_checkpoints), None when they do not."""
    previous = observed.status
    entered = (
        Entered(decision.reason, decision.message)
        if applies(previous.phase, decision.event)
        else None
    )
    lifecycle = lifecycle_conditions(phase, previous, decision.attempt, entered)
    return {
        ConditionType.READY: lifecycle[ConditionType.READY],
        ConditionType.PROGRESSING: _progressing(
            decision, observed, lifecycle[ConditionType.PROGRESSING]
        ),
        ConditionType.PREEMPTED: _preempted(phase, decision, observed),
        ConditionType.COMPLETE: lifecycle[ConditionType.COMPLETE],
        ConditionType.FAILED: lifecycle[ConditionType.FAILED],
        ConditionType.SUSPENDED: _suspended(phase, decision, lifecycle[ConditionType.SUSPENDED]),
        ConditionType.UP_TO_DATE: _up_to_date(observed),
        ConditionType.SCHEDULABLE: _schedulable(phase, observed),
        ConditionType.KUBERAY_AVAILABLE: (
            Want("True", Reason.CRD_FOUND)
            if observed.kuberay_available
            else Want("False", Reason.CRD_NOT_FOUND, KUBERAY_MISSING_MESSAGE)
        ),
        ConditionType.DURABLE_CHECKPOINTS: (
            Want("True", Reason.CHECKPOINTS_ON_STORAGE)
            if ephemeral is None
            else Want("False", Reason.CHECKPOINTS_IN_POD, ephemeral)
        ),
    }


def _progressing(decision: Decision, observed: Observed, lifecycle: Want) -> Want:
    """The lifecycle's Progressing, except while KubeRay is missing, during a restart backoff,
    while an earlier attempt's driver is stopped, and while the driver waits for its rollout
    workers' Ray nodes."""
    if not observed.kuberay_available and not decision.in_backoff:
        return Want("False", Reason.CRD_NOT_FOUND, "waiting for KubeRay's RayCluster CRD")
    if decision.in_backoff:
        if decision.event == PhaseEvent.RESTART:
            return Want("False", Reason.RESTART_BACKOFF, decision.message)
        kept = condition_of(observed.status, ConditionType.PROGRESSING)
        return Want("False", Reason.RESTART_BACKOFF, kept.message if kept else "")
    if isinstance(decision.action, StopDrivers) and lifecycle.status == "True":
        message = stopping_message(decision.action.attempts, decision.attempt)
        return Want("True", Reason.STOPPING_EARLIER_DRIVER, message)
    if decision.waiting_for_workers and lifecycle.status == "True":
        return Want(
            "True",
            Reason.WAITING_FOR_WORKERS,
            f"the driver of attempt {decision.attempt} waits for the Ray nodes of its rollout "
            "workers to join (their pods are still starting); it fails the attempt if they do "
            "not join in time",
        )
    return lifecycle


def _preempted(phase: Phase, decision: Decision, observed: Observed) -> Want:
    kept = condition_of(observed.status, ConditionType.PREEMPTED)
    if decision.event == PhaseEvent.HEAD_PREEMPTED:
        return Want("True", Reason.HEAD_PREEMPTED, decision.message)
    if decision.workers_preempted:
        return Want(
            "True", Reason.WORKER_PREEMPTED, workers_preempted_message(decision.workers_preempted)
        )
    if kept is not None and kept.status == "True":
        if kept.reason == Reason.HEAD_PREEMPTED and phase in (Phase.PREEMPTED, Phase.RESUMING):
            return Want("True", kept.reason, kept.message)
        if kept.reason == Reason.WORKER_PREEMPTED and phase == Phase.PREEMPTED:
            return Want("True", kept.reason, kept.message)
    return Want("False", Reason.NOT_PREEMPTED)


def _suspended(phase: Phase, decision: Decision, lifecycle: Want) -> Want:
    """The lifecycle's Suspended, except for a job the operator suspended itself: its budget is
    spent (reason BudgetExceeded, with the dollars)."""
    if phase == Phase.SUSPENDED and decision.suspended is not None:
        reason, message = decision.suspended
        if reason == Reason.BUDGET_EXCEEDED:
            return Want("True", reason, message)
    return lifecycle


def _up_to_date(observed: Observed) -> Want:
    if observed.stale_spec and observed.cluster is not None:
        fields = ", ".join(f"spec.{name}" for name in observed.stale_spec)
        return Want(
            "False",
            Reason.RESTART_REQUIRED,
            f"{fields} changed after attempt {observed.cluster.attempt} started and applies on "
            "the next attempt; suspend and resume the job to apply it now (it resumes from the "
            "newest checkpoint)",
        )
    return Want("True", Reason.SPEC_APPLIED)


def _schedulable(phase: Phase, observed: Observed) -> Want:
    """False, with each group's scheduler message, while pods of an active job cannot be placed;
    a finished or suspended job's cluster is on its way out, so what it lacks no longer matters."""
    if observed.unschedulable and phase not in TERMINAL and phase != Phase.SUSPENDED:
        message = "; ".join(group.describe() for group in observed.unschedulable)
        return Want("False", Reason.UNSCHEDULABLE, message)
    return Want("True", Reason.NO_UNSCHEDULABLE_PODS)
