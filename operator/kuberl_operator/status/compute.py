"""`compute_status`, the one public function: it decides, moves the phase, and assembles the new
status with its conditions and Events; beside it, the small helpers that carry a field of the
previous status over (progress, headPodUID). What every backend shares is in `lifecycle`."""

from __future__ import annotations

import math
from typing import Any

from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
)
from kuberl_operator.builders.driver import ephemeral_checkpoints
from kuberl_operator.spec import Phase, Progress, RLJobSpec, RLJobStatus
from kuberl_operator.status.actions import StatusUpdate, SubmitDriver
from kuberl_operator.status.conditions import wanted_conditions
from kuberl_operator.status.decide import Decision, decide
from kuberl_operator.status.events import change_events, unschedulable_event
from kuberl_operator.status.lifecycle import finished_at, merge_conditions, started_at
from kuberl_operator.status.observed import Observed, ObservedProgress
from kuberl_operator.status.phases import PhaseEvent, applies, next_phase


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def merge_progress(current: Progress, observed: ObservedProgress | None) -> Progress:
    """The progress after an observed row; a row no newer than the last one changes nothing, so
    progress never goes back to an older report. A figure the row does not carry keeps its last
    value (a final record has no throughput: the last iteration's stays)."""
    if observed is None:
        return current
    if current.last_update_time is not None and observed.time <= current.last_update_time:
        return current
    row = observed.row
    samples = _finite(row[SAMPLES_PER_S]) if SAMPLES_PER_S in row else current.samples_per_second
    episode_return = (
        _finite(row[EPISODE_RETURN_MEAN])
        if EPISODE_RETURN_MEAN in row
        else current.episode_return_mean
    )
    evaluation_return = (
        _finite(row[EVALUATION_RETURN_MEAN])
        if row.get(EVALUATION_RETURN_MEAN) is not None
        else current.evaluation_return_mean
    )
    return Progress(
        iteration=int(row.get(ITERATION, current.iteration)),
        timesteps=int(row.get(TIMESTEPS_TOTAL, current.timesteps)),
        episode_return_mean=episode_return,
        evaluation_return_mean=evaluation_return,
        last_checkpoint=observed.last_checkpoint or current.last_checkpoint,
        exported_policy=observed.exported_policy or current.exported_policy,
        last_update_time=observed.time,
        samples_per_second=samples if samples is not None and samples >= 0 else None,
    )


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
    resumed = decision.event == PhaseEvent.UNSUSPEND and applies(previous.phase, decision.event)
    status = RLJobStatus(
        phase=phase,
        conditions=conditions,
        progress=merge_progress(previous.progress, observed.progress),
        attempt=decision.attempt,
        restarts=decision.restarts,
        preemptions=decision.preemptions,
        preempted_pods=list(decision.preempted_pods),
        ray_cluster=observed.cluster.name if observed.cluster else None,
        start_time=started_at(previous, phase, resumed, observed.now),
        head_pod_uid=_head_pod_uid(previous, decision, observed),
        completion_time=finished_at(previous, phase, observed.now),
        observed_generation=observed.generation,
    )
    return StatusUpdate(
        status=status,
        events=change_events(previous.phase, phase, decision, changed)
        + unschedulable_event(previous, conditions),
        action=decision.action,
    )
