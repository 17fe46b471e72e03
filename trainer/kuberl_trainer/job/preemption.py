"""SIGTERM and SIGINT while a job trains: a preempted pod (or Ctrl-C) gets a checkpoint within
spec.trainer.checkpoint.gracePeriodSeconds, then the run stops. The first signal asks the
iteration in progress to stop at its next safe point (see interrupt.py); a second one stops at
once, unless a checkpoint is being written within the grace period, which then finishes first so
that none is left half-written."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kuberl_trainer.job.progress import ConsoleReport
from kuberl_trainer.rollouts.interrupt import StopRequest

log = logging.getLogger(__name__)


class Preemption:
    """The stop signals a driver takes while it runs, and what they ask of it."""

    def __init__(self, grace_period_s: int, stop_request: StopRequest, report: ConsoleReport):
        self.grace_period_s = grace_period_s
        self.stop_request = stop_request  # what the signal asks of the iteration in progress
        self.report = report
        self.signum: int | None = None  # the first signal's
        self._since = 0.0  # time.monotonic() when the first signal came
        self._saving = False  # a checkpoint is being written: a second signal lets it finish

    @property
    def signalled(self) -> bool:
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        """The first signal's name (`SIGTERM`), once one came."""
        return signal.Signals(self.signum).name

    def install(self) -> dict[int, Any]:
        """Handle SIGTERM and SIGINT here; returns the handlers they had. Only the main thread
        may set handlers: elsewhere nothing is installed."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    @staticmethod
    def restore(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame) -> None:
        """SIGTERM or SIGINT: checkpoint within the grace period and stop. The iteration in
        progress stops at its next safe point (see interrupt.py), raising IterationAbandoned from
        here when the driver is sampling in Python. A second signal stops at once, without a
        checkpoint, unless one is being written and the grace period has not run out: then that
        checkpoint is finished first, so none is left half-written."""
        name = signal.Signals(signum).name
        grace = self.grace_period_s
        if self.signum is None:
            self.signum, self._since = signum, time.monotonic()
            self.report.message(
                f"{name} received: checkpointing within {grace} s (an unfinished iteration is "
                "dropped at its next wait for samples)"
            )
            self.stop_request.request()
            return
        if self._saving and time.monotonic() - self._since < grace:
            self.report.message(f"{name} received again: finishing the checkpoint being written")
            return
        raise KeyboardInterrupt

    @contextmanager
    def saving(self) -> Iterator[None]:
        """A checkpoint being written, which a second signal within the grace period lets
        finish."""
        self._saving = True
        try:
            yield
        finally:
            self._saving = False

    def report_checkpoint(self, saved: int | None, iteration: int) -> None:
        """How long the checkpoint after the signal took, against the grace period: `saved` is
        the iteration the newest checkpoint holds, `iteration` the last one trained."""
        name = self.signal_name
        took = time.monotonic() - self._since
        grace = self.grace_period_s
        if saved == iteration:
            self.report.message(
                f"Checkpoint of iteration {saved} complete {took:.1f} s after {name} "
                f"(grace period {grace} s)"
            )
        if took > grace:
            log.warning(
                "stopping took %.1f s after %s, longer than "
                "spec.trainer.checkpoint.gracePeriodSeconds=%d: a preempted pod would have been "
                "killed first; raise it so that a learning step and a checkpoint fit in it",
                took,
                name,
                grace,
            )
