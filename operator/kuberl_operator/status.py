"""The job's status, computed by one pure function from the spec and what the reconciler observed.

`compute_status(spec, observed)` reads no clock, no environment and no API: the reconciler gathers
an `Observed` (the current status, the RayCluster, the head pod, disrupted rollout workers, pods
the scheduler cannot place, the driver's submission, the newest progress row, the time), calls
it, writes `StatusUpdate.status` when it differs from the current one, emits
`StatusUpdate.events` and carries out `StatusUpdate.action`.

The phase is decided by one transition function, `next_phase(current, event)`, over the table
`TRANSITIONS`; `compute_status` only works out which `PhaseEvent` the observation amounts to.

Attempts. Each Ray cluster serves one attempt (1, 2, ...; the `kuberl.io/attempt` label) and each
attempt submits its driver once (`builders.submission_id(job, attempt)`). The attempt number is
bumped the moment an attempt is given up (head lost, driver failed, job unsuspended), so the old
attempt's cluster becomes stale at once and its failure cannot be counted twice: the reconciler
only reports the head, workers and driver of the current attempt's cluster. The attempt is kept
in `status.attempt`, so it survives an operator restart. The submission records the head pod's UID
(`status.headPodUID`): a head pod of another UID in the same attempt is one KubeRay recreated, and
the driver went with the old one, so the attempt is given up (counted) rather than submitted again.

A driver that exits with EXIT_INVALID_JOB found the job invalid (an unknown env, an unsupported
space, more resources than the cluster will ever have): the job fails at once with reason
InvalidSpec and the driver's own message, from the final record that ends its log.

Restart backoff. A failed attempt turns Progressing False (reason RestartBackoff); the next
attempt's cluster is created once `backoff_seconds(...)` have passed since that condition's
lastTransitionTime, which is the moment of the failure, stored in the status itself.

Pods the scheduler cannot place (no GPU node, a request larger than any node, a node selector
nothing matches) leave the phase alone (the job waits where it is; activeDeadlineSeconds still
counts) but turn the Schedulable condition False with the scheduler's message per
group, and post one Warning Event per distinct message, until they are scheduled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from kuberl_operator.constants import (
    KUBERAY_AVAILABLE_CONDITION,
    KUBERAY_RECHECK_SECONDS,
    MAX_BACKOFF_SECONDS,
    RAYCLUSTER_CRD_NAME,
    REASON_BACKOFF_LIMIT_EXCEEDED,
    REASON_CLUSTER_LOST,
    REASON_CRD_FOUND,
    REASON_CRD_NOT_FOUND,
    REASON_DEADLINE_EXCEEDED,
    REASON_DRIVER_FAILED,
    REASON_DRIVER_RUNNING,
    REASON_DRIVER_SUCCEEDED,
    REASON_FINISHED,
    REASON_HEAD_FAILED,
    REASON_HEAD_PREEMPTED,
    REASON_HEAD_REPLACED,
    REASON_INVALID_SPEC,
    REASON_NO_UNSCHEDULABLE_PODS,
    REASON_NOT_COMPLETE,
    REASON_NOT_FAILED,
    REASON_NOT_PREEMPTED,
    REASON_NOT_SUSPENDED,
    REASON_PROVISIONING,
    REASON_RESTART_BACKOFF,
    REASON_RESTART_REQUIRED,
    REASON_RESUMING,
    REASON_SPEC_APPLIED,
    REASON_STALE_ATTEMPT,
    REASON_SUSPENDED,
    REASON_UNSCHEDULABLE,
    REASON_WAITING_FOR_WORKERS,
    REASON_WORKER_PREEMPTED,
    REASON_WORKERS_REFILLED,
    SCHEDULABLE_CONDITION,
    UP_TO_DATE_CONDITION,
)
from kuberl_operator.spec import (
    Condition,
    ConditionType,
    Phase,
    PreemptionPolicy,
    Progress,
    RestartPolicy,
    RLJobSpec,
    RLJobStatus,
)
from kuberl_trainer.progress_row import (
    EPISODE_RETURN_MEAN,
    EXIT_INVALID_JOB,
    ITERATION,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
    Outcome,
)

# --- What the reconciler observes ---------------------------------------------------------------


class HeadFate(StrEnum):
    """What became of the current attempt's head pod."""

    RUNNING = "Running"
    PREEMPTED = "Preempted"  # a DisruptionTarget condition, or its node is gone
    FAILED = "Failed"  # any other loss: the container failed, the pod was deleted or evicted


