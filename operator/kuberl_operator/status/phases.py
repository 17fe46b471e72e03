"""The phase machine: the `PhaseEvent`s an observation can amount to, the table `TRANSITIONS`, the
one transition function `next_phase(current, event)`, and what an event implies besides the phase:
the attempt (`attempt_after`) and a start anew (`resumes`).

A phase changes only through this table, so the life of a job reads (and is tested) as a list of
pairs rather than as branches spread over the decision. Both backends go through it: the
operator's `decide` and the API's local backend (`local_decide`) only say which events happened."""

from __future__ import annotations

from enum import StrEnum

from kuberl_operator.spec import Phase


class PhaseEvent(StrEnum):
    """What an observation amounts to, as far as the phase is concerned."""

    START = "Start"  # the first attempt's cluster is requested
    DRIVER_RUNNING = "DriverRunning"
    HEAD_PREEMPTED = "HeadPreempted"  # the attempt is given up, to be resumed
    NEW_ATTEMPT = "NewAttempt"  # the next attempt starts: on a new cluster, or the same one
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


def applies(current: Phase | None, event: PhaseEvent | None) -> bool:
    """Whether `event` is a transition (a listed pair) for a job in phase `current`."""
    return event is not None and (current or Phase.PENDING, event) in TRANSITIONS


def next_phase(current: Phase | None, event: PhaseEvent | None) -> Phase:
    """The one transition function: where `event` takes a job in phase `current` (None: new)."""
    current = current or Phase.PENDING
    if event is None:
        return current
    return TRANSITIONS.get((current, event), current)


NEXT_ATTEMPT_EVENTS = frozenset(
    {PhaseEvent.RESTART, PhaseEvent.HEAD_PREEMPTED, PhaseEvent.UNSUSPEND}
)
"""The events after which the job runs a new attempt: its current one is given up (a restart, a
preempted head), or it ended with the suspension (an unsuspended job's next cluster, or trainer,
belongs to the next attempt)."""


def attempt_after(attempt: int, event: PhaseEvent | None) -> int:
    """The attempt a job is on once `event` happened to it on attempt `attempt`: the first once it
    starts (or later, when the attempt went unrecorded: a status write was lost), the next after a
    NEXT_ATTEMPT_EVENTS event, else the same (why it moves at once: `decide`)."""
    if event == PhaseEvent.START:
        return max(attempt, 1)
    return attempt + 1 if event in NEXT_ATTEMPT_EVENTS else attempt


def resumes(current: Phase | None, event: PhaseEvent | None) -> bool:
    """Whether `event` resumes a suspended job: its startTime begins anew, as a Kubernetes Job's
    does, so activeDeadlineSeconds does not count the time it spent suspended."""
    return event == PhaseEvent.UNSUSPEND and applies(current, event)
