"""The decision: which `PhaseEvent` an observation amounts to, and what the reconciler does next.
Attempts, restarts and their backoff, preemption, the active deadline and suspension (spec.suspend
or a spent budget: `budget`) are decided here: why a job restarted is in `_restart` and its
callers; the rules of attempts (when the next one starts, on which Ray cluster, never overlapping
the last) are in `attempts`.

A driver that exits with EXIT_INVALID_JOB found the job invalid (an unknown env, an unsupported
space, more resources than the cluster will ever have): the job fails at once with reason
InvalidSpec and the driver's own message, from the final record that ends its log.

Names taken. Children are never created over objects the job does not own (`_names_taken`): a
name held by someone else's object fails the job (NameConflict, naming the object), since only a
new name can help; one held by a child of an earlier RLJob of the same name is waited for, since
the garbage collector removes it."""

from __future__ import annotations

from datetime import datetime

from kuberl_operator.constants import KUBERAY_RECHECK_SECONDS, LEFTOVER_RECHECK_SECONDS
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
    StopDrivers,
    SubmitDriver,
)
from kuberl_operator.status.attempts import (
    backoff_left,
    backoff_seconds,
    in_backoff,
    next_driver,
    not_stopped_message,
    rebuild_reason,
)
from kuberl_operator.status.budget import suspension
from kuberl_operator.status.decision import Decision
from kuberl_operator.status.observed import DriverState, HeadFate, Observed, condition_of
from kuberl_operator.status.phases import TERMINAL, PhaseEvent


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def decide(spec: RLJobSpec | None, observed: Observed, phase: Phase) -> Decision:
    """What the observation amounts to, in `phase`; children are created only over free names,
    and a cluster created is built for the attempt that creates it."""
    decision = _decide(spec, observed, phase)
    if isinstance(decision.action, CreateCluster):
        decision.cluster_attempt = decision.action.attempt
        if observed.taken_names:
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
        cluster_attempt=status.cluster_attempt or attempt,
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
        decision.in_backoff = in_backoff(status, phase)
        return decision
    deadline = _deadline_exceeded(spec, observed, phase)
    if deadline:
        return _fail(decision, observed, Reason.DEADLINE_EXCEEDED, deadline)
    suspended = suspension(spec, observed.status)
    if suspended is not None:
        return _suspend(decision, observed, phase, *suspended)
    if phase == Phase.SUSPENDED:
        decision.amount_to(
            PhaseEvent.UNSUSPEND,
            Reason.RESUMING,
            "unsuspended: resuming from the newest checkpoint",
        )
        decision.action = _start_attempt(observed, decision.cluster_attempt)
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


def _suspend(
    decision: Decision, observed: Observed, phase: Phase, reason: str, message: str
) -> Decision:
    decision.suspended = (reason, message)
    if phase != Phase.SUSPENDED:
        decision.amount_to(PhaseEvent.SUSPEND, reason, message)
    decision.action = DeleteCluster(reason) if observed.cluster else Nothing()
    return decision


def _start_attempt(observed: Observed, attempt: int) -> Action:
    """Clear the way for `attempt`: a stale cluster goes first, then the new one is created (one
    of this attempt already there was created before the status saying so was written)."""
    if observed.cluster is None:
        return CreateCluster(attempt)
    if observed.cluster.attempt == attempt:
        return Nothing()
    return DeleteCluster(Reason.STALE_ATTEMPT)


def _advance(spec: RLJobSpec, observed: Observed, phase: Phase, decision: Decision) -> Decision:
    """An active job: start, wait out a backoff, resume, or follow the current attempt."""
    cluster = observed.cluster
    if phase == Phase.PENDING or decision.attempt == 0:
        decision.amount_to(
            PhaseEvent.START, Reason.PROVISIONING, "creating the Ray cluster for attempt 1"
        )
        decision.action = _start_attempt(observed, decision.cluster_attempt)
        return decision
    if cluster is not None and cluster.attempt != decision.cluster_attempt:
        decision.action = DeleteCluster(Reason.STALE_ATTEMPT)
        decision.in_backoff = in_backoff(observed.status, phase)
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
    if decision.cluster_attempt != decision.attempt and in_backoff(observed.status, phase):
        return _retry_on_cluster(spec, observed, decision)
    return _follow_attempt(spec, observed, phase, decision)


def _next_attempt(
    spec: RLJobSpec, observed: Observed, phase: Phase, decision: Decision
) -> Decision:
    """The attempt given up has no cluster: wait out the backoff, then create the next one's."""
    if in_backoff(observed.status, phase):
        remaining = backoff_left(spec.restart_policy, observed.status, observed.now)
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


def _retry_on_cluster(spec: RLJobSpec, observed: Observed, decision: Decision) -> Decision:
    """The next attempt waits out its backoff on the cluster its failed driver ran on, stopping
    any earlier driver still running there; then its driver is submitted (`attempts`). A cluster
    that lost its head (or whose spec went stale) meanwhile is rebuilt instead, uncounted: the
    attempt had not started."""
    why = rebuild_reason(observed)
    if why is not None:
        decision.cluster_attempt = decision.attempt
        decision.in_backoff = True
        decision.action = DeleteCluster(Reason.STALE_ATTEMPT)
        return decision
    remaining = backoff_left(spec.restart_policy, observed.status, observed.now)
    if remaining > 0:
        decision.in_backoff = True
        earlier = observed.earlier_drivers
        decision.action = StopDrivers(earlier) if earlier else Requeue(remaining)
        return decision
    decision.amount_to(
        PhaseEvent.NEW_ATTEMPT,
        Reason.RETRYING_ON_SAME_CLUSTER,
        f"retrying on the same Ray cluster (built for attempt {decision.cluster_attempt}): "
        f"submitting attempt {decision.attempt}'s driver, which resumes from the newest "
        "checkpoint",
        same_cluster=True,
    )
    if observed.cluster is not None and observed.cluster.ready:
        _submit(spec, observed, decision)
    return decision


def _submit(spec: RLJobSpec, observed: Observed, decision: Decision) -> None:
    """Submit the attempt's driver, once earlier ones on the cluster have ended (`next_driver`)."""
    decision.action = next_driver(spec, observed, decision.attempt)
    if isinstance(decision.action, SubmitDriver) and observed.earlier_drivers:
        decision.not_stopped = not_stopped_message(observed.earlier_drivers, decision.attempt, spec)


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
        _submit(spec, observed, decision)
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
    why = rebuild_reason(observed)
    where = "on the same Ray cluster" if why is None else f"on a new Ray cluster ({why})"
    decision.amount_to(
        PhaseEvent.RESTART,
        reason,
        f"{message}; restart {decision.restarts} of {policy.max_restarts} in {wait}s, {where}",
        same_cluster=why is None,
    )
    decision.in_backoff = True
    if why is None:
        decision.action = Requeue(wait)
    else:
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
