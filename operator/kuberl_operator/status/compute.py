"""`compute_status`, the one public function: it decides, moves the phase, and assembles the new
status with its conditions and Events, and the on-demand rollout group's size; beside it, the
small helpers that carry a field of the previous status over (progress, headPodUID); the cost's
tally is `cost`'s. What every backend shares is in `lifecycle`."""

from __future__ import annotations

from kuberl_operator.builders.driver import ephemeral_checkpoints
from kuberl_operator.spec import Phase, Progress, RLJobSpec, RLJobStatus
from kuberl_operator.status.actions import KubeEvent, StatusUpdate, SubmitDriver
from kuberl_operator.status.autoscale import Scaling, learner_scaling, remembered
from kuberl_operator.status.conditions import wanted_conditions
from kuberl_operator.status.cost import next_cost, target_reached
from kuberl_operator.status.decide import decide
from kuberl_operator.status.decision import Decision
from kuberl_operator.status.disruption import next_drains
from kuberl_operator.status.events import change_events, unschedulable_event
from kuberl_operator.status.fallback import on_demand_replicas, rollout_replicas
from kuberl_operator.status.lifecycle import finished_at, merge_conditions, started_at
from kuberl_operator.status.observed import Observed, ObservedProgress
from kuberl_operator.status.phases import next_phase, resumes
from kuberl_operator.status.progress import progress_from_row


def merge_progress(current: Progress, observed: ObservedProgress | None) -> Progress:
    """The progress after an observed row (`progress_from_row`); a row no newer than the last one
    changes nothing, so progress never goes back to an older report (and an ended driver's final
    record, read again at every reconcile, is taken in once)."""
    if observed is None:
        return current
    if current.last_update_time is not None and observed.time <= current.last_update_time:
        return current
    return progress_from_row(current, observed)


def _head_pod_uid(previous: RLJobStatus, decision: Decision, observed: Observed) -> str | None:
    """The head pod the current attempt's driver is submitted to: recorded with the submission,
    kept for the attempt, forgotten when the attempt changes."""
    if isinstance(decision.action, SubmitDriver) and observed.head is not None:
        return observed.head.uid or None
    return previous.head_pod_uid if decision.attempt == previous.attempt else None


def compute_status(spec: RLJobSpec | None, observed: Observed) -> StatusUpdate:
    """The job's next status, the Events its transitions emit, and the reconciler's next action.

    Pure: the same spec and observation always give the same result. `spec` is None when the
    manifest could not be read at all (then `observed.spec_problems` says why)."""
    previous = observed.status
    current = previous.phase or Phase.PENDING
    decision = decide(spec, observed, current)
    phase = next_phase(current, decision.event)
    wanted = wanted_conditions(
        phase, decision, observed, None if spec is None else ephemeral_checkpoints(spec)
    )
    conditions, changed = merge_conditions(wanted, previous, observed.now, observed.generation)
    resumed = resumes(previous.phase, decision.event)
    progress = merge_progress(previous.progress, observed.progress)
    reached = target_reached(spec, progress)
    scaling = learner_scaling(spec, previous, phase, observed.learner_load, observed.now)
    autoscaled = remembered(spec, previous, observed.learner_load)
    if scaling is not None and autoscaled is not None:
        autoscaled = autoscaled.model_copy(update={"last_scale_time": observed.now})
    drains, draining = next_drains(previous.draining, observed.about_to_go, observed.pod_names)
    status = RLJobStatus(
        phase=phase,
        conditions=conditions,
        progress=progress,
        cost=next_cost(
            previous.cost, observed.pods_on_nodes, observed.prices, observed.now, reached
        ),
        attempt=decision.attempt,
        cluster_attempt=decision.cluster_attempt,
        restarts=decision.restarts,
        preemptions=decision.preemptions,
        preempted_pods=list(decision.preempted_pods),
        draining=draining,
        ray_cluster=observed.cluster.name if observed.cluster else None,
        replicas=observed.workers_live,
        autoscaled=autoscaled,
        selector=observed.worker_selector,
        start_time=started_at(previous, phase, resumed, observed.now),
        head_pod_uid=_head_pod_uid(previous, decision, observed),
        completion_time=finished_at(previous, phase, observed.now),
        observed_generation=observed.generation,
    )
    return StatusUpdate(
        status=status,
        events=change_events(previous.phase, phase, decision, changed)
        + unschedulable_event(previous, conditions)
        + scaling_event(scaling),
        action=decision.action,
        on_demand_replicas=on_demand_replicas(spec, phase, observed.pending_spot),
        rollout_replicas=rollout_replicas(spec, phase, observed, decision.cluster_attempt),
        scale_to=None if scaling is None else scaling.replicas,
        drains=drains,
    )


def scaling_event(scaling: Scaling | None) -> tuple[KubeEvent, ...]:
    """The Event of an autoscaling change, with its reason."""
    if scaling is None:
        return ()
    return (KubeEvent("Normal", scaling.reason, scaling.message),)
