"""The learner-driven size of an elastic fleet (spec.rolloutWorkers.autoscaling, policy Learner):
how many rollout workers the learner needs, from the running driver's metrics.

An asynchronous optimizer's learner thread learns on what the workers send. While it waits for data
(busy less than targetLearnerUtilisation) and the policy lag has room under
optimizerConfig.maxPolicyLag, more workers would be used: the fleet grows in proportion, as an HPA
scales to its target (replicas x utilisation target / utilisation, at least one more). While it
drops batches as too stale, or is busy nearly all the time (SATURATED), the workers sample more
than it can take: the fleet shrinks by a quarter (at least one). Always within [minReplicas,
maxReplicas], and at most one change per stabilizationSeconds, so the figures settle after a change
before the next is judged. The operator writes the new size to spec.rolloutWorkers.replicas, as an
HPA writes a scale subresource, and the running cluster follows it in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from kuberl_operator.spec import Autoscaled, Phase, Reason, RLJobSpec, RLJobStatus
from kuberl_operator.status.observed import LearnerLoad

SATURATED = 0.95
"""A learner busy this share of its time or more takes all it can: more workers would only wait."""
LEAST_UTILISATION = 0.05
"""The least utilisation the growth is computed from: a learner idle for want of data grows the
fleet at most 20-fold in one change (within maxReplicas)."""


@dataclass(frozen=True)
class Scaling:
    """A change of spec.rolloutWorkers.replicas and why."""

    replicas: int
    reason: str
    message: str


def remembered(
    spec: RLJobSpec | None, status: RLJobStatus, load: LearnerLoad | None
) -> Autoscaled | None:
    """status.autoscaled after this poll: the drop count seen now (the last one when the driver
    said nothing); None without autoscaling."""
    if spec is None or spec.rollout_workers.autoscaling is None:
        return None
    previous = status.autoscaled or Autoscaled()
    if load is None:
        return previous
    return previous.model_copy(update={"stale_batches_dropped": load.stale_batches_dropped})


def learner_scaling(
    spec: RLJobSpec | None,
    status: RLJobStatus,
    phase: Phase,
    load: LearnerLoad | None,
    now: datetime,
) -> Scaling | None:
    """The fleet's new size, or None to leave it: only for a running job with autoscaling whose
    driver reports its learner, and not within stabilizationSeconds of the last change."""
    if spec is None or phase != Phase.RUNNING or load is None:
        return None
    autoscaling, workers = spec.rollout_workers.autoscaling, spec.rollout_workers
    if autoscaling is None:
        return None
    previous = status.autoscaled or Autoscaled()
    last = previous.last_scale_time
    if last is not None and (now - last).total_seconds() < autoscaling.stabilization_seconds:
        return None
    current = workers.replicas
    dropped = load.stale_batches_dropped - previous.stale_batches_dropped
    if dropped > 0 or load.utilisation >= SATURATED:
        fewer = max(workers.fewest, current - max(1, current // 4))
        why = (
            f"{dropped} batch(es) dropped as too stale"
            if dropped > 0
            else "the learner is saturated"
        )
        return _change(current, fewer, Reason.SCALED_DOWN, f"{why} ({_busy(load)})")
    max_lag = spec.trainer.optimizer_config.max_policy_lag
    lag_room = max_lag is None or load.policy_lag_max is None or load.policy_lag_max < max_lag
    target = autoscaling.target_learner_utilisation
    if load.utilisation < target and lag_room:
        wanted = math.ceil(current * target / max(load.utilisation, LEAST_UTILISATION))
        more = min(workers.most, max(current + 1, wanted))
        lag = "" if load.policy_lag_max is None else f", policy lag {load.policy_lag_max:g}"
        why = f"the learner waits for data ({_busy(load)}, target {target:.0%}{lag})"
        return _change(current, more, Reason.SCALED_UP, why)
    return None


def _busy(load: LearnerLoad) -> str:
    return f"busy {load.utilisation:.0%}"


def _change(current: int, replicas: int, reason: str, why: str) -> Scaling | None:
    if replicas == current:
        return None  # at a bound already
    return Scaling(replicas, reason, f"{why}: {current} -> {replicas} rollout workers")
