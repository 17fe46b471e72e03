"""Falling back to on-demand rollout workers while spot capacity is missing.

With spot.fallbackToOnDemand the cluster gets a second group, `rollout-on-demand`, with the same
pods minus the spot placement (placement.py) and 0 replicas. The spot group keeps asking for every
replica: its Pending pods are what picks spot capacity up again when it returns. The operator
decides the on-demand group's size with `fallback_replicas` from how many spot pods are Pending and
for how long, and passes it to `build_ray_cluster(..., on_demand_replicas=n)`, or patches a running
cluster with `scale_on_demand`; spot.maxUnavailable says how many missing workers training
tolerates before paying for on-demand ones.

Why not Ray's autoscaler: KubeRay v1.7's CRD does have `workerGroupSpecs[].priority`, but it is
read only by Ray's autoscaler v2 (Ray >= 2.56, `enableInTreeAutoscaling`), where it breaks ties
between groups that fit the same resource demand; it is no failover. A Pending spot pod stays
allocated until the autoscaler gives up on it (RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S,
one hour by default) before its group counts as unavailable; the autoscaler owns every group's
`replicas`, sizes groups from the Ray resource demand rather than from the job's replica count,
and has nothing like maxUnavailable. So the autoscaler stays off
(`enableInTreeAutoscaling: false`) and the operator sets replicas itself.

Kueue admits a fixed shape (replicas per group): in Kueue's job framework a running job that no
longer matches its Workload is stopped and requeued (unless elastic jobs are on), which for us
would mean losing the learner to gain a worker. So `fallback_replicas` returns 0 for queued jobs:
under Kueue, spot-to-on-demand fallback is Kueue's to make (a spot and an on-demand ResourceFlavor
with flavor fungibility). How a queued job's RayCluster is admitted: ray_cluster.py.
"""

from __future__ import annotations

from kuberl_operator.builders.capacity import rollout_pods
from kuberl_operator.builders.names import Object
from kuberl_operator.constants import ROLLOUT_ON_DEMAND_GROUP
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import IntOrPercent, RLJob


def max_unavailable(value: IntOrPercent, replicas: int) -> int:
    """spot.maxUnavailable as a count of workers: a percentage of replicas rounded down, as
    Deployments round maxUnavailable (so the tolerance never exceeds what was asked)."""
    if isinstance(value, str):
        return int(value.removesuffix("%")) * replicas // 100
    return min(value, replicas)


def fallback_replicas(
    job: RLJob, pending_spot_pods: int, pending_seconds: float, settings: OperatorSettings
) -> int:
    """How many replicas the on-demand rollout group should have now.

    `pending_spot_pods` is the number of Pending pods of the spot group and `pending_seconds` how
    long the oldest of them has been Pending. Once that exceeds the settings'
    fallback_pending_seconds, on-demand workers replace the missing spot workers beyond
    spot.maxUnavailable: training never runs with more workers missing than the user tolerates,
    and pays for no more on-demand capacity than that takes. As spot pods start, the count drops
    back (to 0 when spot capacity is whole again). Always 0 without spot fallback and for jobs
    queued in Kueue (whose admitted shape must not change; see the module docstring)."""
    workers = job.spec.rollout_workers
    if not (workers.spot.enabled and workers.spot.fallback_to_on_demand) or job.queue_name:
        return 0
    if pending_spot_pods <= 0 or pending_seconds < settings.fallback_pending_seconds:
        return 0
    pods = rollout_pods(job)
    missing = min(pending_spot_pods, pods)
    return max(0, missing - max_unavailable(workers.spot.max_unavailable, pods))


def scale_on_demand(ray_cluster: Object, replicas: int) -> list[Object]:
    """A JSON patch setting the on-demand rollout group's replicas, or [] when it has them
    already (or the cluster has no such group). The `test` op makes the patch fail, rather than
    resize another group, if the groups were reordered since `ray_cluster` was read."""
    groups = ray_cluster.get("spec", {}).get("workerGroupSpecs") or []
    for index, group in enumerate(groups):
        if group.get("groupName") == ROLLOUT_ON_DEMAND_GROUP:
            if group.get("replicas") == replicas:
                return []
            path = f"/spec/workerGroupSpecs/{index}"
            return [
                {"op": "test", "path": f"{path}/groupName", "value": ROLLOUT_ON_DEMAND_GROUP},
                {"op": "replace", "path": f"{path}/replicas", "value": replicas},
            ]
    return []
