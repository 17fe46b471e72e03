"""Where a run reports: progress.jsonl (one JSON object per iteration) and the console."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
    format_return,
)


def figures(row: dict[str, Any]) -> str:
    """`iter 12  return 123.4  5,000 steps/s  eval 200.0` of a progress row."""
    text = (
        f"iter {row[ITERATION]}  return {format_return(row[EPISODE_RETURN_MEAN])}"
        f"  {row[SAMPLES_PER_S]:,.0f} steps/s"
    )
    if row.get(EVALUATION_RETURN_MEAN) is not None:
        text += f"  eval {format_return(row[EVALUATION_RETURN_MEAN])}"
    return text


class ProgressLog:
    """Appends one JSON object per iteration; a resumed run continues the same file."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered so readers (the operator, `kuberl status`) only ever see whole rows.
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 (closed by close())

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(_finite(row)) + "\n")

    def close(self) -> None:
        self._file.close()


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """NaN is not JSON: a mean over zero episodes is written as null."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


class ConsoleReport:
    """A live progress bar on a terminal; on a pipe or a pod's log, a line every few seconds."""

    LINE_INTERVAL_S = 5.0

    def __init__(self, title: str, total_timesteps: int | None, console: Console | None = None):
        # soft_wrap: never break a line (paths, log scrapers) to fit a width a pipe does not have
        self.console = console or Console(soft_wrap=True)
        self.live = self.console.is_terminal and sys.stdout.isatty()
        self._last_line = 0.0
        self._progress = None
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,.0f} steps"),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task(title, total=total_timesteps, status="")
            self._progress.start()

    def update(self, row: dict[str, Any]) -> None:
        status = figures(row)
        if self._progress is not None:
            self._progress.update(self._task, completed=row[TIMESTEPS_TOTAL], status=status)
            return
        now = time.monotonic()
        if now - self._last_line >= self.LINE_INTERVAL_S:
            self._last_line = now
            self.console.print(f"{status}  timesteps {row[TIMESTEPS_TOTAL]:,}", highlight=False)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
