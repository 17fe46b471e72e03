"""The job's KubeRay RayCluster: a head group and the rollout worker groups.

The RayCluster is named like the job, shortened where KubeRay would refuse the name
(names.ray_cluster_name), and names its head Service itself (`<cluster>-head-svc`), the Service the
operator dials: what KubeRay would call it by default depends on its version. The head runs the
driver, which is the learner, so the head pod gets the learner's CPU, memory, GPUs and node
selection (placement.py). Ray's dashboard and Jobs API (port 8265) are reachable only inside the
cluster: the head Service is ClusterIP and no ingress is made. The rollout workers are one group,
`rollout`, and with spot fallback a second one, `rollout-on-demand`, whose size the operator sets
(scaling.py); Ray's autoscaler stays off.

Kueue. Kueue admits a RayCluster (its `ray.io/raycluster` integration) when the cluster carries
the label `kueue.x-k8s.io/queue-name` and was created suspended; Kueue then unsuspends it, having
injected its ResourceFlavor's node labels. So a job with that label gets a RayCluster with the label
in its metadata and `spec.suspend: true`. After creation `spec.suspend` belongs to Kueue: the
reconcile must not patch it back. The label goes on the RayCluster only: Kueue reads it there, and
on the pods or other children it would only invite Kueue's pod integration, where enabled, to
manage them too. Why the admitted shape then stays fixed: scaling.py; where Kueue's elastic jobs
are on (the operator's kueue_elastic_jobs), a job with an elastic fleet is marked
`kueue.x-k8s.io/elastic-job: "true"` and scales in place, Kueue admitting each scale-up as a new
workload slice.

Authentication. `spec.authOptions: {mode: token, secretName: <job>-ray-auth}` makes KubeRay start
Ray with token authentication and read the token from our Secret (key `auth_token`) instead of
generating its own; every Ray container also gets the token explicitly (pods.py).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from kuberl_contract.capacity import RAY_CPU
from kuberl_operator.builders.capacity import head_cpus, rollout_node_resources, rollout_pods
from kuberl_operator.builders.drift import SPEC_HASHES_ANNOTATION, scales_in_place, spec_hashes
from kuberl_operator.builders.driver import head_grace_period_seconds
from kuberl_operator.builders.names import (
    Object,
    auth_secret_name,
    child_labels,
    child_metadata,
    child_names,
)
from kuberl_operator.builders.placement import (
    Placement,
    head_placement,
    on_demand_placement,
    plain_placement,
    spot_placement,
    spot_preset,
)
from kuberl_operator.builders.pods import (
    head_container,
    head_volumes,
    pod_template,
    ray_container,
    rollout_resources,
)
from kuberl_operator.builders.warm_start import WarmStartSource
from kuberl_operator.constants import (
    ATTEMPT_LABEL,
    KUEUE_ELASTIC_JOB_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    RAY_API_VERSION,
    ROLLOUT_GROUP,
    ROLLOUT_ON_DEMAND_GROUP,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob


def _head_group(
    job: RLJob,
    settings: OperatorSettings,
    labels: dict[str, str],
    warm_start: WarmStartSource | None,
) -> Object:
    template = pod_template(
        job,
        settings,
        labels,
        head_container(job, settings, warm_start),
        head_placement(job, settings),
        volumes=[volume for volume, _ in head_volumes(job, settings, warm_start)],
    )
    template["spec"]["terminationGracePeriodSeconds"] = head_grace_period_seconds(job, settings)
    return {
        "serviceType": "ClusterIP",
        # KubeRay keeps its own ports, selector and type; only the name is ours.
        "headService": {"metadata": {"name": child_names(job).head_service}},
        "enableIngress": False,
        "rayStartParams": {
            # All interfaces of the pod: the dashboard is reached through the ClusterIP Service.
            "dashboard-host": "0.0.0.0",
            # The driver holds no Ray resources; 0 CPUs keeps rollout actors off the learner's
            # pod (and off on-demand capacity), except a PBT population's trials, which are
            # learners. The GPUs are advertised where they are.
            "num-cpus": str(head_cpus(job)),
            "num-gpus": str(job.spec.learner.gpus),
        },
        "template": template,
    }


class RolloutGroup(NamedTuple):
    """A worker group of rollout workers: its name, its replicas, where its pods run and whether
    they advertise the `spot` Ray resource."""

    name: str
    replicas: int
    placement: Placement
    spot: bool = False


def _rollout_group(
    job: RLJob, settings: OperatorSettings, labels: dict[str, str], group: RolloutGroup
) -> Object:
    workers = job.spec.rollout_workers
    container = ray_container(job, settings, "ray-worker", rollout_resources(workers, settings))
    advertised = rollout_node_resources(workers, group.spot)
    start_params = {"num-cpus": str(advertised.pop(RAY_CPU))}
    if advertised:
        start_params["resources"] = _ray_resources_param(advertised)
    return {
        "groupName": group.name,
        # KubeRay keeps replicas within [minReplicas, maxReplicas]; the operator sets replicas,
        # within rolloutWorkers' bounds as the job is scaled (its fallback from 0).
        "replicas": group.replicas,
        "minReplicas": 0,
        "maxReplicas": rollout_pods(job.spec, at_most=True),
        "rayStartParams": start_params,
        "template": pod_template(job, settings, labels, container, group.placement),
    }


def _ray_resources_param(resources: dict[str, int]) -> str:
    """rayStartParams' `resources` as KubeRay takes it: JSON in double quotes with its own quotes
    escaped, since KubeRay pastes it into the `ray start` command line."""
    return '"' + json.dumps(resources).replace('"', '\\"') + '"'


def _worker_groups(
    job: RLJob, settings: OperatorSettings, labels: dict[str, str], on_demand_replicas: int
) -> list[Object]:
    workers, pods = job.spec.rollout_workers, rollout_pods(job.spec)
    if pods == 0:  # the driver samples itself
        return []
    if not workers.spot.enabled:
        groups = [RolloutGroup(ROLLOUT_GROUP, pods, plain_placement(workers))]
    else:
        preset = spot_preset(job)
        placement = spot_placement(workers, preset)
        groups = [RolloutGroup(ROLLOUT_GROUP, pods, placement, spot=True)]
        if workers.spot.fallback_to_on_demand:
            placement = on_demand_placement(workers, preset)
            groups.append(RolloutGroup(ROLLOUT_ON_DEMAND_GROUP, on_demand_replicas, placement))
    return [_rollout_group(job, settings, labels, group) for group in groups]


def build_ray_cluster(
    job: RLJob,
    settings: OperatorSettings,
    attempt: int,
    *,
    on_demand_replicas: int = 0,
    warm_start: WarmStartSource | None = None,
) -> Object:
    """The job's KubeRay RayCluster (ray.io/v1) for an attempt (1, 2, ...); `on_demand_replicas`
    is the size of the on-demand fallback group, from `status.fallback.on_demand_replicas`;
    `warm_start`, where its warmStart.job's checkpoint is (its claim mounted into the head)."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    pods = rollout_pods(job.spec)
    if not 0 <= on_demand_replicas <= pods:
        raise ValueError(f"on_demand_replicas must be within 0..{pods}, got {on_demand_replicas}")
    labels = child_labels(job) | {ATTEMPT_LABEL: str(attempt)}
    queue = {KUEUE_QUEUE_LABEL: job.queue_name} if job.queue_name else {}
    metadata = child_metadata(job, child_names(job).ray_cluster, labels | queue)
    kueue_elastic = bool(queue) and settings.kueue_elastic_jobs
    metadata["annotations"] = {SPEC_HASHES_ANNOTATION: json.dumps(spec_hashes(job, kueue_elastic))}
    if kueue_elastic and scales_in_place(job, kueue_elastic):  # each scale-up a workload slice
        metadata["annotations"][KUEUE_ELASTIC_JOB_ANNOTATION] = "true"
    return {
        "apiVersion": RAY_API_VERSION,
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": {
            "rayVersion": job.spec.ray_version,
            "enableInTreeAutoscaling": False,
            # Kueue admits only clusters created suspended, then unsuspends them itself.
            "suspend": job.spec.suspend or bool(queue),
            "authOptions": {"mode": "token", "secretName": auth_secret_name(job, settings)},
            "headGroupSpec": _head_group(job, settings, labels, warm_start),
            "workerGroupSpecs": _worker_groups(job, settings, labels, on_demand_replicas),
        },
    }
