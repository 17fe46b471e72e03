"""The progress contract: what the driver reports and how its readers find it, defined once for the
trainer, the operator and the API. Standard library only (no torch, no ray), so the operator, the
API and the CLI import it without loading the training stack.

- The progress row: the run directory's progress.jsonl, one JSON object per iteration, with the
  keys below (read by `kuberl plot`, TensorBoard, the status page and the API's local backend).
- The names of the driver's Prometheus metrics (the operator reads some into status.progress).

How `kuberl train` ends (its exit codes and its final record) is in `final_record`.
"""

from __future__ import annotations

import contextlib
import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Any

PROGRESS_FILE = "progress.jsonl"
"""The run directory's file of progress rows, one JSON object per iteration."""
POLICY_FILE = "policy.onnx"
"""The greedy policy a job exports beside its checkpoints when a stop condition ends it."""

ITERATION = "iteration"
TIMESTEPS_TOTAL = "timesteps_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
"""Env steps sampled in the iteration."""
TIMESTEPS_TRAINED_THIS_ITER = "timesteps_trained_this_iter"
"""Env steps the learner learned on in the iteration."""
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_RETURN_MAX = "episode_return_max"
EPISODE_RETURN_MIN = "episode_return_min"
EPISODE_LEN_MEAN = "episode_len_mean"
EPISODES_TOTAL = "episodes_total"
EPISODES_THIS_ITER = "episodes_this_iter"
EVALUATION_RETURN_MEAN = "evaluation_return_mean"
EVALUATION_CONFIRMED = "evaluation_confirmed"
"""Whether the latest evaluation that reached stop.evaluationReturnMean held on
evaluation.confirmEpisodes fresh episodes (their mean less its standard error reached the target:
see EvaluationConfig.confirm_episodes); null when no confirmation was played. A false one does
not stop training, whatever evaluation_return_mean says."""
SAMPLES_PER_S = "samples_per_s"
"""Env steps sampled per second over the iteration."""
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
"""Seconds spent training in all, across resumed runs."""
WORKER_RESTARTS = "worker_restarts"
"""Remote rollout workers lost and replaced in this run."""
CHECKPOINT = "checkpoint"
"""Full location (an absolute path, or a URI such as s3://bucket/prefix/checkpoint-00000020) of the
newest complete checkpoint when the row was written (the iteration's own when one was saved at
its end), or null before the first."""
STRAGGLERS_DROPPED = "stragglers_dropped"
"""Batches of rollout workers dropped as stragglers in this run (a SyncSamples or SyncReplay step
past optimizerConfig.sampleTimeoutSeconds learns without them)."""
WORKER_DOWNTIME_S = "worker_downtime_s"
"""Seconds the remote rollout worker slots went without a working worker in this run, summed over
slots: for each worker lost (its node preempted, its process killed), from the last call it
answered to the first its replacement answered, so noticing the loss, waiting for a node and
starting the actor all count. Outages still going on count up to the row's end."""
WORKERS_READY = "workers_ready"
"""Remote rollout workers ready to sample at the end of the iteration; replacements still
starting, or waiting for a node to be placed on, are not."""

# The asynchronous optimizers' learner statistics.
POLICY_LAG = "policy_lag"
"""Mean, over the batches learned in the iteration, of the learner's weights version when it
learned on a batch minus the version the batch was sampled with: learner steps behind."""
POLICY_LAG_P90 = "policy_lag_p90"
"""90th percentile of the same lags: nine batches in ten were learned at most this far behind."""
POLICY_LAG_MAX = "policy_lag_max"
"""The largest of the same lags; AsyncSamples keeps it at most optimizerConfig.maxPolicyLag."""
STALE_BATCHES_DROPPED = "stale_batches_dropped"
"""Sample calls' batches the learner dropped in the iteration instead of learning on them, because
they lagged more than optimizerConfig.maxPolicyLag learner steps when it took them (AsyncSamples).
They count in timesteps_this_iter, not in timesteps_trained_this_iter."""
LEARNER_QUEUE_DEPTH = "learner_queue_depth"
"""Batches waiting for the learner thread at the end of the iteration."""
LEARNER_UTILISATION = "learner_utilisation"
"""Share (0..1) of the iteration's wall time the learner thread spent learning."""

REPLAY_SHARDS_LOST = "replay_shards_lost"
"""Replay-buffer actors lost and replaced in this run (AsyncReplay)."""
REPLAY_SIZE = "replay_size"
"""Transitions the replay memory holds (SyncReplay, AsyncReplay: all shards together); once it
reaches buffer_size, every new transition evicts the oldest."""