class DriverState(StrEnum):
    """A submission's status as the Ray Jobs API reports it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass(frozen=True)
class ObservedCluster:
    """The job's RayCluster as it is now."""

    name: str
    attempt: int
    """Its `kuberl.io/attempt` label."""
    state: str | None = None
    """KubeRay's `.status.state`: "ready", "suspended", or None while it comes up."""
    head_ready: bool = False
    """The head pod is Ready."""

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.head_ready


@dataclass(frozen=True)
class ObservedHead:
    """The current attempt's head pod."""

    fate: HeadFate
    reason: str = ""
    """Why it was lost, in words (the pod's reason and message, or "node gone")."""
    uid: str = ""
    """The pod's UID: KubeRay may replace a failed head with a new pod before the operator sees
    the old one fail, and the new UID is how that shows."""


HEAD_GROUP = "head"
"""`UnschedulablePods.group` of the head pod."""


@dataclass(frozen=True)
class UnschedulablePods:
    """Pods of one group of the current attempt's Ray cluster that the scheduler cannot place
    (their PodScheduled condition is False with reason Unschedulable)."""

    group: str
    """HEAD_GROUP for the head pod, else the worker group's name (rollout, rollout-on-demand)."""
    pods: int
    message: str
    """The scheduler's message, such as "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    (the most common one among the group's pods)."""

    def describe(self) -> str:
        """The group's problem in words, naming the group."""
        if self.group == HEAD_GROUP:
            return f"the head pod cannot be scheduled: {self.message}"
        pods = "1 pod" if self.pods == 1 else f"{self.pods} pods"
        return f"{pods} of worker group {self.group} cannot be scheduled: {self.message}"


@dataclass(frozen=True)
class ObservedDriver:
    """The current attempt's driver submission in the Ray Jobs API."""

    state: DriverState
    message: str = ""
    """Why it ended: its final record's message, else the Jobs API's."""
    exit_code: int | None = None
    """The driver's exit status once it has exited (the Jobs API's driver_exit_code)."""
    outcome: Outcome | None = None
    """How its final record says it ended; None without one (it runs, or it crashed)."""

    @property
    def invalid_job(self) -> bool:
        """The driver found the job invalid: retrying cannot help (EXIT_INVALID_JOB)."""
        return self.state == DriverState.FAILED and (
            self.exit_code == EXIT_INVALID_JOB or self.outcome == Outcome.INVALID_JOB
        )


@dataclass(frozen=True)
class ObservedProgress:
    """The driver's newest progress (from its metrics, or its final record), and when it was
    reported."""

    row: dict[str, Any]
    """Keys of a progress row (kuberl_trainer.progress_row): iteration, timesteps_total,
    episode_return_mean, samples_per_s."""
    time: datetime
    last_checkpoint: str | None = None


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile observed, in plain values; `compute_status` reads nothing else."""

    status: RLJobStatus
    generation: int
    now: datetime
    kuberay_available: bool = True
    """KubeRay's RayCluster CRD is installed."""
    spec_problems: tuple[str, ...] = ()
    """Why the spec is invalid, each naming its field; empty when valid."""
    cluster: ObservedCluster | None = None
    head: ObservedHead | None = None
    """The head pod of the current attempt's cluster; None while there is none."""
    disrupted_workers: frozenset[str] = frozenset()
    """UIDs of the current attempt's rollout worker pods that were preempted (a DisruptionTarget
    condition, or their node gone) and still exist; each is counted once (status.preemptedPods)."""
    workers_short: int = 0
    """Rollout worker pods the current attempt's cluster lacks: its replicas minus the worker pods
    that exist and were not preempted (0 once KubeRay has refilled the group)."""
    stale_spec: tuple[str, ...] = ()
    """Spec fields that changed since the current attempt's cluster was built and cannot change
    under a running driver (they apply on the next attempt)."""
    driver: ObservedDriver | None = None
    """The current attempt's submission; None before it is submitted (or while the Jobs API cannot
    be reached)."""
    progress: ObservedProgress | None = None
    driver_waiting_s: float = 0.0
    """Seconds the running driver has been waiting for Ray nodes that its rollout workers fit on
    (pods still starting); 0 when it is not waiting."""
    unschedulable: tuple[UnschedulablePods, ...] = ()
    """The current attempt's pods the scheduler cannot place, by group (the head first); empty
    when every pod is scheduled or still waiting for the scheduler's first try."""


# --- What the reconciler does next --------------------------------------------------------------


@dataclass(frozen=True)
class Nothing:
    """Nothing to do until something changes (the reconciler's timer still polls)."""


@dataclass(frozen=True)
class CreateCluster:
    """Create the children of this attempt (builders.build_children), unless they exist."""

    attempt: int


@dataclass(frozen=True)
class SubmitDriver:
    """Submit the driver as `builders.submission_id(job, attempt)` (a retry of the same id is
    recognised by the Jobs API, not run twice)."""

    attempt: int


