"""The on-demand rollout group that stands in for spot workers while spot capacity is missing.

With spot.fallbackToOnDemand the cluster gets a second group, `rollout-on-demand`, with the same
pods minus the spot placement (placement.py) and 0 replicas. The spot group keeps asking for every
replica. How many on-demand workers the group should have is decided with the status
(`status.fallback`, from how many spot pods are Pending and for how long): the builders take that
size in `build_ray_cluster(..., on_demand_replicas=n)`, and `scale_on_demand` patches a running
cluster to it; spot.maxUnavailable says how many missing workers training tolerates before paying
for on-demand ones.

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
would mean losing the learner to gain a worker. So a queued job's on-demand group stays at 0:
under Kueue, spot-to-on-demand fallback is Kueue's to make (a spot and an on-demand ResourceFlavor
with flavor fungibility). How a queued job's RayCluster is admitted: ray_cluster.py.
"""

from __future__ import annotations

from kuberl_operator.builders.names import Object
from kuberl_operator.constants import ROLLOUT_ON_DEMAND_GROUP


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
