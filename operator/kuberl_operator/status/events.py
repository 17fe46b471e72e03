"""The Kubernetes Events a status change emits: one per phase transition (a Warning for a restart,
a preemption, a failure or a spent budget), one per batch of newly preempted rollout workers, one
when KubeRay's RayCluster CRD appears or goes, one when the job's checkpoints turn out to die with
its pods, and one per distinct message about pods the scheduler cannot place.

Events follow changes, never polls: a job that waits emits nothing more until something about it
changes."""

from __future__ import annotations

from kuberl_operator.spec import Condition, ConditionType, Phase, Reason, RLJobStatus
from kuberl_operator.status.actions import KubeEvent
from kuberl_operator.status.decide import workers_preempted_message
from kuberl_operator.status.decision import Decision
from kuberl_operator.status.observed import condition_of
from kuberl_operator.status.phases import PhaseEvent, applies

WARNING_PHASES = frozenset({Phase.PREEMPTED, Phase.FAILED})


def change_events(
    previous: Phase | None, phase: Phase, decision: Decision, changed: list[Condition]
) -> tuple[KubeEvent, ...]:
    events: list[KubeEvent] = []
    if applies(previous, decision.event):
        warning = (
            phase in WARNING_PHASES
            or decision.event == PhaseEvent.RESTART
            or decision.reason == Reason.BUDGET_EXCEEDED
        )
        events.append(
            KubeEvent("Warning" if warning else "Normal", decision.reason, decision.message)
        )
    if decision.workers_preempted and decision.event != PhaseEvent.WORKERS_PREEMPTED:
        message = workers_preempted_message(decision.workers_preempted)
        events.append(KubeEvent("Warning", Reason.WORKER_PREEMPTED, message))
    if decision.not_stopped:
        events.append(KubeEvent("Warning", Reason.EARLIER_DRIVER_NOT_STOPPED, decision.not_stopped))
    for condition in changed:
        if condition.type == ConditionType.KUBERAY_AVAILABLE:
            kind = "Normal" if condition.status == "True" else "Warning"
            events.append(KubeEvent(kind, condition.reason, condition.message or "KubeRay found"))
        if condition.type == ConditionType.DURABLE_CHECKPOINTS and condition.status == "False":
            events.append(KubeEvent("Warning", condition.reason, condition.message))
    return tuple(events)


def unschedulable_event(
    previous: RLJobStatus, conditions: list[Condition]
) -> tuple[KubeEvent, ...]:
    """A Warning when the Schedulable condition turns False or its message changes: once per
    distinct scheduler message, not on every poll (the condition keeps the last one said)."""
    now = next(c for c in conditions if c.type == ConditionType.SCHEDULABLE)
    before = condition_of(previous, ConditionType.SCHEDULABLE)
    if now.status != "False":
        return ()
    if before is not None and before.status == "False" and before.message == now.message:
        return ()
    return (KubeEvent("Warning", Reason.UNSCHEDULABLE, now.message),)
