"""The decision: which `PhaseEvent` an observation amounts to, and what the reconciler does next.
Attempts, restarts and their backoff, preemption, the active deadline and suspension are decided
here: why a job restarted is in `_restart` and its callers.

Attempts. Each Ray cluster serves one attempt (1, 2, ...; the `kuberl.io/attempt` label) and each
attempt submits its driver once (`builders.submission_id(job, attempt)`). The attempt number is
bumped the moment an attempt is given up (head lost, driver failed, job unsuspended: the events
`phases.attempt_after` counts, for both backends), so the old
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

Names taken. Children are never created over objects the job does not own (`_names_taken`): a
name held by someone else's object fails the job (NameConflict, naming the object), since only a
new name can help; one held by a child of an earlier RLJob of the same name is waited for, since
the garbage collector removes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kuberl_operator.constants import (
    KUBERAY_RECHECK_SECONDS,
    LEFTOVER_RECHECK_SECONDS,
    MAX_BACKOFF_SECONDS,
)
from kuberl_operator.spec import (
    ConditionType,
    Phase,
    PreemptionPolicy,
    Reason,
    RestartPolicy,
    RLJobSpec,
    RLJobStatus,
)
from kuberl_operator.status.actions import (
    Action,
    CreateCluster,
    DeleteCluster,
    DeleteJob,
    Nothing,
    Requeue,
    SubmitDriver,
)
from kuberl_operator.status.observed import DriverState, HeadFate, Observed, condition_of
from kuberl_operator.status.phases import TERMINAL, PhaseEvent, attempt_after


def backoff_seconds(policy: RestartPolicy, restarts: int) -> int:
    """The wait before restart number `restarts` (1, 2, ...): backoffSeconds doubled per earlier
    restart, capped at MAX_BACKOFF_SECONDS, or at backoffSeconds itself when that is longer."""
    base = policy.backoff_seconds
    cap = max(base, MAX_BACKOFF_SECONDS)
    doublings = min(max(restarts - 1, 0), 32)  # 2**32 * 1 s is past any cap already
    return min(base * 2**doublings, cap)


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


@dataclass
class Decision:
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

    def amount_to(self, event: PhaseEvent, reason: str, message: str) -> None:
        """The observation amounts to `event`, for `reason`, said in `message`; the attempt moves
        as the event implies (`attempt_after`)."""
        self.event, self.reason, self.message = event, reason, message
        self.attempt = attempt_after(self.attempt, event)


def decide(spec: RLJobSpec | None, observed: Observed, phase: Phase) -> Decision:
    """What the observation amounts to, in `phase`; children are created only over free names."""
    decision = _decide(spec, observed, phase)
    if isinstance(decision.action, CreateCluster) and observed.taken_names:
        return _names_taken(decision, observed)
    return decision


def _names_taken(decision: Decision, observed: Observed) -> Decision:
    """The children would be created, but objects the job does not own hold some of their names:
    fail naming someone else's, or wait for an earlier job's to be garbage-collected."""
    foreign = [taken.describe() for taken in observed.taken_names if not taken.leftover]
    if foreign:
        return _fail(decision, observed, Reason.NAME_CONFLICT, "; ".join(foreign))
    decision.action = Requeue(LEFTOVER_RECHECK_SECONDS)
    return decision


def _decide(spec: RLJobSpec | None, observed: Observed, phase: Phase) -> Decision:
    status = observed.status
    # Without a recorded attempt (a status write was lost), the cluster's label is the best guess.
    attempt = status.attempt or (observed.cluster.attempt if observed.cluster else 0)
    decision = Decision(
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
            decision, observed, Reason.INVALID_SPEC, "invalid spec: " + "; ".join(problems)
        )
    if not observed.kuberay_available:
        decision.action = Requeue(KUBERAY_RECHECK_SECONDS)
        decision.in_backoff = _in_backoff(status, phase)
        return decision
    deadline = _deadline_exceeded(spec, observed, phase)
    if deadline:
        return _fail(decision, observed, Reason.DEADLINE_EXCEEDED, deadline)
    if spec.suspend:
        return _suspend(decision, observed, phase)
    if phase == Phase.SUSPENDED:
        decision.amount_to(
            PhaseEvent.UNSUSPEND,
            Reason.RESUMING,
            "unsuspended: resuming from the newest checkpoint",
        )
        decision.action = _start_attempt(observed, decision.attempt)
        return decision
    return _advance(spec, observed, phase, decision)


def _fail(decision: Decision, observed: Observed, reason: str, message: str) -> Decision:
    decision.amount_to(PhaseEvent.FAIL, reason, message)
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
    return DeleteCluster(Reason.FINISHED) if observed.cluster else Nothing()


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


def _suspend(decision: Decision, observed: Observed, phase: Phase) -> Decision:
    if phase != Phase.SUSPENDED:
        decision.amount_to(
            PhaseEvent.SUSPEND,
            Reason.SUSPENDED,
            "suspended: the Ray cluster is deleted; checkpoints are kept",
        )
    decision.action = DeleteCluster(Reason.SUSPENDED) if observed.cluster else Nothing()
    return decision


def _start_attempt(observed: Observed, attempt: int) -> Action:
    """Clear the way for `attempt`: a stale cluster goes first, then the new one is created (one
    of this attempt already there was created before the status saying so was written)."""
    if observed.cluster is None:
        return CreateCluster(attempt)
    if observed.cluster.attempt == attempt:
        return Nothing()
    return DeleteCluster(Reason.STALE_ATTEMPT)


def _in_backoff(status: RLJobStatus, phase: Phase) -> bool:
    progressing = condition_of(status, ConditionType.PROGRESSING)
    return (
        phase == Phase.RESUMING
        and progressing is not None
        and progressing.reason == Reason.RESTART_BACKOFF
    )


def _advance(spec: RLJobSpec, observed: Observed, phase: Phase, decision: Decision) -> Decision:
    """An active job: start, wait out a backoff, resume, or follow the current attempt."""
    cluster = observed.cluster
    if phase == Phase.PENDING or decision.attempt == 0:
        decision.amount_to(
            PhaseEvent.START, Reason.PROVISIONING, "creating the Ray cluster for attempt 1"
        )
        decision.action = _start_attempt(observed, decision.attempt)
        return decision
    if cluster is not None and cluster.attempt != decision.attempt:
        decision.action = DeleteCluster(Reason.STALE_ATTEMPT)
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
            return _restart(spec, observed, decision, Reason.CLUSTER_LOST, message)
        decision.action = CreateCluster(decision.attempt)  # requested; not visible yet
        return decision
    return _follow_attempt(spec, observed, phase, decision)


def _next_attempt(
    spec: RLJobSpec, observed: Observed, phase: Phase, decision: Decision
) -> Decision:
    if _in_backoff(observed.status, phase):
        progressing = condition_of(observed.status, ConditionType.PROGRESSING)
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
    decision.amount_to(
        PhaseEvent.NEW_ATTEMPT,
        Reason.RESUMING,
        f"creating the Ray cluster for attempt {decision.attempt}; the driver resumes from the "
        "newest checkpoint",
    )
    decision.action = CreateCluster(decision.attempt)
    return decision


def _follow_attempt(
    spec: RLJobSpec, observed: Observed, phase: Phase, decision: Decision
) -> Decision:
    """The current attempt's cluster exists: react to its head, workers and driver."""
    head, driver = observed.head, observed.driver
    if head is not None and head.fate == HeadFate.PREEMPTED:
        return _head_preempted(spec, observed, decision, head.reason)
    if head is not None and head.fate == HeadFate.FAILED:
        message = f"the head pod of attempt {decision.attempt} was lost: {head.reason}"
        return _restart(spec, observed, decision, Reason.HEAD_FAILED, message)
    submitted_to = observed.status.head_pod_uid
    if head is not None and head.uid and submitted_to and head.uid != submitted_to:
        message = (
            f"the head pod of attempt {decision.attempt} was replaced (KubeRay recreated it: pod "
            f"{submitted_to} is now {head.uid}), and with it the driver submitted there"
        )
        return _restart(spec, observed, decision, Reason.HEAD_REPLACED, message)
    counted = set(decision.preempted_pods)
    decision.workers_preempted = len(observed.disrupted_workers - counted)
    decision.preemptions += decision.workers_preempted
    decision.preempted_pods = tuple(sorted(observed.disrupted_workers))  # those gone are forgotten
    if driver is not None and driver.state == DriverState.SUCCEEDED:
        decision.amount_to(
            PhaseEvent.SUCCEEDED, Reason.DRIVER_SUCCEEDED, driver.message or "training finished"
        )
        decision.action = DeleteCluster(Reason.FINISHED)
    elif driver is not None and driver.invalid_job:
        message = f"the driver found the job invalid: {driver.message or 'no message'}"
        return _fail(decision, observed, Reason.INVALID_SPEC, message)
    elif driver is not None and driver.state in (DriverState.FAILED, DriverState.STOPPED):
        message = f"driver {driver.state.value}: {driver.message or 'no message'}"
        return _restart(spec, observed, decision, Reason.DRIVER_FAILED, message)
    elif driver is not None and driver.state == DriverState.RUNNING:
        _driver_running(observed, phase, decision)
    elif driver is None and observed.cluster is not None and observed.cluster.ready:
        decision.action = SubmitDriver(decision.attempt)
    return decision


