"""Resizing a running cluster's rollout groups in place: the on-demand group that stands in for
spot workers, and an elastic fleet's rollout group as its desired size changes.

With spot.fallbackToOnDemand the cluster gets a second group, `rollout-on-demand`, with the same
pods minus the spot placement (placement.py) and 0 replicas. The spot group keeps asking for every
replica. How many on-demand workers the group should have is decided with the status
(`status.fallback`, from how many spot pods are Pending and for how long): the builders take that
size in `build_ray_cluster(..., on_demand_replicas=n)`, and `scale_on_demand` patches
a running cluster to it; spot.maxUnavailable says how many missing workers training
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
would mean losing the learner to gain a worker. So a queued job's on-demand group stays at 0:
under Kueue, spot-to-on-demand fallback is Kueue's to make (a spot and an on-demand ResourceFlavor
with flavor fungibility). How a queued job's RayCluster is admitted: ray_cluster.py.

An elastic fleet (rolloutWorkers.minReplicas and maxReplicas both set) has its rollout group
built to hold maxReplicas, and `scale_rollout` resizes it to replicas as an edit, `kubectl scale`
or an autoscaler (through the RLJob's scale subresource) sets it: no new attempt, as the group's
size is not one of the fields the cluster is built from (drift.py). A queued job keeps the shape
Kueue admitted, as above, unless Kueue runs its elastic jobs (ElasticJobsViaWorkloadSlices, alpha
since Kueue 0.13; the operator's kueue_elastic_jobs): then its RayCluster carries
`kueue.x-k8s.io/elastic-job: "true"`, a scale-down is recorded in its workload, and a scale-up
waits for Kueue to admit a new workload slice, its new pods gated until then.
"""

from __future__ import annotations

from collections.abc import Sequence

from kuberl_operator.builders.names import Object
from kuberl_operator.constants import (
    JOB_LABEL,
    RAY_NODE_TYPE_LABEL,
    ROLLOUT_GROUP,
    ROLLOUT_ON_DEMAND_GROUP,
)
from kuberl_operator.spec import RLJob


def worker_pods_selector(job: RLJob) -> str:
    """The label selector of the job's rollout worker pods (every rollout group's, of every
    attempt), as the scale subresource reports it (status.selector) for an HPA to count them."""
    return f"{JOB_LABEL}={job.name},{RAY_NODE_TYPE_LABEL}=worker"


def scale_on_demand(ray_cluster: Object, replicas: int) -> list[Object]:
    """A JSON patch setting the on-demand rollout group's replicas (`scale_group`)."""
    return scale_group(ray_cluster, ROLLOUT_ON_DEMAND_GROUP, replicas)


def scale_rollout(ray_cluster: Object, replicas: int, pending: Sequence[str] = ()) -> list[Object]:
    """A JSON patch setting the rollout group's replicas (`scale_group`): an elastic job scaled
    within its bounds (rolloutWorkers.minReplicas and maxReplicas) keeps its cluster. A group
    that shrinks gives up its `pending` pods first (KubeRay deletes a group's workersToDelete
    before any other): a Pending spot pod holds no node, so the workers that sample go on, and
    the on-demand fallback, which stands in for Pending spot pods, shrinks with them."""
    operations = scale_group(ray_cluster, ROLLOUT_GROUP, replicas)
    if not operations:
        return operations
    groups = ray_cluster["spec"]["workerGroupSpecs"]
    index = next(i for i, g in enumerate(groups) if g.get("groupName") == ROLLOUT_GROUP)
    fewer = groups[index].get("replicas", 0) - replicas
    if fewer > 0 and pending:
        strategy = {"workersToDelete": list(pending[:fewer])}
        path = f"/spec/workerGroupSpecs/{index}/scaleStrategy"
        operations.append({"op": "add", "path": path, "value": strategy})
    return operations


def scale_group(ray_cluster: Object, name: str, replicas: int) -> list[Object]:
    """A JSON patch setting the replicas of the worker group `name`, or [] when it has them
    already (or the cluster has no such group). The `test` op makes the patch fail, rather than
    resize another group, if the groups were reordered since `ray_cluster` was read."""
    groups = ray_cluster.get("spec", {}).get("workerGroupSpecs") or []
    for index, group in enumerate(groups):
        if group.get("groupName") == name:
            if group.get("replicas") == replicas:
                return []
            path = f"/spec/workerGroupSpecs/{index}"
            return [
                {"op": "test", "path": f"{path}/groupName", "value": name},
                {"op": "replace", "path": f"{path}/replicas", "value": replicas},
            ]
    return []
