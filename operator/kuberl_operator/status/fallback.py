"""The rollout groups' sizes, decided with the rest of the status: an elastic fleet's
(`rollout_replicas`), and the fallback to on-demand rollout workers while spot capacity is
missing, how many the on-demand group should have (`compute_status` hands them to the reconciler
in `StatusUpdate.rollout_replicas` and `StatusUpdate.on_demand_replicas`). The groups themselves,
and why the operator sizes them rather than Ray's autoscaler or Kueue: `builders.scaling`.

The spot group keeps asking for every replica: its Pending pods are what picks spot capacity up
again when it returns. Once the oldest of them has been Pending longer than the operator's
fallback_pending_seconds, on-demand workers replace the missing spot workers beyond
spot.maxUnavailable: training never runs with more workers missing than the user tolerates, and
pays for no more on-demand capacity than that takes. As spot pods start, the count drops back (to
0 when spot capacity is whole again)."""

from __future__ import annotations

from kuberl_operator.builders.capacity import rollout_pods
from kuberl_operator.spec import IntOrPercent, Phase, RLJobSpec
from kuberl_operator.status.observed import Observed, PendingSpotWorkers
from kuberl_operator.status.phases import TERMINAL


def max_unavailable(value: IntOrPercent, replicas: int) -> int:
    """spot.maxUnavailable as a count of workers: a percentage of replicas rounded down, as
    Deployments round maxUnavailable (so the tolerance never exceeds what was asked)."""
    if isinstance(value, str):
        return int(value.removesuffix("%")) * replicas // 100
    return min(value, replicas)


def on_demand_replicas(
    spec: RLJobSpec | None, phase: Phase, pending: PendingSpotWorkers | None
) -> int | None:
    """How many replicas the on-demand rollout group should have now; None leaves it as it is: a
    job without a cluster (or without a spec that could be read) has no group to size, and a
    finished job's cluster is on its way out. Always 0 without spot fallback and for jobs queued
    in Kueue, whose admitted shape must not change."""
    if spec is None or pending is None or phase in TERMINAL:
        return None
    workers = spec.rollout_workers
    if not (workers.spot.enabled and workers.spot.fallback_to_on_demand) or pending.queued:
        return 0
    if pending.pods <= 0 or pending.seconds < pending.grace_seconds:
        return 0
    pods = rollout_pods(spec)
    missing = min(pending.pods, pods)
    return max(0, missing - max_unavailable(workers.spot.max_unavailable, pods))


def rollout_replicas(
    spec: RLJobSpec | None, phase: Phase, observed: Observed, cluster_attempt: int
) -> int | None:
    """How many pods the job's rollout group should have now: its desired size,
    rolloutWorkers.replicas (for each trial of a population), once the cluster the current attempt
    runs on (built for `cluster_attempt`: an earlier one's, where a failed driver was retried on
    it) is up and rolloutWorkers is as it was built. The cluster's spec hashes leave replicas out
    exactly where the fleet scales in place (builders.drift.scales_in_place: an elastic fleet, not
    held by Kueue to its admitted shape), so a fixed fleet's new size, or a queued one's, is a
    stale rolloutWorkers that waits for the next attempt, and an elastic fleet's is applied here.
    None leaves the group as it is."""
    if spec is None or observed.cluster is None or observed.cluster.attempt != cluster_attempt:
        return None
    if phase in TERMINAL or phase == Phase.SUSPENDED or "rolloutWorkers" in observed.stale_spec:
        return None
    return rollout_pods(spec)