@dataclass(frozen=True)
class DeleteCluster:
    """Delete the job's RayCluster (the job, its checkpoints and its storage stay)."""

    reason: str


@dataclass(frozen=True)
class Requeue:
    """Look again after this many seconds."""

    after_seconds: float


@dataclass(frozen=True)
class DeleteJob:
    """Delete the RLJob itself (its TTL after finishing has passed)."""


Action = Nothing | CreateCluster | SubmitDriver | DeleteCluster | Requeue | DeleteJob


@dataclass(frozen=True)
class KubeEvent:
    """A Kubernetes Event to emit on the RLJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class StatusUpdate:
    """The result of one `compute_status`."""

    status: RLJobStatus
    events: tuple[KubeEvent, ...] = ()
    action: Action = field(default_factory=Nothing)

    @property
    def attempt(self) -> int:
        return self.status.attempt

    @property
    def phase(self) -> Phase:
        assert self.status.phase is not None
        return self.status.phase


# --- The phase machine --------------------------------------------------------------------------


class PhaseEvent(StrEnum):
    """What an observation amounts to, as far as the phase is concerned."""

    START = "Start"  # the first attempt's cluster is requested
    DRIVER_RUNNING = "DriverRunning"
    HEAD_PREEMPTED = "HeadPreempted"  # the attempt is given up, to be resumed
    NEW_ATTEMPT = "NewAttempt"  # the next attempt's cluster is requested
    RESTART = "Restart"  # the attempt failed; the next one follows after a backoff
    SUCCEEDED = "Succeeded"
    FAIL = "Fail"  # invalid spec, restarts exhausted, deadline exceeded, preemption with Fail
    SUSPEND = "Suspend"
    UNSUSPEND = "Unsuspend"
    WORKERS_PREEMPTED = "WorkersPreempted"  # the driver keeps going while the group is refilled
    WORKERS_REFILLED = "WorkersRefilled"


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})
ACTIVE = frozenset(
    {Phase.PENDING, Phase.PROVISIONING, Phase.RUNNING, Phase.PREEMPTED, Phase.RESUMING}
)

TRANSITIONS: dict[tuple[Phase, PhaseEvent], Phase] = {
    (Phase.PENDING, PhaseEvent.START): Phase.PROVISIONING,
    (Phase.PROVISIONING, PhaseEvent.DRIVER_RUNNING): Phase.RUNNING,
    (Phase.RESUMING, PhaseEvent.DRIVER_RUNNING): Phase.RUNNING,
    (Phase.PREEMPTED, PhaseEvent.NEW_ATTEMPT): Phase.RESUMING,
    (Phase.RESUMING, PhaseEvent.NEW_ATTEMPT): Phase.RESUMING,
    (Phase.SUSPENDED, PhaseEvent.UNSUSPEND): Phase.RESUMING,
    (Phase.RUNNING, PhaseEvent.WORKERS_PREEMPTED): Phase.PREEMPTED,
    (Phase.PREEMPTED, PhaseEvent.WORKERS_REFILLED): Phase.RUNNING,
    **{(phase, PhaseEvent.HEAD_PREEMPTED): Phase.PREEMPTED for phase in ACTIVE},
    **{(phase, PhaseEvent.RESTART): Phase.RESUMING for phase in ACTIVE},
    **{(phase, PhaseEvent.SUCCEEDED): Phase.SUCCEEDED for phase in ACTIVE},
    **{(phase, PhaseEvent.FAIL): Phase.FAILED for phase in ACTIVE | {Phase.SUSPENDED}},
    **{(phase, PhaseEvent.SUSPEND): Phase.SUSPENDED for phase in ACTIVE},
}
"""(phase, event) → next phase. A pair not listed leaves the phase as it is: Succeeded and Failed
are final, and an event that does not apply to a phase changes nothing."""


def _applies(current: Phase | None, event: PhaseEvent | None) -> bool:
    """Whether `event` is a transition (a listed pair) for a job in phase `current`."""
    return event is not None and (current or Phase.PENDING, event) in TRANSITIONS


def next_phase(current: Phase | None, event: PhaseEvent | None) -> Phase:
    """The one transition function: where `event` takes a job in phase `current` (None: new)."""
    current = current or Phase.PENDING
    if event is None:
        return current
    return TRANSITIONS.get((current, event), current)


# --- Pure helpers -------------------------------------------------------------------------------


def backoff_seconds(policy: RestartPolicy, restarts: int) -> int:
    """The wait before restart number `restarts` (1, 2, ...): backoffSeconds doubled per earlier
    restart, capped at MAX_BACKOFF_SECONDS, or at backoffSeconds itself when that is longer."""
    base = policy.backoff_seconds
    cap = max(base, MAX_BACKOFF_SECONDS)
    doublings = min(max(restarts - 1, 0), 32)  # 2**32 * 1 s is past any cap already
    return min(base * 2**doublings, cap)


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def merge_progress(current: Progress, observed: ObservedProgress | None) -> Progress:
    """The progress after an observed row; a row no newer than the last one changes nothing, so
    progress never goes back to an older report."""
    if observed is None:
        return current
    if current.last_update_time is not None and observed.time <= current.last_update_time:
        return current
    row = observed.row
    samples = _finite(row.get(SAMPLES_PER_S))
    return Progress(
        iteration=int(row.get(ITERATION, current.iteration)),
        timesteps=int(row.get(TIMESTEPS_TOTAL, current.timesteps)),
        episode_return_mean=_finite(row.get(EPISODE_RETURN_MEAN)),
        last_checkpoint=observed.last_checkpoint or current.last_checkpoint,
        last_update_time=observed.time,
        samples_per_second=samples if samples is not None and samples >= 0 else None,
    )


def _condition(status: RLJobStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


# --- The decision -------------------------------------------------------------------------------


@dataclass
class _Decision:
    """What compute_status works out, step by step, before the status is assembled."""

    event: PhaseEvent | None = None
    reason: str = ""
    message: str = ""
    action: Action = field(default_factory=Nothing)
    attempt: int = 0
    restarts: int = 0
    preemptions: int = 0
    workers_preempted: int = 0
    preempted_pods: tuple[str, ...] = ()
    in_backoff: bool = False
    waiting_for_workers: bool = False


def _decide(spec: RLJobSpec | None, observed: Observed, phase: Phase) -> _Decision:
    status = observed.status
    # Without a recorded attempt (a status write was lost), the cluster's label is the best guess.
    attempt = status.attempt or (observed.cluster.attempt if observed.cluster else 0)
    decision = _Decision(
        attempt=attempt,
        restarts=status.restarts,
        preemptions=status.preemptions,
        preempted_pods=tuple(status.preempted_pods),
    )
    if phase in TERMINAL:
        decision.action = _finished_action(spec, observed)
        return decision
    if observed.spec_problems or spec is None:
        problems = observed.spec_problems or ("the spec could not be read",)
        return _fail(
            decision, observed, REASON_INVALID_SPEC, "invalid spec: " + "; ".join(problems)
        )
    if not observed.kuberay_available:
        decision.action = Requeue(KUBERAY_RECHECK_SECONDS)
        decision.in_backoff = _in_backoff(status, phase)
        return decision
    deadline = _deadline_exceeded(spec, observed, phase)
    if deadline:
        return _fail(decision, observed, REASON_DEADLINE_EXCEEDED, deadline)
    if spec.suspend:
        return _suspend(decision, observed, phase)
    if phase == Phase.SUSPENDED:
        decision.event, decision.reason = PhaseEvent.UNSUSPEND, REASON_RESUMING
        decision.message = "unsuspended: resuming from the newest checkpoint"
        decision.attempt += 1
        decision.action = _start_attempt(observed, decision.attempt)
        return decision
    return _advance(spec, observed, phase, decision)


def _fail(decision: _Decision, observed: Observed, reason: str, message: str) -> _Decision:
    decision.event, decision.reason, decision.message = PhaseEvent.FAIL, reason, message
    decision.action = DeleteCluster(reason) if observed.cluster else Nothing()
    return decision


def _finished_action(spec: RLJobSpec | None, observed: Observed) -> Action:
    """Succeeded or Failed: the cluster goes; after ttlSecondsAfterFinished, the job too."""
    ttl = spec.ttl_seconds_after_finished if spec else None
    finished = observed.status.completion_time
    if ttl is not None and finished is not None:
        remaining = ttl - _seconds(observed.now, finished)
        if remaining <= 0:
            return DeleteJob()
        if observed.cluster is None:
            return Requeue(remaining)
    return DeleteCluster(REASON_FINISHED) if observed.cluster else Nothing()


def _deadline_exceeded(spec: RLJobSpec, observed: Observed, phase: Phase) -> str | None:
    """activeDeadlineSeconds counts from status.startTime, as for Kubernetes Jobs: from the
    job's start (its first cluster requested), provisioning included, and stops while the job is
    suspended (resuming sets startTime anew)."""
    deadline, started = spec.active_deadline_seconds, observed.status.start_time
    if deadline is None or started is None or phase == Phase.SUSPENDED:
        return None
    elapsed = _seconds(observed.now, started)
    if elapsed < deadline:
        return None
    return (
        f"active for {elapsed:.0f}s since it started at {started.isoformat()}, past "
        f"activeDeadlineSeconds {deadline}"
    )


def _suspend(decision: _Decision, observed: Observed, phase: Phase) -> _Decision:
    if phase != Phase.SUSPENDED:
        decision.event, decision.reason = PhaseEvent.SUSPEND, REASON_SUSPENDED
        decision.message = "suspended: the Ray cluster is deleted; checkpoints are kept"
    decision.action = DeleteCluster(REASON_SUSPENDED) if observed.cluster else Nothing()
    return decision


def _start_attempt(observed: Observed, attempt: int) -> Action:
    """Clear the way for `attempt`: a stale cluster goes first, then the new one is created (one
    of this attempt already there was created before the status saying so was written)."""
    if observed.cluster is None:
        return CreateCluster(attempt)
    if observed.cluster.attempt == attempt:
        return Nothing()
    return DeleteCluster(REASON_STALE_ATTEMPT)


def _in_backoff(status: RLJobStatus, phase: Phase) -> bool:
    progressing = _condition(status, ConditionType.PROGRESSING)
    return (
        phase == Phase.RESUMING
        and progressing is not None
        and progressing.reason == REASON_RESTART_BACKOFF
    )


def _advance(spec: RLJobSpec, observed: Observed, phase: Phase, decision: _Decision) -> _Decision:
    """An active job: start, wait out a backoff, resume, or follow the current attempt."""
    cluster = observed.cluster
    if phase == Phase.PENDING or decision.attempt == 0:
        decision.event, decision.reason = PhaseEvent.START, REASON_PROVISIONING
        decision.message = "creating the Ray cluster for attempt 1"
        decision.attempt = max(decision.attempt, 1)
        decision.action = _start_attempt(observed, decision.attempt)
        return decision
    if cluster is not None and cluster.attempt != decision.attempt:
        decision.action = DeleteCluster(REASON_STALE_ATTEMPT)
        decision.in_backoff = _in_backoff(observed.status, phase)
        return decision
    attempt_given_up = phase == Phase.RESUMING or (
        phase == Phase.PREEMPTED and not _workers_preempted(observed.status)
    )
    if attempt_given_up and cluster is None:
        return _next_attempt(spec, observed, phase, decision)
    if cluster is None:
        if phase in (Phase.RUNNING, Phase.PREEMPTED):
            message = f"the RayCluster of attempt {decision.attempt} disappeared"
            return _restart(spec, observed, decision, REASON_CLUSTER_LOST, message)
        decision.action = CreateCluster(decision.attempt)  # requested; not visible yet
        return decision
    return _follow_attempt(spec, observed, phase, decision)


def _next_attempt(
    spec: RLJobSpec, observed: Observed, phase: Phase, decision: _Decision
) -> _Decision:
    if _in_backoff(observed.status, phase):
        progressing = _condition(observed.status, ConditionType.PROGRESSING)
        assert progressing is not None
        wait = backoff_seconds(spec.restart_policy, decision.restarts)
        remaining = wait - _seconds(observed.now, progressing.last_transition_time)
        if remaining > 0:
            decision.in_backoff = True
            decision.action = Requeue(remaining)
            return decision
    elif phase == Phase.RESUMING:  # the next attempt's cluster was requested already
        decision.action = CreateCluster(decision.attempt)
        return decision
    decision.event, decision.reason = PhaseEvent.NEW_ATTEMPT, REASON_RESUMING
    decision.message = (
        f"creating the Ray cluster for attempt {decision.attempt}; the driver resumes from the "
        "newest checkpoint"
    )
    decision.action = CreateCluster(decision.attempt)
    return decision


def _follow_attempt(
    spec: RLJobSpec, observed: Observed, phase: Phase, decision: _Decision
) -> _Decision:
    """The current attempt's cluster exists: react to its head, workers and driver."""
    head, driver = observed.head, observed.driver
    if head is not None and head.fate == HeadFate.PREEMPTED:
        return _head_preempted(spec, observed, decision, head.reason)
    if head is not None and head.fate == HeadFate.FAILED:
        message = f"the head pod of attempt {decision.attempt} was lost: {head.reason}"
        return _restart(spec, observed, decision, REASON_HEAD_FAILED, message)
    submitted_to = observed.status.head_pod_uid
    if head is not None and head.uid and submitted_to and head.uid != submitted_to:
        message = (
            f"the head pod of attempt {decision.attempt} was replaced (KubeRay recreated it: pod "
            f"{submitted_to} is now {head.uid}), and with it the driver submitted there"
        )
        return _restart(spec, observed, decision, REASON_HEAD_REPLACED, message)
    counted = set(decision.preempted_pods)
    decision.workers_preempted = len(observed.disrupted_workers - counted)
    decision.preemptions += decision.workers_preempted
    decision.preempted_pods = tuple(sorted(observed.disrupted_workers))  # those gone are forgotten
    if driver is not None and driver.state == DriverState.SUCCEEDED:
        decision.event, decision.reason = PhaseEvent.SUCCEEDED, REASON_DRIVER_SUCCEEDED
        decision.message = driver.message or "training finished"
        decision.action = DeleteCluster(REASON_FINISHED)
    elif driver is not None and driver.invalid_job:
        message = f"the driver found the job invalid: {driver.message or 'no message'}"
        return _fail(decision, observed, REASON_INVALID_SPEC, message)
    elif driver is not None and driver.state in (DriverState.FAILED, DriverState.STOPPED):
        message = f"driver {driver.state.value}: {driver.message or 'no message'}"
        return _restart(spec, observed, decision, REASON_DRIVER_FAILED, message)
    elif driver is not None and driver.state == DriverState.RUNNING:
        if decision.workers_preempted and phase == Phase.RUNNING:
            decision.event, decision.reason = PhaseEvent.WORKERS_PREEMPTED, REASON_WORKER_PREEMPTED
            decision.message = _workers_preempted_message(decision.workers_preempted)
        elif phase == Phase.PREEMPTED and observed.workers_short <= 0:
            decision.event, decision.reason = PhaseEvent.WORKERS_REFILLED, REASON_WORKERS_REFILLED
            decision.message = "the rollout worker group is whole again"
        elif phase in (Phase.PROVISIONING, Phase.RESUMING) and observed.driver_waiting_s > 0:
            decision.waiting_for_workers = True  # not training yet: the phase stays
        elif phase in (Phase.PROVISIONING, Phase.RESUMING):
            decision.event, decision.reason = PhaseEvent.DRIVER_RUNNING, REASON_DRIVER_RUNNING
            decision.message = f"the driver of attempt {decision.attempt} is training"
    elif driver is None and observed.cluster is not None and observed.cluster.ready:
        decision.action = SubmitDriver(decision.attempt)
    return decision