def _driver_running(observed: Observed, phase: Phase, decision: Decision) -> None:
    """The attempt's driver is running: note workers preempted under it, a worker group whole
    again, or a driver that has started training."""
    if decision.workers_preempted and phase == Phase.RUNNING:
        decision.amount_to(
            PhaseEvent.WORKERS_PREEMPTED,
            Reason.WORKER_PREEMPTED,
            workers_preempted_message(decision.workers_preempted),
        )
    elif phase == Phase.PREEMPTED and observed.workers_short <= 0:
        decision.amount_to(
            PhaseEvent.WORKERS_REFILLED,
            Reason.WORKERS_REFILLED,
            "the rollout worker group is whole again",
        )
    elif phase in (Phase.PROVISIONING, Phase.RESUMING) and observed.driver_waiting_s > 0:
        decision.waiting_for_workers = True  # not training yet: the phase stays
    elif phase in (Phase.PROVISIONING, Phase.RESUMING):
        decision.amount_to(
            PhaseEvent.DRIVER_RUNNING,
            Reason.DRIVER_RUNNING,
            f"the driver of attempt {decision.attempt} is training",
        )


def workers_preempted_message(count: int) -> str:
    return (
        f"{count} rollout worker(s) preempted; the driver keeps training while the group is "
        "refilled"
    )