# The policies' learner statistics: what a policy's learn step returns (each policy class names
# its own in STAT_KEYS, and the exploration rate it reports in EXPLORATION_KEYS).
POLICY_LOSS = "policy_loss"
"""The policy's (actor's) loss."""
VF_LOSS = "vf_loss"
"""The value function's loss (A2C, PPO, IMPALA, APPO)."""
TD_LOSS = "loss"
"""The TD loss: DQN's Huber loss, SAC's squared error of its critics."""
ENTROPY = "entropy"
"""The mean entropy of the policy's action distribution."""
KL = "kl"
"""Approximate KL divergence between the policy before and after learning (PPO, APPO)."""
CLIP_FRACTION = "clip_fraction"
"""Share of the rows whose probability ratio the surrogate clipped (PPO, APPO)."""
GRAD_NORM = "grad_norm"
"""Global norm of the gradient before clipping, when max_grad_norm clips it."""
SGD_STEPS = "sgd_steps"
"""SGD steps the learn call took (PPO, IMPALA, APPO)."""
ADVANTAGE_STD = "advantage_std"
"""Standard deviation of the V-trace advantages as computed, before any standardization (IMPALA,
APPO): it falls toward 0 once a task is solved."""
IMPORTANCE_RATIO_MAX = "importance_ratio_max"
"""The largest ratio pi/mu between the learner's policy and the one that sampled a row, before
V-trace clips it, in an SGD step's rows (the iteration's mean of them; IMPALA, APPO): far above 1
where the policy moves fast between a batch's sampling and its learning, as it did before a
solved policy collapsed."""
Q_MEAN = "q_mean"
"""Mean Q-value of the actions taken (DQN, SAC)."""
TD_ERROR_MEAN = "td_error_mean"
"""Mean absolute TD error (DQN, SAC)."""
ALPHA_LOSS = "alpha_loss"
"""The loss of SAC's entropy coefficient."""
ALPHA = "alpha"
"""SAC's entropy coefficient."""
EPSILON = "epsilon"
"""DQN's (Ape-X's) exploration rate."""
ES_GRADIENT_NORM = "gradient_norm"
"""Norm of the gradient ES estimated from the perturbations' returns."""
ES_WEIGHTS_NORM = "weights_norm"
"""Norm of ES's parameters before the update."""
ES_UPDATE_RATIO = "update_ratio"
"""Norm of ES's update relative to the norm of its parameters."""

POLICY_STATS = (
    POLICY_LOSS,
    VF_LOSS,
    TD_LOSS,
    ENTROPY,
    KL,
    CLIP_FRACTION,
    GRAD_NORM,
    SGD_STEPS,
    ADVANTAGE_STD,
    IMPORTANCE_RATIO_MAX,
    Q_MEAN,
    TD_ERROR_MEAN,
    ALPHA_LOSS,
    ALPHA,
    EPSILON,
    ES_GRADIENT_NORM,
    ES_WEIGHTS_NORM,
    ES_UPDATE_RATIO,
)
"""Every statistic a policy reports (RowGroup.LOSSES)."""

# Population-based training's row (an iteration is a round; its return is the best trial's).
BEST_TRIAL = "best_trial"
"""Index of the trial with the highest episode_return_mean after the round."""
TRIALS = "trials"
"""One object per trial: trial, iteration, timesteps_total, episode_return_mean and the
hyperparameters it trains with that differ from the inner spec's."""
EXPLOITS = "exploits"
"""The round's exploits: trial (replaced), from (the donor) and the hyperparameters it goes on
with after exploring."""

# A multi-agent job of several policies.
POLICIES = "policies"
"""One object per policy of a multi-agent job of several: policy (its name),
episode_return_mean (over the metricsWindow most recent episodes of its agents, each agent's own
return) and the statistics its learn steps reported in the iteration (a frozen policy has none).
The row's own statistics are their means over the policies that learned."""
WIN_RATE = "win_rate"
"""Self-play: the share of the metricsWindow most recent games that the learning policy won (its
agents' return above 0) against its snapshots."""
OPPONENT_SNAPSHOT = "opponent_snapshot"
"""Self-play: the iteration whose snapshot of the learning policy the opponent acted with."""
BASELINE_WIN_RATES = "baseline_win_rates"
"""Self-play: for each of selfPlay.baselines (random, or module:Class), the share of greedy games
the learning policy won against it, measured whenever a snapshot is taken."""
POLICY_LABEL = "policy"
"""The label naming a multi-agent job's policy on its per-policy metrics."""


