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
STRAGGLERS_DROPPED = "stragglers_dropped"
"""Batches of rollout workers dropped as stragglers in this run (a SyncSamples or SyncReplay step
past optimizerConfig.sampleTimeoutSeconds learns without them)."""

# The asynchronous optimizers' learner statistics.
POLICY_LAG = "policy_lag"
"""Mean, over the batches learned in the iteration, of the learner's weights version when it
learned on a batch minus the version the batch was sampled with: learner steps behind."""
LEARNER_QUEUE_DEPTH = "learner_queue_depth"
"""Batches waiting for the learner thread at the end of the iteration."""
LEARNER_UTILISATION = "learner_utilisation"
"""Share (0..1) of the iteration's wall time the learner thread spent learning."""


def format_return(value: float | None) -> str:
    """A return for people: one decimal, or "-" when there is none (no episode finished yet)."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"
