"""`kuberl plot RUN_DIR... [-o FILE]`: the learning curves of several runs in one figure, read from
each run's progress.jsonl; the format follows the output file's extension (.png or .svg)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from kuberl_contract.plots import MEDIA_TYPES, InvalidRun, MissingRun, PlotFormat, read_run

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def plot(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR",
            help="Run directories (each with its progress.jsonl).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The figure: .png or .svg.")
    ] = Path("plot.png"),
) -> None:
    """Draw the learning curves of runs in one figure: return against env steps, evaluation
    dashed."""
    raise typer.Exit(plot_command(run_dirs, output))


def output_format(output: Path) -> PlotFormat | None:
    """The format named by the output file's extension, or None when it names none we draw."""
    extension = output.suffix.lower().lstrip(".")
    return next((name for name in MEDIA_TYPES if name == extension), None)


def plot_command(run_dirs: Sequence[Path], output: Path) -> int:
    """0 once the figure is written; 2 when a run directory or its progress file is missing, 1
    for anything else that cannot be drawn (an unknown extension, an empty progress file)."""
    from kuberl_contract.plots import learning_curves, render

    format = output_format(output)
    if format is None:
        known = ", ".join(f".{name}" for name in MEDIA_TYPES)
        print(
            f"--output: {output}: unknown extension {output.suffix or '(none)'!r}; use {known}",
            file=sys.stderr,
        )
        return EXIT_INVALID
    curves, exit_code = [], EXIT_OK
    for run_dir in run_dirs:
        try:
            curves.append(read_run(run_dir))
        except MissingRun as exc:
            print(exc, file=sys.stderr)
            exit_code = max(exit_code, EXIT_NO_FILE)
        except InvalidRun as exc:
            print(exc, file=sys.stderr)
            exit_code = exit_code or EXIT_INVALID
    if exit_code:
        return exit_code
    names = [curve.name for curve in curves]
    if len(set(names)) < len(names):  # runs/a/run and runs/b/run: the paths tell them apart
        curves = [replace(c, name=str(d)) for c, d in zip(curves, run_dirs, strict=True)]
    title = curves[0].name if len(curves) == 1 else "Learning curves"
    try:
        output.write_bytes(render(learning_curves(curves, title), format))
    except OSError as exc:
        print(f"--output: {output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INVALID
    runs = ", ".join(curve.name for curve in curves)
    print(f"{output}: learning curves of {runs}")
    return EXIT_OK
