"""A stop asked for by a signal, and the safe points where an iteration in progress gives way to it.

A preempted driver has a grace period to checkpoint (spec.trainer.checkpoint.gracePeriodSeconds),
and an iteration can be longer than that (slow envs, large batches). So the driver does not wait
for the iteration to end: the WorkerSet checks the request wherever an iteration waits for its
workers, and the iteration is abandoned there, its samples thrown away. Nothing the checkpoint
holds has changed by then (the policy learns only after sampling), so the driver saves the state of
the last completed iteration. A learning step in progress is never cut: a half-updated policy
cannot be saved.

Two kinds of safe point:
- a wait on Ray (`ray.wait` in slices of `WAIT_SLICE_S`): the loop calls `check()` between slices;
  the signal handler itself only records the request, because Ray turns an exception raised by a
  handler inside its calls into an error of its own;
- the local worker sampling in Python (`abandonable()`): the signal handler raises right there,
  interrupting even a single slow env step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

WAIT_SLICE_S = 0.5
"""The longest a wait on Ray goes without returning to Python to look for a stop request."""


class IterationAbandoned(BaseException):
    """The iteration in progress was given up at a safe point because the driver must checkpoint
    and stop. A BaseException, like KeyboardInterrupt, so that no `except Exception` between the
    safe point and the driver (an env's, a library's) swallows it."""


class StopRequest:
    """Set once by the driver's signal handler (on the main thread); read at the safe points of
    the iteration in progress, which all run on the main thread too."""

    def __init__(self) -> None:
        self.requested = False
        self._abandonable = 0  # depth of abandonable() blocks the main thread is in

    def request(self) -> None:
        """Ask the iteration in progress to stop. Called from a signal handler: raises
        IterationAbandoned at once when the main thread is in an `abandonable()` block."""
        self.requested = True
        if self._abandonable:
            raise IterationAbandoned

    def check(self) -> None:
        """A safe point: raise IterationAbandoned if a stop was requested."""
        if self.requested:
            raise IterationAbandoned

    @contextmanager
    def abandonable(self) -> Iterator[None]:
        """A block of plain Python code (no Ray calls) that may be cut short anywhere by a stop
        request without harm to what a checkpoint holds: sampling, not learning."""
        self.check()
        self._abandonable += 1
        try:
            yield
        finally:
            self._abandonable -= 1