def _workers_preempted_message(count: int) -> str:
    return (
        f"{count} rollout worker(s) preempted; the driver keeps training while the group is "
        "refilled"
    )


def _workers_preempted(status: RLJobStatus) -> bool:
    """The job is Preempted for lost rollout workers (its attempt goes on), not for its head."""
    preempted = _condition(status, ConditionType.PREEMPTED)
    return preempted is not None and preempted.reason == REASON_WORKER_PREEMPTED


def _head_preempted(
    spec: RLJobSpec, observed: Observed, decision: _Decision, why: str
) -> _Decision:
    policy = spec.restart_policy
    decision.preemptions += 1
    message = f"the head pod of attempt {decision.attempt} was preempted: {why or 'preempted'}"
    if policy.on_preemption == PreemptionPolicy.FAIL:
        return _fail(decision, observed, REASON_HEAD_PREEMPTED, message + " (onPreemption: Fail)")
    if policy.on_preemption == PreemptionPolicy.COUNT_AS_RESTART:
        if decision.restarts + 1 > policy.max_restarts:
            return _exhausted(decision, observed, policy, message)
        decision.restarts += 1
    decision.event, decision.reason, decision.message = (
        PhaseEvent.HEAD_PREEMPTED,
        REASON_HEAD_PREEMPTED,
        message + "; resuming from the newest checkpoint",
    )
    decision.attempt += 1
    decision.action = DeleteCluster(REASON_HEAD_PREEMPTED)
    return decision


