"""The decision for the API's local backend, beside the operator's `decide`: which `PhaseEvent`s
what befalls a local job amounts to. There a job is a trainer process on the API's machine:
queued for a trainer slot (Pending, or Resuming after a suspension), Running, Suspended, Succeeded
or Failed. Each change is a `Change`, taken through the one phase machine by `lifecycle.enter`,
which works out what it implies; the backend only applies it. What only a cluster has
(Provisioning, Preempted, restarts after failures) never happens here.

A job suspended while its trainer runs stays Running until the trainer has checkpointed and exited
on the SIGTERM the backend sends it; the exit then decides (`trainer_ended`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from kuberl_contract.final_record import EXIT_INVALID_JOB, EXIT_SIGNAL_BASE, FinalRecord
from kuberl_operator.spec import Phase, Reason, RLJobStatus
from kuberl_operator.status.lifecycle import Entered
from kuberl_operator.status.phases import PhaseEvent, attempt_after

WAITING = (Phase.PENDING, Phase.RESUMING)
"""The phases of the queue for a trainer slot, served in submission order."""
QUEUED = Entered(Reason.QUEUED, "waiting for a free trainer slot")
RESUMED = Entered(Reason.RESUMING, "unsuspended: resuming from the newest checkpoint")

EXIT_SIGTERM, EXIT_SIGINT = EXIT_SIGNAL_BASE + signal.SIGTERM, EXIT_SIGNAL_BASE + signal.SIGINT


@dataclass(frozen=True)
class Change:
    """What befell a local job: the events it amounts to, in order, and why, in words."""

    events: tuple[PhaseEvent, ...]
    entered: Entered


@dataclass(frozen=True)
class EndedTrainer:
    """A job's trainer process that has ended, as the local backend found it."""

    exit_code: int | None
    """Its exit status; None when it left none (killed, or lost while the API was down)."""
    pid: int | None
    stopping: bool = False
    """The backend sent it SIGTERM on purpose, to suspend the job."""
    lost_while_down: bool = False
    """It ended while the API was not running."""
    final: FinalRecord | None = None
    """The final record that ends its log; None when it printed none."""
    last_output: str | None = None
    """Its log's last line for people, which says why where no final record does."""


def submitted(suspend: bool) -> Change:
    """A new job: queued for a trainer slot, or Suspended when submitted with spec.suspend."""
    if suspend:
        return Change((PhaseEvent.SUSPEND,), Entered(Reason.SUSPENDED, "submitted suspended"))
    return Change((), QUEUED)


def suspension_changed(phase: Phase, suspend: bool) -> Change | None:
    """spec.suspend set to `suspend` on a job in `phase`: a job waiting for a slot is Suspended at
    once, a Suspended one is queued again (Resuming). None for every other phase: a Running job
    is Suspended once its trainer has exited (`trainer_ended`), a finished one stays finished."""
    if suspend and phase in WAITING:
        why = Entered(Reason.SUSPENDED, "suspended while waiting for a trainer slot")
        return Change((PhaseEvent.SUSPEND,), why)
    if not suspend and phase == Phase.SUSPENDED:
        return Change((PhaseEvent.UNSUSPEND,), RESUMED)
    return None


def trainer_started(previous: RLJobStatus) -> Change:
    """A trainer leaves the queue for a free slot. It needs no cluster to come up, so it starts
    (the first attempt, from Pending) and runs at once."""
    attempt = attempt_after(previous.attempt, PhaseEvent.START)
    training = Entered(Reason.DRIVER_RUNNING, f"the driver of attempt {attempt} is training")
    return Change((PhaseEvent.START, PhaseEvent.DRIVER_RUNNING), training)


def trainer_ended(trainer: EndedTrainer, suspend: bool) -> Change:
    """What a trainer's exit amounts to, `suspend` being the job's spec.suspend now: in the words
    of its final record when it printed one, and in the operator's words where a cluster's driver
    would end alike."""
    code, final = trainer.exit_code, trainer.final
    said = final.message if final is not None and final.message else ""
    if code == 0:
        finished = Entered(Reason.DRIVER_SUCCEEDED, said or "training finished")
        return Change((PhaseEvent.SUCCEEDED,), finished)
    if trainer.stopping and code in (EXIT_SIGTERM, EXIT_SIGINT):
        if suspend:
            suspended = Entered(Reason.SUSPENDED, "suspended after a checkpoint")
            return Change((PhaseEvent.SUSPEND,), suspended)
        # Unsuspended before it stopped: suspended and resumed at once, queued for its next trainer.
        resumed = Entered(Reason.RESUMING, "resumed while it was stopping")
        return Change((PhaseEvent.SUSPEND, PhaseEvent.UNSUSPEND), resumed)
    if code is None:
        when = "while the API was down" if trainer.lost_while_down else "without an exit status"
        message = f"the trainer process (pid {trainer.pid}) ended {when}"
        return _failed(trainer, Reason.TRAINER_LOST, message)
    if code == EXIT_INVALID_JOB:
        message = f"the driver found the job invalid: {said or 'no message'}"
        return _failed(trainer, Reason.INVALID_SPEC, message)
    message = f"the trainer exited with status {code}" + (f": {said}" if said else "")
    return _failed(trainer, Reason.DRIVER_FAILED, message)


def _failed(trainer: EndedTrainer, reason: str, message: str) -> Change:
    """Failed; without a final record, the trainer's last line says what happened."""
    if trainer.final is None and trainer.last_output:
        message = f"{message}; last output: {trainer.last_output}"
    return Change((PhaseEvent.FAIL,), Entered(reason, message))
