"""Learning curves: the mean episode return (and the greedy evaluation's, dashed) against env steps,
for one run or several overlaid. `kuberl plot` draws them from run directories, the API from a
job's progress history.

matplotlib loads only when a figure is drawn (importing this module does not load it), and draws
without pyplot on Agg's canvas: no display, no global figure state. matplotlib is not thread-safe,
so drawing is serialized (the API draws in worker threads).
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    PROGRESS_FILE,
    TIMESTEPS_TOTAL,
    ProgressFileError,
    read_rows,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PlotFormat = Literal["png", "svg"]
"""The formats a figure is rendered in (also the output file's extension)."""

MEDIA_TYPES: dict[PlotFormat, str] = {"png": "image/png", "svg": "image/svg+xml"}

FIGURE_INCHES = (8.0, 4.5)
DPI = 100
"""A PNG is FIGURE_INCHES x DPI pixels: 800 x 450."""

X_LABEL = "env steps (timesteps_total)"
Y_LABEL = "mean return (reward/episode)"
EVALUATION_SUFFIX = " (evaluation)"

FONT_POINTS = {"font.size": 15, "axes.titlesize": 17, "axes.labelsize": 15, "legend.fontsize": 13}
"""Text sizes: the status page shows the PNG at half its pixels (400 x 225 CSS pixels), where
matplotlib's default 10 points would be 7 pixels tall."""
LINE_WIDTH = 2.0

_COMPACT_SUFFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))

_draw_lock = threading.Lock()


class MissingRun(Exception):
    """A run directory, or its progress file, does not exist."""


class InvalidRun(Exception):
    """A progress file that holds no curve: empty, or not progress rows."""


@dataclass(frozen=True)
class Curve:
    """One run's learning curve; None where no return exists yet (no episode finished, or no
    evaluation run)."""

    name: str
    timesteps: list[int] = field(default_factory=list)
    returns: list[float | None] = field(default_factory=list)
    evaluation_returns: list[float | None] = field(default_factory=list)

    @classmethod
    def from_rows(cls, name: str, rows: Iterable[dict[str, Any]]) -> Curve:
        """The curve of progress rows as the trainer writes them."""
        rows = list(rows)
        return cls(
            name,
            [int(row[TIMESTEPS_TOTAL]) for row in rows],
            [row.get(EPISODE_RETURN_MEAN) for row in rows],
            [row.get(EVALUATION_RETURN_MEAN) for row in rows],
        )

    @property
    def has_evaluation(self) -> bool:
        return any(value is not None for value in self.evaluation_returns)


def read_run(run_dir: Path, name: str | None = None) -> Curve:
    """The curve of a run directory's progress file, named after the directory by default.
    Raises MissingRun or InvalidRun with a message naming the path."""
    path = run_dir / PROGRESS_FILE
    if not run_dir.is_dir():
        raise MissingRun(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise MissingRun(f"{run_dir}: no {PROGRESS_FILE} (not a run directory, or not started)")
    try:
        rows = read_rows(path)
    except ProgressFileError as exc:
        raise InvalidRun(str(exc)) from None
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get(TIMESTEPS_TOTAL), int):
            raise InvalidRun(f"{path}:{number}: not a progress row (no integer {TIMESTEPS_TOTAL})")
    if not rows:
        raise InvalidRun(f"{path}: no progress rows yet")
    return Curve.from_rows(name or run_dir.resolve().name, rows)


def learning_curves(curves: Sequence[Curve], title: str | None = None) -> Figure:
    """The figure: one colour per run, training return solid, evaluation return dashed; a figure
    without any point says so in its middle."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    # The sizes apply where the figure's text is made, which is here, not when it is saved.
    with matplotlib.rc_context(FONT_POINTS):
        figure = Figure(figsize=FIGURE_INCHES, dpi=DPI, layout="tight")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.set_xlabel(X_LABEL)
        axes.set_ylabel(Y_LABEL)
        if title:
            axes.set_title(title)
        axes.grid(True, alpha=0.3)
        ticks = FuncFormatter(lambda value, _: compact_number(value))
        axes.xaxis.set_major_formatter(ticks)
        axes.yaxis.set_major_formatter(ticks)
        _draw_curves(axes, curves)
    return figure


def _draw_curves(axes: Any, curves: Sequence[Curve]) -> None:
    for index, curve in enumerate(curves):
        colour, width = f"C{index % 10}", LINE_WIDTH
        returns = _values(curve.returns)
        axes.plot(curve.timesteps, returns, color=colour, linewidth=width, label=curve.name)
        if curve.has_evaluation:
            # A row holds the latest evaluation until the next one: a step, not a slope.
            axes.plot(
                curve.timesteps,
                _values(curve.evaluation_returns),
                color=colour,
                linewidth=width,
                linestyle="--",
                drawstyle="steps-post",
                label=curve.name + EVALUATION_SUFFIX,
            )
    if any(curve.timesteps for curve in curves):
        axes.legend(loc="best")
    else:
        axes.text(0.5, 0.5, "no progress yet", ha="center", va="center", transform=axes.transAxes)


def compact_number(value: float) -> str:
    """A tick label of at most a few characters: 15000 as 15k, 2500000 as 2.5M, 0.5 as 0.5,
    -21 as -21."""
    for scale, suffix in _COMPACT_SUFFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def render(figure: Figure, format: PlotFormat) -> bytes:
    """The figure as PNG or SVG bytes (SVG keeps its text as text, so it can be searched)."""
    if format not in MEDIA_TYPES:
        raise ValueError(f"unknown format {format!r}: use {' or '.join(MEDIA_TYPES)}")
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kuberl"}):
        figure.savefig(buffer, format=format, metadata=_metadata(format))
    return buffer.getvalue()


def draw(curves: Sequence[Curve], format: PlotFormat, title: str | None = None) -> bytes:
    """`learning_curves` rendered, one drawing at a time in this process."""
    with _draw_lock:
        return render(learning_curves(curves, title), format)


def _values(values: list[float | None]) -> list[float]:
    """None (and non-finite values) as NaN: a gap in the line, not a zero."""
    return [math.nan if value is None or not math.isfinite(value) else value for value in values]


def _metadata(format: str) -> dict[str, Any]:
    # No creation date: the same curves give the same bytes.
    return {"Date": None} if format == "svg" else {}