def _restart(
    spec: RLJobSpec, observed: Observed, decision: _Decision, reason: str, message: str
) -> _Decision:
    """A failed attempt: the next one after a backoff, or Failed once restarts are used up."""
    policy = spec.restart_policy
    if decision.restarts + 1 > policy.max_restarts:
        return _exhausted(decision, observed, policy, message)
    decision.restarts += 1
    wait = backoff_seconds(policy, decision.restarts)
    decision.event, decision.reason = PhaseEvent.RESTART, reason
    decision.message = f"{message}; restart {decision.restarts} of {policy.max_restarts} in {wait}s"
    decision.attempt += 1
    decision.in_backoff = True
    decision.action = DeleteCluster(reason) if observed.cluster else Requeue(wait)
    return decision


def _exhausted(
    decision: _Decision, observed: Observed, policy: RestartPolicy, message: str
) -> _Decision:
    return _fail(
        decision,
        observed,
        REASON_BACKOFF_LIMIT_EXCEEDED,
        f"{message}; restartPolicy.maxRestarts ({policy.max_restarts}) used up",
    )


# --- Conditions ---------------------------------------------------------------------------------


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


def _wanted_conditions(phase: Phase, decision: _Decision, observed: Observed) -> dict[str, _Want]:
    previous = observed.status
    failed = _condition(previous, ConditionType.FAILED)
    complete = _condition(previous, ConditionType.COMPLETE)
    entered = _applies(previous.phase, decision.event)
    detail = decision.message if entered else None
    return {
        ConditionType.READY: _ready(phase, decision),
        ConditionType.PROGRESSING: _progressing(phase, decision, observed),
        ConditionType.PREEMPTED: _preempted(phase, decision, observed),
        ConditionType.COMPLETE: (
            _Want("True", REASON_DRIVER_SUCCEEDED, detail or (complete.message if complete else ""))
            if phase == Phase.SUCCEEDED
            else _Want("False", REASON_NOT_COMPLETE)
        ),
        ConditionType.FAILED: (
            _Want(
                "True",
                decision.reason if entered else (failed.reason if failed else REASON_NOT_FAILED),
                detail or (failed.message if failed else ""),
            )
            if phase == Phase.FAILED
            else _Want("False", REASON_NOT_FAILED)
        ),
        ConditionType.SUSPENDED: (
            _Want("True", REASON_SUSPENDED, "spec.suspend is true")
            if phase == Phase.SUSPENDED
            else _Want("False", REASON_NOT_SUSPENDED)
        ),
        UP_TO_DATE_CONDITION: _up_to_date(observed),
        SCHEDULABLE_CONDITION: _schedulable(phase, observed),
        KUBERAY_AVAILABLE_CONDITION: (
            _Want("True", REASON_CRD_FOUND)
            if observed.kuberay_available
            else _Want("False", REASON_CRD_NOT_FOUND, KUBERAY_MISSING_MESSAGE)
        ),
    }


