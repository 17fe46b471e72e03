"""The live progress of `kuberl train` on a terminal: a bar line and a figures line that fit any
width without cutting the job's name.

The bar line is the job's title (name, algorithm and env, whole: a name cut with an ellipsis says
nothing of which run this is), the bar towards the stop that binds, and the time elapsed; where the
terminal is too narrow for a useful bar the bar goes, and a title longer than the terminal folds
onto the next line rather than being cut. The figures line (kuberl_trainer.job.progress_line) drops
its least important columns until it fits. Off a terminal, the driver's own ConsoleReport prints a
line every few seconds instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import Progress
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from kuberl_contract.config import StopConditions
from kuberl_trainer.job.progress_line import RunStart, binding_stop, duration, progress_line

MIN_BAR_WIDTH = 10
"""The narrowest bar worth drawing; narrower, the bar line is the title and the time alone."""


def bar_line(title: str, fraction: float | None, elapsed_s: float, width: int) -> RenderableType:
    """The title, the bar (`fraction` done; None pulses) filling what the title and the time
    leave of `width`, and the time; without the bar where it would be narrower than
    MIN_BAR_WIDTH."""
    elapsed = duration(elapsed_s)
    bar_width = width - len(title) - len(elapsed) - 2  # a space each side of the bar
    if bar_width < MIN_BAR_WIDTH:
        return Text(f"{title} {elapsed}", style="bold", overflow="fold")
    grid = Table.grid(padding=(0, 1))
    bar = ProgressBar(total=None if fraction is None else 1.0, width=bar_width)
    bar.completed = min(fraction or 0.0, 1.0)
    grid.add_row(Text(title, style="bold"), bar, Text(elapsed))
    return grid


class _BarThenFigures(Progress):
    """Each task as its bar's line, then its figures' line, fitted to the console's width."""

    def get_renderables(self) -> Iterable[RenderableType]:
        if not self.tasks:  # Progress renders once while it is built, before its console is set
            return
        width = self.console.width
        for task in self.tasks:
            elapsed = task.elapsed or 0.0
            yield bar_line(task.description, task.fields["fraction"], elapsed, width)
            yield Text(task.fields["figures"](width), no_wrap=True, overflow="crop")


class TerminalReport:
    """What the driver reports to (as kuberl_trainer.job.progress.ConsoleReport): the live bar and
    its figures, with messages printed above them."""

    def __init__(self, title: str, stop: StopConditions | None, console: Console | None = None):
        self.console = console or Console()
        self.stop = stop
        self._start: RunStart | None = None
        self.progress = _BarThenFigures(console=self.console)
        self._task = self.progress.add_task(title, fraction=None, figures=lambda width: "starting")

    def start(self) -> TerminalReport:
        self.progress.start()
        return self

    def update(self, row: dict[str, Any]) -> None:
        start = self._start = self._start or RunStart.before(row)
        fraction = None if self.stop is None else binding_stop(self.stop, row, start).fraction
        self.progress.update(
            self._task,
            fraction=fraction,
            figures=lambda width: progress_line(row, self.stop, start, width),
        )

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def close(self) -> None:
        self.progress.stop()
