"""The phase machine: the `PhaseEvent`s an observation can amount to, the table `TRANSITIONS` and
the one transition function `next_phase(current, event)`.

A phase changes only through this table, so the life of a job reads (and is tested) as a list of
pairs rather than as branches spread over the decision."""

from __future__ import annotations

from enum import StrEnum

from kuberl_operator.spec import Phase


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


def applies(current: Phase | None, event: PhaseEvent | None) -> bool:
    """Whether `event` is a transition (a listed pair) for a job in phase `current`."""
    return event is not None and (current or Phase.PENDING, event) in TRANSITIONS


def next_phase(current: Phase | None, event: PhaseEvent | None) -> Phase:
    """The one transition function: where `event` takes a job in phase `current` (None: new)."""
    current = current or Phase.PENDING
    if event is None:
        return current
    return TRANSITIONS.get((current, event), current)
