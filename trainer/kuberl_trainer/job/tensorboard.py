"""TensorBoard event files of a run (`spec.trainer.tensorboard`): every numeric value of each
progress row as a scalar at step = timesteps_total, under `<run dir>/tensorboard/`.

Tags are grouped by meaning as CleanRL groups them, so TensorBoard shows one section per kind
(`progress_row.RowGroup`): `charts/` for returns, episodes and evaluation, `perf/` for throughput,
time and workers, `learner/` for how the learner keeps up (policy lag, its queue), and `losses/`
for the policy's own statistics (policy_loss, vf_loss, entropy, kl, ...), which differ per
algorithm.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from kuberl_contract.progress_row import POLICIES, POLICY_LABEL, TIMESTEPS_TOTAL, row_group

TENSORBOARD_DIR = "tensorboard"
"""The event files' folder inside the run directory (point `tensorboard --logdir` at it, or at a
folder of run directories to compare runs)."""


def scalar_tag(key: str) -> str:
    """The TensorBoard tag of a progress row's key: `charts/episode_return_mean`,
    `perf/samples_per_s`, `learner/policy_lag`, `losses/policy_loss`."""
    return f"{row_group(key)}/{key}"


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric values by tag, those of each policy of a multi-agent job tagged with its
    name too. The step itself (timesteps_total), booleans, nulls and non-finite values (a mean
    over no episode yet) are left out."""
    values = {scalar_tag(key): value for key, value in row.items() if key != TIMESTEPS_TOTAL}
    # a multi-agent job's policies: `charts/episode_return_mean/attacker`, `losses/kl/attacker`
    for entry in row.get(POLICIES, ()):
        name = entry[POLICY_LABEL]
        own = {key: value for key, value in entry.items() if key != POLICY_LABEL}
        values |= {f"{scalar_tag(key)}/{name}": value for key, value in own.items()}
    return {
        tag: float(value)
        for tag, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


class TensorBoardLog:
    """One SummaryWriter over the run's event folder. A resumed run adds a new event file to the
    same folder; `purge_step` (the resumed checkpoint's timesteps + 1) tells TensorBoard to drop
    what an earlier run logged after that checkpoint, as progress.jsonl drops those rows."""

    FLUSH_SECS = 30  # a live TensorBoard sees new points within this, between checkpoints

    def __init__(self, run_dir: Path, purge_step: int | None = None) -> None:
        from tensorboardX import SummaryWriter  # only runs that ask for event files load it

        self.directory = run_dir / TENSORBOARD_DIR
        # The default file name has one-second resolution: a run resumed within the same second
        # would overwrite the previous file.
        self._writer = SummaryWriter(
            str(self.directory),
            purge_step=purge_step,
            flush_secs=self.FLUSH_SECS,
            filename_suffix=f".{os.getpid()}.{time.time_ns()}",
        )

    def write(self, row: dict[str, Any]) -> None:
        step = int(row[TIMESTEPS_TOTAL])
        for tag, value in scalars(row).items():
            self._writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
