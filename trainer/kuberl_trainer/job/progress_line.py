"""The figures of a run's progress line, for people: where training stands against its stop
conditions, how fast this run goes and when it will end.

`iter 12 / 100  15,172 / 50,000 steps  return 123.4 / 475  2,345 steps/s  ETA 0:00:15 (timesteps)`

The rate is over this run, from its first iteration's start (a resumed run counts from its resume),
as Stable-Baselines3 prints fps: one iteration's rate swings with every evaluation and checkpoint.
The stop that binds is the budget (timesteps, iterations, wall time) expected to end the run first
at that rate; a return target cannot be foreseen, so it binds only where no budget is set. On a
terminal the columns that matter least are dropped until the line fits (`fit`): the steps never.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kuberl_contract.config import StopConditions
from kuberl_contract.progress_row import (
    BASELINE_WIN_RATES,
    EPISODE_RETURN_MEAN,
    EVALUATION_CONFIRMED,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTEPS_THIS_ITER,
    TIMESTEPS_TOTAL,
    WIN_RATE,
    format_return,
)

SEPARATOR = "  "


@dataclass(frozen=True)
class RunStart:
    """Where this run started: the totals before its first iteration."""

    timesteps: int
    seconds: float
    iteration: int

    @classmethod
    def before(cls, row: dict[str, Any]) -> RunStart:
        """The start of the run whose first progress row is `row`."""
        return cls(
            row[TIMESTEPS_TOTAL] - row.get(TIMESTEPS_THIS_ITER, 0),
            row[TIME_TOTAL_S] - row.get(TIME_THIS_ITER_S, 0.0),
            row[ITERATION] - 1,
        )

    def steps_per_s(self, row: dict[str, Any]) -> float | None:
        """Env steps per second since the run started; None before any time has passed."""
        seconds = row[TIME_TOTAL_S] - self.seconds
        return (row[TIMESTEPS_TOTAL] - self.timesteps) / seconds if seconds > 0 else None

    def seconds_per_iteration(self, row: dict[str, Any]) -> float | None:
        """Mean seconds an iteration of this run took; None before the first."""
        iterations = row[ITERATION] - self.iteration
        return (row[TIME_TOTAL_S] - self.seconds) / iterations if iterations > 0 else None


@dataclass(frozen=True)
class Binding:
    """The stop condition expected to end the run: its name for people, how far along the run is
    towards it (0 to 1; None for a return target) and the seconds left (None when unknown)."""

    name: str
    fraction: float | None
    eta_s: float | None


def binding_stop(stop: StopConditions, row: dict[str, Any], start: RunStart) -> Binding:
    """The budget stop that the run reaches first at this run's pace, or its return target when
    it has no budget."""
    rate, per_iteration = start.steps_per_s(row), start.seconds_per_iteration(row)
    budgets = []
    if stop.timesteps is not None:
        left = max(stop.timesteps - row[TIMESTEPS_TOTAL], 0)
        eta = left / rate if rate else None
        budgets.append(Binding("timesteps", row[TIMESTEPS_TOTAL] / stop.timesteps, eta))
    if stop.iterations is not None:
        left = max(stop.iterations - row[ITERATION], 0)
        eta = None if per_iteration is None else left * per_iteration
        budgets.append(Binding("iterations", row[ITERATION] / stop.iterations, eta))
    if stop.wall_time_seconds is not None:
        spent = row[TIME_TOTAL_S]
        eta = max(stop.wall_time_seconds - spent, 0.0)
        budgets.append(Binding("wall time", spent / stop.wall_time_seconds, eta))
    if budgets:  # an unknown ETA (no time has passed yet) sorts last
        return min(budgets, key=lambda b: math.inf if b.eta_s is None else b.eta_s)
    if stop.evaluation_return_mean is not None:
        return Binding(f"evaluation return {stop.evaluation_return_mean:g}", None, None)
    return Binding(f"return {stop.episode_return_mean:g}", None, None)


def duration(seconds: float) -> str:
    """`1:02:03`, as rich shows the time elapsed."""
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02}:{whole % 60:02}"


def _of(target: float | None, form: str = "g") -> str:
    """` / 475`: the stop condition's target beside the figure it stops, when set."""
    return "" if target is None else f" / {target:{form}}"


def columns(
    row: dict[str, Any], stop: StopConditions | None, start: RunStart | None
) -> list[tuple[int, str]]:
    """The progress line's columns in order, each with its rank (0 matters most; the highest is
    dropped first): the iteration, the steps, the returns, the rate over the run, and the stop
    that binds with its ETA. The steps and when the run ends matter most, the iteration least."""
    target = {} if stop is None else stop.model_dump()
    returns = format_return(row[EPISODE_RETURN_MEAN])
    found = [
        (5, f"iter {row[ITERATION]}{_of(target.get('iterations'))}"),
        (0, f"{row[TIMESTEPS_TOTAL]:,}{_of(target.get('timesteps'), ',')} steps"),
        (2, f"return {returns}{_of(target.get('episode_return_mean'))}"),
    ]
    if row.get(EVALUATION_RETURN_MEAN) is not None:
        evaluation = format_return(row[EVALUATION_RETURN_MEAN])
        # A confirmation that did not hold the target (see job/evaluation.py) says so.
        unconfirmed = " unconfirmed" if row.get(EVALUATION_CONFIRMED) is False else ""
        of = _of(target.get("evaluation_return_mean"))
        found.append((4, f"eval {evaluation}{unconfirmed}{of}"))
    if row.get(WIN_RATE) is not None:  # self-play: against its snapshots, and a baseline
        baselines = row.get(BASELINE_WIN_RATES) or {}
        versus = "".join(f" ({rate:.0%} vs {name})" for name, rate in list(baselines.items())[:1])
        found.append((4, f"won {row[WIN_RATE]:.0%}{versus}"))
    if start is not None and (rate := start.steps_per_s(row)) is not None:
        found.append((3, f"{rate:,.0f} steps/s"))
    if stop is not None and start is not None:
        binding = binding_stop(stop, row, start)
        if binding.eta_s is None:
            found.append((1, f"until {binding.name}"))
        else:
            found.append((1, f"ETA {duration(binding.eta_s)} ({binding.name})"))
    return found


def fit(found: list[tuple[int, str]], width: int | None = None) -> str:
    """The columns joined, dropping the least important ones (highest rank) until the line is
    at most `width` long (no limit when None); the first-ranked column always stays."""
    kept = list(found)
    while width is not None and len(kept) > 1 and len(SEPARATOR.join(t for _, t in kept)) > width:
        kept.remove(max(kept, key=lambda column: column[0]))
    return SEPARATOR.join(text for _, text in kept)


def progress_line(
    row: dict[str, Any],
    stop: StopConditions | None = None,
    start: RunStart | None = None,
    width: int | None = None,
) -> str:
    """A progress row's figures for people (see the module's docstring), within `width`."""
    return fit(columns(row, stop, start), width)