def _ready(phase: Phase, decision: _Decision) -> _Want:
    if phase == Phase.RUNNING:
        return _Want("True", REASON_DRIVER_RUNNING, f"attempt {decision.attempt} is training")
    return _Want("False", phase.value)


def _progressing(phase: Phase, decision: _Decision, observed: Observed) -> _Want:
    if not observed.kuberay_available and not decision.in_backoff:
        return _Want("False", REASON_CRD_NOT_FOUND, "waiting for KubeRay's RayCluster CRD")
    if decision.in_backoff:
        if decision.event == PhaseEvent.RESTART:
            return _Want("False", REASON_RESTART_BACKOFF, decision.message)
        kept = _condition(observed.status, ConditionType.PROGRESSING)
        return _Want("False", REASON_RESTART_BACKOFF, kept.message if kept else "")
    if phase in TERMINAL or phase == Phase.SUSPENDED:
        return _Want("False", phase.value)
    if decision.waiting_for_workers:
        return _Want(
            "True",
            REASON_WAITING_FOR_WORKERS,
            f"the driver of attempt {decision.attempt} waits for the Ray nodes of its rollout "
            "workers to join (their pods are still starting); it fails the attempt if they do "
            "not join in time",
        )
    if phase == Phase.RUNNING:
        return _Want("True", REASON_DRIVER_RUNNING)
    return _Want("True", phase.value)


