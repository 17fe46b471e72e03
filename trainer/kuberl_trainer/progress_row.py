"""What a progress row is, for its readers: the file the driver appends rows to, the keys read
outside the driver (`kuberl plot`, TensorBoard, the status page), and how a return is shown.
Standard library only, so the API and the CLI read rows without loading the console's rendering.
"""

from __future__ import annotations

import math

PROGRESS_FILE = "progress.jsonl"
"""The run directory's file of progress rows, one JSON object per iteration."""

ITERATION = "iteration"
TIMESTEPS_TOTAL = "timesteps_total"
EPISODE_RETURN_MEAN = "episode_return_mean"
EVALUATION_RETURN_MEAN = "evaluation_return_mean"


def format_return(value: float | None) -> str:
    """A return for people: one decimal, or "-" when there is none (no episode finished yet)."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"