class RowGroup(StrEnum):
    """What a progress-row key tells, for readers that show keys by kind (TensorBoard's
    sections, as CleanRL groups its scalars)."""

    CHARTS = "charts"  # how well it learns: returns, episodes, evaluation, the best trial
    PERF = "perf"  # how fast and how healthy: throughput, time, workers
    LEARNER = "learner"  # how the learner keeps up: policy lag, its queue, its share of time
    LOSSES = "losses"  # the policy's own statistics, which differ per algorithm


ROW_GROUPS: dict[str, RowGroup] = {
    **dict.fromkeys(
        (
            ITERATION,
            EPISODE_RETURN_MEAN,
            EPISODE_RETURN_MAX,
            EPISODE_RETURN_MIN,
            EPISODE_LEN_MEAN,
            EPISODES_TOTAL,
            EPISODES_THIS_ITER,
            EVALUATION_RETURN_MEAN,
            BEST_TRIAL,
            WIN_RATE,
            OPPONENT_SNAPSHOT,
            BASELINE_WIN_RATES,
        ),
        RowGroup.CHARTS,
    ),
    **dict.fromkeys(
        (
            TIMESTEPS_TOTAL,
            TIMESTEPS_THIS_ITER,
            TIMESTEPS_TRAINED_THIS_ITER,
            SAMPLES_PER_S,
            TIME_THIS_ITER_S,
            TIME_TOTAL_S,
            WORKER_RESTARTS,
            STRAGGLERS_DROPPED,
            WORKER_DOWNTIME_S,
            WORKERS_READY,
            REPLAY_SHARDS_LOST,
        ),
        RowGroup.PERF,
    ),
    **dict.fromkeys(
        (
            POLICY_LAG,
            POLICY_LAG_P90,
            POLICY_LAG_MAX,
            STALE_BATCHES_DROPPED,
            LEARNER_QUEUE_DEPTH,
            LEARNER_UTILISATION,
            REPLAY_SIZE,
        ),
        RowGroup.LEARNER,
    ),
    **dict.fromkeys(POLICY_STATS, RowGroup.LOSSES),
}
"""The group of every key the driver, its optimizers and the policies write."""


def row_group(key: str) -> RowGroup:
    """The group of a progress-row key: `ROW_GROUPS`' entry, or PERF for the optimizers' timers
    (`<name>_time_s`, seconds spent per kind of work), or LOSSES for any other key (a
    statistic of a policy)."""
    if key in ROW_GROUPS:
        return ROW_GROUPS[key]
    return RowGroup.PERF if key.endswith("_time_s") else RowGroup.LOSSES


class ProgressFileError(ValueError):
    """A progress file holds a line that is not a progress row, before its last (the last may
    be a row still being written)."""


def parse_rows(text: str, source: str) -> list[dict[str, Any]]:
    """The progress rows of a progress file's text, in order. The text after the last newline is
    a row still being written unless it parses whole; any other line that is not a JSON object
    with an iteration raises ProgressFileError naming `source` and the line number."""
    *complete, last = text.split("\n")
    rows = []
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            rows.append(_row(line))
        except (ValueError, TypeError) as exc:
            raise ProgressFileError(f"{source}:{number}: not a progress row ({exc})") from None
    with contextlib.suppress(ValueError, TypeError):
        rows.append(_row(last))
    return rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every progress row of a run's progress file (`parse_rows`); none when it does not exist
    yet."""
    found = read_progress_file(path)
    return [] if found is None else found[0]


def read_progress_file(path: Path) -> tuple[list[dict[str, Any]], bool] | None:
    """A run's progress file read once: its progress rows (`parse_rows`), and whether it ends with
    a whole line. False when its last line is unterminated: a row cut short, left out of the rows,
    or a whole row whose newline was never written. None when the file does not exist yet."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    return parse_rows(text, str(path)), text == "" or text.endswith("\n")


def _row(line: str) -> dict[str, Any]:
    row = json.loads(line)
    if not isinstance(row, dict) or not isinstance(row.get(ITERATION), int):
        raise ValueError(f"no integer {ITERATION!r}")
    return row


def format_return(value: float | None) -> str:
    """A return for people: one decimal, or "-" when there is none (no episode finished yet)."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"


# --- The driver's Prometheus metrics --------------------------------------------------------------
# Labelled namespace, job and algorithm. The operator reads the first six into status.progress.

RLJOB_LABEL = "rljob"
"""The label naming the RLJob on every kuberl series (trainer, operator, API). Not `job`: that is
Prometheus's own label, the name of the scrape job (`up{job="kuberl-operator"}`)."""