def _preempted(phase: Phase, decision: _Decision, observed: Observed) -> _Want:
    kept = _condition(observed.status, ConditionType.PREEMPTED)
    if decision.event == PhaseEvent.HEAD_PREEMPTED:
        return _Want("True", REASON_HEAD_PREEMPTED, decision.message)
    if decision.workers_preempted:
        return _Want(
            "True", REASON_WORKER_PREEMPTED, _workers_preempted_message(decision.workers_preempted)
        )
    if kept is not None and kept.status == "True":
        if kept.reason == REASON_HEAD_PREEMPTED and phase in (Phase.PREEMPTED, Phase.RESUMING):
            return _Want("True", kept.reason, kept.message)
        if kept.reason == REASON_WORKER_PREEMPTED and phase == Phase.PREEMPTED:
            return _Want("True", kept.reason, kept.message)
    return _Want("False", REASON_NOT_PREEMPTED)


def _up_to_date(observed: Observed) -> _Want:
    if observed.stale_spec and observed.cluster is not None:
        fields = ", ".join(f"spec.{name}" for name in observed.stale_spec)
        return _Want(
            "False",
            REASON_RESTART_REQUIRED,
            f"{fields} changed after attempt {observed.cluster.attempt} started and applies on "
            "the next attempt; suspend and resume the job to apply it now (it resumes from the "
            "newest checkpoint)",
        )
    return _Want("True", REASON_SPEC_APPLIED)