def _workers_preempted(status: RLJobStatus) -> bool:
    """The job is Preempted for lost rollout workers (its attempt goes on), not for its head."""
    preempted = condition_of(status, ConditionType.PREEMPTED)
    return preempted is not None and preempted.reason == Reason.WORKER_PREEMPTED


def _head_preempted(spec: RLJobSpec, observed: Observed, decision: Decision, why: str) -> Decision:
    policy = spec.restart_policy
    decision.preemptions += 1
    message = f"the head pod of attempt {decision.attempt} was preempted: {why or 'preempted'}"
    if policy.on_preemption == PreemptionPolicy.FAIL:
        return _fail(decision, observed, Reason.HEAD_PREEMPTED, message + " (onPreemption: Fail)")
    if policy.on_preemption == PreemptionPolicy.COUNT_AS_RESTART:
        if decision.restarts + 1 > policy.max_restarts:
            return _exhausted(decision, observed, policy, message)
        decision.restarts += 1
    decision.amount_to(
        PhaseEvent.HEAD_PREEMPTED,
        Reason.HEAD_PREEMPTED,
        message + "; resuming from the newest checkpoint",
    )
    decision.action = DeleteCluster(Reason.HEAD_PREEMPTED)
    return decision


def _restart(
    spec: RLJobSpec, observed: Observed, decision: Decision, reason: str, message: str
) -> Decision:
    """A failed attempt: the next one after a backoff, or Failed once restarts are used up."""
    policy = spec.restart_policy
    if decision.restarts + 1 > policy.max_restarts:
        return _exhausted(decision, observed, policy, message)
    decision.restarts += 1
    wait = backoff_seconds(policy, decision.restarts)
    decision.amount_to(
        PhaseEvent.RESTART,
        reason,
        f"{message}; restart {decision.restarts} of {policy.max_restarts} in {wait}s",
    )
    decision.in_backoff = True
    decision.action = DeleteCluster(reason) if observed.cluster else Requeue(wait)
    return decision


def _exhausted(
    decision: Decision, observed: Observed, policy: RestartPolicy, message: str
) -> Decision:
    return _fail(
        decision,
        observed,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        f"{message}; restartPolicy.maxRestarts ({policy.max_restarts}) used up",
    )
