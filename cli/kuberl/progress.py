"""The progress of `kuberl.train` where a notebook or a terminal shows it: one line, redrawn in
place with a carriage return, which a notebook's output cell and a terminal both honour (rich's
live bar needs a terminal; the driver's own report prints a new line every few seconds). The bar
fills towards the stop condition expected to end the run, and the figures are the driver's own
progress line (kuberl_trainer.job.progress_line).

    cartpole [#####---------------]  iter 6  21,504 / 50,000 steps  return 88.2  ETA 0:00:12 (…)
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, TextIO

from kuberl_trainer.job.progress_line import RunStart, binding_stop, progress_line

if TYPE_CHECKING:
    from kuberl_contract.config import StopConditions
    from kuberl_operator.spec import RLJob

BAR_WIDTH = 20
"""Characters of the bar between its brackets."""


class LineProgress:
    """What the driver reports to (as kuberl_trainer.job.progress.ConsoleReport): the line, and
    its messages on lines of their own above it."""

    def __init__(self, title: str, stop: StopConditions, stream: TextIO):
        self.title = title
        self.stop = stop
        self.stream = stream
        self.start: RunStart | None = None  # this run's totals before its first iteration
        self.drawn = ""  # the line on show, cleared before a message

    @classmethod
    def for_job(cls, job: RLJob, stream: TextIO) -> LineProgress:
        return cls(job.name, job.spec.trainer.stop, stream)

    def update(self, row: dict[str, Any]) -> None:
        self.start = self.start or RunStart.before(row)
        fraction = binding_stop(self.stop, row, self.start).fraction
        head = self.title if fraction is None else f"{self.title} {bar(fraction)}"
        width = shutil.get_terminal_size().columns - 1 if self.stream.isatty() else None
        # On a terminal a longer line would wrap, and \r redraw only its last row.
        figures = progress_line(
            row, self.stop, self.start, None if width is None else width - len(head) - 2
        )
        self._draw(f"{head}  {figures}")

    def message(self, text: str) -> None:
        drawn = self.drawn
        self._clear()
        self.stream.write(f"{text}\n")
        self._draw(drawn)

    def close(self) -> None:
        """End the line (the driver closes its report, and so may its caller: once is enough)."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = ""

    def _draw(self, line: str) -> None:
        if not line:
            return
        padding = " " * max(0, len(self.drawn) - len(line))  # what a longer line before left
        self.stream.write(f"\r{line}{padding}")
        self.stream.flush()
        self.drawn = line

    def _clear(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * len(self.drawn) + "\r")
            self.drawn = ""


def bar(fraction: float) -> str:
    """`[#####---------------]`: `fraction` (0 to 1, more counts as 1) of the bar filled."""
    filled = round(BAR_WIDTH * min(max(fraction, 0.0), 1.0))
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}]"


class Silent:
    """What the driver reports to when nothing is to be shown."""

    def update(self, row: dict[str, Any]) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