def _schedulable(phase: Phase, observed: Observed) -> _Want:
    """False, with each group's scheduler message, while pods of an active job cannot be placed;
    a finished or suspended job's cluster is on its way out, so what it lacks no longer matters."""
    if observed.unschedulable and phase not in TERMINAL and phase != Phase.SUSPENDED:
        message = "; ".join(group.describe() for group in observed.unschedulable)
        return _Want("False", REASON_UNSCHEDULABLE, message)
    return _Want("True", REASON_NO_UNSCHEDULABLE_PODS)


def _merge_conditions(
    wanted: dict[str, _Want], observed: Observed
) -> tuple[list[Condition], list[Condition]]:
    """The new conditions, and those among them whose status changed (or that appear False).
    lastTransitionTime moves only when the status does."""
    conditions, changed = [], []
    for type_, want in wanted.items():
        old = _condition(observed.status, type_)
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


# --- Events -------------------------------------------------------------------------------------

WARNING_PHASES = frozenset({Phase.PREEMPTED, Phase.FAILED})


def _events(
    previous: Phase | None, phase: Phase, decision: _Decision, changed: list[Condition]
) -> tuple[KubeEvent, ...]:
    events: list[KubeEvent] = []
    if _applies(previous, decision.event):
        warning = phase in WARNING_PHASES or decision.event == PhaseEvent.RESTART
        events.append(
            KubeEvent("Warning" if warning else "Normal", decision.reason, decision.message)
        )
    if decision.workers_preempted and decision.event != PhaseEvent.WORKERS_PREEMPTED:
        message = _workers_preempted_message(decision.workers_preempted)
        events.append(KubeEvent("Warning", REASON_WORKER_PREEMPTED, message))
    for condition in changed:
        if condition.type == KUBERAY_AVAILABLE_CONDITION:
            kind = "Normal" if condition.status == "True" else "Warning"
            events.append(KubeEvent(kind, condition.reason, condition.message or "KubeRay found"))
    return tuple(events)


def _unschedulable_event(
    previous: RLJobStatus, conditions: list[Condition]
) -> tuple[KubeEvent, ...]:
    """A Warning when the Schedulable condition turns False or its message changes: once per
    distinct scheduler message, not on every poll (the condition keeps the last one said)."""
    now = next(c for c in conditions if c.type == SCHEDULABLE_CONDITION)
    before = _condition(previous, SCHEDULABLE_CONDITION)
    if now.status != "False":
        return ()
    if before is not None and before.status == "False" and before.message == now.message:
        return ()
    return (KubeEvent("Warning", REASON_UNSCHEDULABLE, now.message),)


# --- The one function ---------------------------------------------------------------------------


def _start_time(
    previous: RLJobStatus, phase: Phase, decision: _Decision, now: datetime
) -> datetime | None:
    """When the job started, as Kubernetes Jobs count it for activeDeadlineSeconds: when it first
    left Pending (its first cluster requested), and again when it is resumed from suspension."""
    if decision.event == PhaseEvent.UNSUSPEND and _applies(previous.phase, decision.event):
        return now
    if previous.start_time is not None:
        return previous.start_time
    return now if phase in ACTIVE - {Phase.PENDING} else None


def _head_pod_uid(previous: RLJobStatus, decision: _Decision, observed: Observed) -> str | None:
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
    decision = _decide(spec, observed, current)
    phase = next_phase(current, decision.event)
    conditions, changed = _merge_conditions(_wanted_conditions(phase, decision, observed), observed)
    finished = phase in TERMINAL
    status = RLJobStatus(
        phase=phase,
        conditions=conditions,
        progress=merge_progress(previous.progress, observed.progress),
        attempt=decision.attempt,
        restarts=decision.restarts,
        preemptions=decision.preemptions,
        preempted_pods=list(decision.preempted_pods),
        ray_cluster=observed.cluster.name if observed.cluster else None,
        start_time=_start_time(previous, phase, decision, observed.now),
        head_pod_uid=_head_pod_uid(previous, decision, observed),
        completion_time=previous.completion_time or (observed.now if finished else None),
        observed_generation=observed.generation,
    )
    return StatusUpdate(
        status=status,
        events=_events(previous.phase, phase, decision, changed)
        + _unschedulable_event(previous, conditions),
        action=decision.action,
    )


__all__ = [
    "HEAD_GROUP",
    "TRANSITIONS",
    "Action",
    "CreateCluster",
    "DeleteCluster",
    "DeleteJob",
    "DriverState",
    "HeadFate",
    "KubeEvent",
    "Nothing",
    "Observed",
    "ObservedCluster",
    "ObservedDriver",
    "ObservedHead",
    "ObservedProgress",
    "PhaseEvent",
    "Requeue",
    "StatusUpdate",
    "SubmitDriver",
    "UnschedulablePods",
    "backoff_seconds",
    "compute_status",
    "merge_progress",
    "next_phase",
]
