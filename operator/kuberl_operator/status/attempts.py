"""Attempts: when the next one starts (the restart backoff), where it runs (the same Ray cluster,
or a new one), and that it never overlaps the one before. Pure, like the rest of `status`;
`decide` applies these rules.

Attempts. Each attempt (1, 2, ...) submits its driver once, as a Ray job of its own
(`builders.submission_id(job, attempt)`), with the attempt in its environment (KUBERL_ATTEMPT), so
the trainer fences its checkpoints by it. The attempt number is bumped the moment an attempt is
given up (head lost, driver failed, job unsuspended: the events `phases.attempt_after` counts, for
both backends), so its failure cannot be counted twice, and it is kept in `status.attempt`, so it
survives an operator restart. The submission records the head pod's UID (`status.headPodUID`): a
head pod of another UID in the same attempt is one KubeRay recreated, and the driver went with the
old one, so the attempt is given up (counted) rather than submitted again.

Where. A driver that failed (a non-zero exit other than EXIT_INVALID_JOB, OOM-killed, stopped)
leaves its Ray cluster as it was: the next attempt submits its driver to the same cluster, which
saves the image pulls and node start-ups of a new one. Only what the cluster itself lost rebuilds it
(`rebuild_reason`): its head pod lost or replaced, the RayCluster gone, or a spec edit the running
cluster does not carry (`Observed.stale_spec`: its pods and the manifest its head mounts were built
from the old spec). Preemptions of the head and resumptions rebuild it too. `status.clusterAttempt`
names the attempt the cluster was built for (its `kuberl.io/attempt` label); a cluster of any other
attempt is stale, and deleted.

Never overlapping. Attempt N's driver is submitted to a cluster only once the earlier attempts'
drivers there have ended (`Observed.earlier_drivers`): they are stopped (`StopDrivers`, the Jobs
API's stop: SIGTERM, then SIGKILL) and waited for across polls, at most `driver_stop_seconds` from
the start of the attempt. Past that bound attempt N is submitted anyway: the trainer refuses any
checkpoint write from an attempt older than the newest, so a driver that will not die cannot
clobber its successor's checkpoints; a Warning Event says so.

Restart backoff. A failed attempt turns Progressing False (reason RestartBackoff); the next attempt
starts once `backoff_seconds(...)` have passed since that condition's lastTransitionTime, which is
the moment of the failure, stored in the status itself."""

from __future__ import annotations

from datetime import datetime

from kuberl_operator.builders.driver import RAY_STOP_MARGIN_SECONDS
from kuberl_operator.constants import MAX_BACKOFF_SECONDS
from kuberl_operator.spec import ConditionType, Phase, Reason, RestartPolicy, RLJobSpec, RLJobStatus
from kuberl_operator.status.actions import Action, StopDrivers, SubmitDriver
from kuberl_operator.status.observed import HeadFate, Observed, condition_of


def backoff_seconds(policy: RestartPolicy, restarts: int) -> int:
    """The wait before restart number `restarts` (1, 2, ...): backoffSeconds doubled per earlier
    restart, capped at MAX_BACKOFF_SECONDS, or at backoffSeconds itself when that is longer."""
    base = policy.backoff_seconds
    cap = max(base, MAX_BACKOFF_SECONDS)
    doublings = min(max(restarts - 1, 0), 32)  # 2**32 * 1 s is past any cap already
    return min(base * 2**doublings, cap)


def in_backoff(status: RLJobStatus, phase: Phase) -> bool:
    """The job waits out a restart backoff: Resuming, with Progressing False for it."""
    progressing = condition_of(status, ConditionType.PROGRESSING)
    return (
        phase == Phase.RESUMING
        and progressing is not None
        and progressing.reason == Reason.RESTART_BACKOFF
    )


def backoff_left(policy: RestartPolicy, status: RLJobStatus, now: datetime) -> float:
    """Seconds of the restart backoff still to wait (0 or less once over), counted from the
    failure: the lastTransitionTime of Progressing, which turned False with it."""
    progressing = condition_of(status, ConditionType.PROGRESSING)
    if progressing is None:
        return 0.0
    waited = (now - progressing.last_transition_time).total_seconds()
    return backoff_seconds(policy, status.restarts) - waited


def rebuild_reason(observed: Observed) -> str | None:
    """Why the next attempt needs a new Ray cluster, in words; None when it can run on the current
    one (its head runs, is the pod the last driver was submitted to, and the spec it was built from
    is the job's)."""
    cluster, head = observed.cluster, observed.head
    if cluster is None:
        return "the RayCluster is gone"
    if head is not None and head.fate != HeadFate.RUNNING:
        return f"its head pod was {'preempted' if head.fate == HeadFate.PREEMPTED else 'lost'}"
    submitted_to = observed.status.head_pod_uid
    if head is not None and head.uid and submitted_to and head.uid != submitted_to:
        return "its head pod was replaced"
    if observed.stale_spec:
        fields = ", ".join(f"spec.{name}" for name in observed.stale_spec)
        return f"{fields} changed since it was built"
    return None


def driver_stop_seconds(spec: RLJobSpec) -> int:
    """How long the next attempt waits for an earlier driver it stopped: the driver's checkpoint
    grace (trainer.checkpoint.gracePeriodSeconds) and the margin Ray needs to stop, as the head
    pod's preStop hook gives a driver."""
    return spec.trainer.checkpoint.grace_period_seconds + RAY_STOP_MARGIN_SECONDS


def next_driver(spec: RLJobSpec, observed: Observed, attempt: int) -> Action:
    """Submit `attempt`'s driver to the ready cluster, unless earlier attempts' drivers still run
    there: those are stopped first, and waited for up to `driver_stop_seconds` since the attempt
    started (Progressing's last transition)."""
    if not observed.earlier_drivers:
        return SubmitDriver(attempt)
    progressing = condition_of(observed.status, ConditionType.PROGRESSING)
    started = progressing.last_transition_time if progressing else None
    waited = (observed.now - started).total_seconds() if started else float("inf")
    if waited < driver_stop_seconds(spec):
        return StopDrivers(observed.earlier_drivers)
    return SubmitDriver(attempt)


def attempts_named(attempts: tuple[int, ...]) -> str:
    """`attempts` in words: "attempt 1", "attempts 1, 2"."""
    return ("attempt " if len(attempts) == 1 else "attempts ") + ", ".join(map(str, attempts))


def stopping_message(attempts: tuple[int, ...], attempt: int) -> str:
    """Progressing's message while earlier drivers are stopped before `attempt`'s submission."""
    return (
        f"the driver of {attempts_named(attempts)} still runs on the Ray cluster: it is stopped, "
        f"and attempt {attempt}'s driver is submitted once it has ended"
    )


def not_stopped_message(attempts: tuple[int, ...], attempt: int, spec: RLJobSpec) -> str:
    """The Warning Event's message when `attempt` is submitted beside drivers that would not end."""
    return (
        f"the driver of {attempts_named(attempts)} did not end within "
        f"{driver_stop_seconds(spec)}s of being stopped; attempt {attempt}'s driver is submitted "
        "anyway: checkpoints are fenced by attempt, so the older driver's writes are refused"
    )
