"""Where a run reports: progress.jsonl (one JSON object per iteration) and the console."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kuberl_contract.config import StopConditions
from kuberl_trainer.job.progress_line import RunStart, progress_line


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
    """Where the driver reports off a terminal (a pipe, a pod's log): a progress line every few
    seconds (progress_line.py), and messages as they come. On a terminal, `kuberl train` gives the
    driver its live bar instead (kuberl_cli.terminal_report)."""

    LINE_INTERVAL_S = 5.0

    def __init__(
        self, title: str, stop: StopConditions | None = None, console: Console | None = None
    ):
        """`title` names the run; `stop`, its stop conditions, which the line measures it
        against."""
        # soft_wrap: never break a line (paths, log scrapers) to fit a width a pipe does not have
        self.console = console or Console(soft_wrap=True)
        self.title = title
        self.stop = stop
        self._start: RunStart | None = None
        self._last_line = 0.0

    def update(self, row: dict[str, Any]) -> None:
        self._start = self._start or RunStart.before(row)
        now = time.monotonic()
        if now - self._last_line >= self.LINE_INTERVAL_S:
            self._last_line = now
            self.console.print(progress_line(row, self.stop, self._start), highlight=False)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def close(self) -> None:
        """Nothing to stop: the lines are printed as they come."""