METRIC_ITERATION = "kuberl_training_iteration"
"""Gauge: training iterations completed in all, across resumed runs."""
METRIC_TIMESTEPS = "kuberl_training_timesteps"
"""Gauge: env steps sampled in all, across resumed runs."""
METRIC_EPISODE_RETURN_MEAN = "kuberl_episode_return_mean"
METRIC_SAMPLES_PER_SECOND = "kuberl_samples_per_second"
METRIC_LAST_ITERATION_TIMESTAMP = "kuberl_last_iteration_timestamp_seconds"
METRIC_CHECKPOINT = "kuberl_checkpoint"
"""Info: the newest checkpoint's location in the label CHECKPOINT_LABEL (Prometheus exposes it as
`kuberl_checkpoint_info`)."""
CHECKPOINT_LABEL = "path"
METRIC_RESOURCE_WAIT = "kuberl_resource_wait_seconds"
"""Gauge: seconds the driver has been waiting, at start, for Ray nodes its rollout workers (and
replay shards) fit on; 0 when it is not waiting."""

METRIC_ITERATIONS_TOTAL = "kuberl_iterations_total"
METRIC_ENV_STEPS_SAMPLED = "kuberl_env_steps_sampled_total"
METRIC_ENV_STEPS_TRAINED = "kuberl_env_steps_trained_total"
METRIC_EPISODES = "kuberl_episodes_total"
METRIC_EPISODE_LENGTH_MEAN = "kuberl_episode_length_mean"
METRIC_EVALUATION_RETURN_MEAN = "kuberl_evaluation_return_mean"
METRIC_LEARNER_SECONDS = "kuberl_learner_seconds_total"
METRIC_SAMPLE_SECONDS = "kuberl_sample_seconds_total"
METRIC_WEIGHT_SYNC_SECONDS = "kuberl_weight_sync_seconds_total"
METRIC_WORKER_RESTARTS = "kuberl_worker_restarts_total"
METRIC_WORKER_DOWNTIME = "kuberl_worker_downtime_seconds_total"
"""Counter: seconds of WORKER_DOWNTIME_S, the time lost to rollout workers that died."""
METRIC_WORKERS_READY = "kuberl_rollout_workers_ready"
"""Gauge: WORKERS_READY."""
METRIC_STRAGGLERS_DROPPED = "kuberl_stragglers_dropped_total"
METRIC_LAST_CHECKPOINT_TIMESTAMP = "kuberl_last_checkpoint_timestamp_seconds"
METRIC_CHECKPOINT_AGE = "kuberl_checkpoint_age_seconds"
METRIC_CHECKPOINT_FAILURES = "kuberl_checkpoint_failures_total"
"""Counter: checkpoint saves that failed (store full, unreachable, access denied). Training went on
and the previous checkpoint was kept; the next save tries again."""
METRIC_POLICY_LOSS = "kuberl_policy_loss"
METRIC_VALUE_LOSS = "kuberl_value_loss"
METRIC_TD_LOSS = "kuberl_td_loss"
METRIC_POLICY_ENTROPY = "kuberl_policy_entropy"
METRIC_POLICY_KL = "kuberl_policy_kl"
METRIC_POLICY_LAG = "kuberl_policy_lag"
METRIC_POLICY_LAG_P90 = "kuberl_policy_lag_p90"
METRIC_POLICY_LAG_MAX = "kuberl_policy_lag_max"
METRIC_STALE_BATCHES_DROPPED = "kuberl_stale_batches_dropped_total"
"""Counter: STALE_BATCHES_DROPPED, summed over the iterations."""
METRIC_LEARNER_QUEUE_DEPTH = "kuberl_learner_queue_depth"
METRIC_LEARNER_UTILISATION = "kuberl_learner_utilisation"

# Population-based training, labelled with the trial's index as well.
METRIC_POLICY_EPISODE_RETURN_MEAN = "kuberl_policy_episode_return_mean"
"""Gauge per policy of a multi-agent job of several (label policy)."""
METRIC_POLICY_STATISTIC = "kuberl_policy_learner_statistic"
"""Gauge per policy of a multi-agent job of several and statistic its learner reports (labels
policy and statistic, one of POLICY_STATS)."""
METRIC_TRIAL_EPISODE_RETURN_MEAN = "kuberl_trial_episode_return_mean"
METRIC_TRIAL_TIMESTEPS = "kuberl_trial_timesteps"
METRIC_TRIAL_EXPLOITS = "kuberl_trial_exploits_total"
"""Counter: times the trial took a better trial's weights and hyperparameters."""
