"""The live progress of `kuberl train` on a terminal: two lines that fit any width.

One line of columns (job, steps, iteration, return, speed, evaluation, elapsed time and the bar)
is wider than a 100-column terminal, and rich then shrinks the bar to nothing and cuts the time.
So the bar has a line of its own (the job's title, cut with an ellipsis when long, the bar filling
the rest, the steps and the time) and the figures go on a second line, cut at the terminal's edge.
Off a terminal, the driver's own ConsoleReport prints a line every few seconds instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

from kuberl_contract.progress_row import TIMESTEPS_TOTAL
from kuberl_trainer.job.progress import figures

TITLE_WIDTH = 32
"""The most columns the job's title takes on the bar's line."""


class _BarThenFigures(Progress):
    """Each task as its bar's line, then its figures' line."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            yield Text(task.fields["figures"], no_wrap=True, overflow="ellipsis")


class TerminalReport:
    """What the driver reports to (as kuberl_trainer.job.progress.ConsoleReport): the live bar and
    its figures, with messages printed above them."""

    def __init__(self, title: str, total_timesteps: int | None, console: Console | None = None):
        self.console = console or Console()
        title_column = Column(no_wrap=True, overflow="ellipsis", max_width=TITLE_WIDTH)
        self.progress = _BarThenFigures(
            TextColumn("[bold]{task.description}", table_column=title_column),
            BarColumn(bar_width=None),  # whatever the other columns leave
            TextColumn("{task.completed:,.0f} steps"),
            TimeElapsedColumn(),
            console=self.console,
            expand=True,
        )
        self._task = self.progress.add_task(title, total=total_timesteps, figures="starting")

    def start(self) -> TerminalReport:
        self.progress.start()
        return self

    def update(self, row: dict[str, Any]) -> None:
        self.progress.update(self._task, completed=row[TIMESTEPS_TOTAL], figures=figures(row))

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def close(self) -> None:
        self.progress.stop()
