"""Pure builders: an RLJob and the operator's settings in, the Kubernetes objects it runs on out.

No I/O and no environment reads: handlers call these, adopt the results (`kopf.adopt`) and apply
them, and `kuberl render` prints them. Every child has a fixed name (`child_names`) and the labels
`app.kubernetes.io/managed-by: kuberl` and `kuberl.io/job: <job>`; the job's own labels are
copied first, so they can never override those, and labels under `kuberl.io/` and `ray.io/` (the
keys kuberl and KubeRay select by) are not copied at all.

The children of a job:
- a KubeRay `RayCluster` named like the job. The head runs the driver, which is the learner, so
  the head pod gets the learner's CPU, memory, GPUs and node selection; it stays on on-demand
  nodes (it never gets the spot selector, and when spot.provider names a cloud it also gets a node
  affinity that excludes that cloud's spot nodes). Ray's dashboard and Jobs API (port 8265) are
  reachable only inside the cluster: the head Service is ClusterIP and no ingress is made.
- a `Secret` with the Ray auth token (`build_auth_secret`; the caller passes the token, derived
  by `ray_auth_token` from the operator's key and the job's identity),
- a `ConfigMap` with the job's manifest (`build_job_config_map`), mounted into the head at
  /etc/kuberl/job.yaml for `kuberl train`,
- a `PodDisruptionBudget` that lets no voluntary disruption (a drain, an upgrade) take the head
  while it is healthy (`build_pod_disruption_budget`),
- a `NetworkPolicy` around the job's Ray pods (`build_network_policy`): Ray's ports are open only
  among them, the Ray Jobs API (on the dashboard's port) and the driver's metrics to the operator,
  and the metrics alone to Prometheus.

Stopping the head. Kubernetes runs the head's preStop hook before it signals `ray start`: the hook
sends SIGTERM to the driver (found by its command line, `kuberl train`, with pkill) and waits for it
to exit, so the driver writes its checkpoint and exits 143 while Ray is still up. The pod's grace
period bounds hook and shutdown together: the job's trainer.checkpoint.gracePeriodSeconds plus
RAY_STOP_MARGIN_SECONDS for Ray to stop, and at least the operator's
`termination_grace_period_seconds` (60 s by default). The rollout worker pods checkpoint nothing
and keep Kubernetes' default.

What the cluster offers. The head gets the cluster's capacity (every group's Ray resources and most
replicas, kuberl_trainer.capacity) in KUBERL_RAY_CAPACITY, so the driver tells a resource request
that will never fit (the job is invalid) from worker pods that are still starting (it waits for
them, up to the settings' workers_join_timeout_seconds).

Rollout workers. One Ray worker pod per rollout worker, in the group `rollout`, on spot nodes when
spot is enabled: the provider's node selector and, on GKE and AKS, the toleration of its spot taint
(DESIGN.md §3), merged with the user's rolloutWorkers.nodeSelector and tolerations (the user's
entries win on the same key: they are the more specific statement). With provider `custom` the
user's nodeSelector and tolerations alone are the spot placement. The spot pods also advertise one
unit of the custom Ray resource `spot` (SPOT_RAY_RESOURCE, in rayStartParams), so a job whose
rolloutWorkers.rayResources asks for {spot: 1} has its workers placed on spot pods only, one per
pod; without it Ray places workers on any pod, one per pod while pods are free (the trainer
creates them with the SPREAD strategy).

Falling back to on-demand nodes. With spot.fallbackToOnDemand the cluster gets a second group,
`rollout-on-demand`, with the same pods minus the spot placement (plus a node affinity that keeps
them off the provider's spot nodes; with `custom`, none of the user's selectors and tolerations,
since those are the spot placement) and 0 replicas. The spot group keeps asking for every replica:
its Pending pods are what picks spot capacity up again when it returns. The operator decides the
on-demand group's size with `fallback_replicas` from how many spot pods are Pending and for how
long, and passes it to `build_ray_cluster(..., on_demand_replicas=n)`; spot.maxUnavailable says how
many missing workers training tolerates before paying for on-demand ones.

Why not Ray's autoscaler: KubeRay v1.7's CRD does have `workerGroupSpecs[].priority`, but it is
read only by Ray's autoscaler v2 (Ray >= 2.56, `enableInTreeAutoscaling`), where it breaks ties
between groups that fit the same resource demand; it is no failover. A Pending spot pod stays
allocated until the autoscaler gives up on it (RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S,
one hour by default) before its group counts as unavailable; the autoscaler owns every group's
`replicas`, sizes groups from the Ray resource demand rather than from the job's replica count,
and has nothing like maxUnavailable. So the autoscaler stays off
(`enableInTreeAutoscaling: false`) and the operator sets replicas itself.

Kueue. Kueue admits a RayCluster (its `ray.io/raycluster` integration) when the cluster carries
the label `kueue.x-k8s.io/queue-name` and was created suspended; Kueue then unsuspends it, having
injected its ResourceFlavor's node labels. So a job with that label gets a RayCluster with the label
in its metadata and `spec.suspend: true`. After creation `spec.suspend` belongs to Kueue: the
reconcile must not patch it back. The label goes on the RayCluster only: Kueue reads it there, and
on the pods or other children it would only invite Kueue's pod integration, where enabled, to
manage them too. Kueue admits a fixed shape (replicas per group): in Kueue's job framework a
running job that no longer matches its Workload is stopped and requeued (unless elastic jobs are
on), which for us would mean losing the learner to gain a worker. So `fallback_replicas` returns 0
for queued jobs: under Kueue, spot-to-on-demand fallback is Kueue's to make (a spot and an
on-demand ResourceFlavor with flavor fungibility).

Authentication. `spec.authOptions: {mode: token, secretName: <job>-ray-auth}` makes KubeRay start
Ray with token authentication and read the token from our Secret (key `auth_token`) instead of
generating its own. Every Ray container also gets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from the
Secret explicitly (KubeRay adds them only where missing), so `kuberl train` in the head and every
`ray job` client authenticate without depending on what KubeRay injects.

What the pods may do. Every Ray pod passes Pod Security "restricted": it runs as the trainer
image's non-root user (settings.run_as_user, the group owning its volumes), with the runtime's
default seccomp profile, and every container drops all capabilities and cannot escalate. Without an
allowed spec.pods.serviceAccountName the pods mount no API token: Ray needs none. spec.pods adds
labels (never the operator's: spec.py refuses those) and annotations. Ray's object store gets a
memory-backed /dev/shm as large as the pod's memory. What a job may reach beyond that (its Secrets,
image, PriorityClass and ServiceAccount) is checked against the settings before anything is built
(policy.py).

Storage. With spec.storage.persistentVolumeClaim the head mounts the claim at mountPath and the
driver's run directory (progress and checkpoints) is <mountPath>/<job>, the same for every attempt,
so a restarted driver resumes from the newest checkpoint. With spec.storage.secretRef, or
spec.trainer.checkpoint.credentialsSecret, the driver gets the Secret's keys as environment
variables (object-store credentials; the head only, since only the driver writes checkpoints).
Without a claim the run directory is an emptyDir: it survives the driver's restarts but not the
head pod, so a job on spot workers without storage still resumes after a worker is preempted, but
restarts from scratch if its head is lost (unless trainer.checkpoint.uri is an object store).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import math
import shlex
from collections.abc import Sequence
from typing import Any, NamedTuple

import yaml

from kuberl_operator.constants import (
    ATTEMPT_LABEL,
    GPU_RESOURCE,
    JOB_CONFIG_FILE,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAMESPACE_NAME_LABEL,
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_SECRET_SUFFIX,
    RAY_AUTH_TOKEN_ENV,
    RAY_AUTH_TOKEN_SECRET_KEY,
    RAY_CLUSTER_LABEL,
    RAY_DASHBOARD_PORT,
    RAY_GCS_PORT,
    RAY_HEAD_NODE_TYPE,
    RAY_METRICS_PORT,
    RAY_NODE_TYPE_LABEL,
    RESERVED_LABEL_PREFIXES,
    ROLLOUT_GROUP,
    ROLLOUT_ON_DEMAND_GROUP,
    SHARED_MEMORY_PATH,
    SPOT_RAY_RESOURCE,
)
from kuberl_operator.policy import referenced_secrets
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import IntOrPercent, RLJob, RolloutWorkers, SpotProvider, Toleration
from kuberl_trainer.capacity import RAY_CAPACITY_ENV, Capacity, NodeGroup
from kuberl_trainer.config import PBT

Object = dict[str, Any]

# On the RayCluster: the hashes of the spec fields it was built from (`spec_hashes`).
SPEC_HASHES_ANNOTATION = "kuberl.io/spec-hashes"

# `[k]uberl train` matches the driver's command line but not this shell's, which holds the pattern
# itself (a plain "kuberl train" would make pkill signal the hook's own shell).
STOP_DRIVER = (
    'pkill -TERM -f "[k]uberl train" || exit 0; '
    'while pgrep -f "[k]uberl train" > /dev/null; do sleep 1; done'
)
GPU_TOLERATION: Object = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# What the head's grace period leaves, beyond the driver's checkpoint, for Ray itself to stop.
RAY_STOP_MARGIN_SECONDS = 15


# --- Names and labels ---------------------------------------------------------------------------


class ChildNames(NamedTuple):
    """The fixed names of a job's children (all in the job's namespace)."""

    ray_cluster: str
    auth_secret: str
    job_config: str
    head_pdb: str
    network_policy: str


def child_names(job: RLJob) -> ChildNames:
    # The RayCluster takes the job's name itself: KubeRay derives pod and Service names from it
    # and allows at most 63 characters, which is what a job name may have.
    return ChildNames(
        ray_cluster=job.name,
        auth_secret=f"{job.name}{RAY_AUTH_SECRET_SUFFIX}",
        job_config=f"{job.name}-job",
        head_pdb=f"{job.name}-head",
        network_policy=f"{job.name}-ray",
    )


def child_labels(job: RLJob) -> dict[str, str]:
    """The job's labels, minus the reserved and the Kueue ones, then the operator's own."""
    copied = {
        key: value
        for key, value in job.metadata.labels.items()
        if not key.startswith(RESERVED_LABEL_PREFIXES) and key != KUEUE_QUEUE_LABEL
    }
    return {**copied, MANAGED_BY_LABEL: MANAGED_BY, JOB_LABEL: job.name}


def _metadata(job: RLJob, name: str, labels: dict[str, str]) -> Object:
    metadata: Object = {"name": name}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    return metadata | {"labels": labels}


# --- The driver ---------------------------------------------------------------------------------


def submission_id(job: RLJob, attempt: int) -> str:
    """The Ray Jobs API submission id of an attempt: one per attempt, so a retried submission of
    the same attempt is recognised instead of starting a second driver."""
    return f"{job.name}-{attempt}"


def run_dir(job: RLJob, settings: OperatorSettings) -> str:
    """The driver's run directory in the head pod, the same for every attempt."""
    storage = job.spec.storage
    if storage and storage.persistent_volume_claim:
        return f"{storage.mount_path.rstrip('/')}/{job.name}"
    return f"{settings.run_dir_root}/{job.name}"


def driver_entrypoint(job: RLJob, settings: OperatorSettings) -> str:
    """The shell command the Ray Jobs API runs on the head. It asks for no entrypoint resources,
    so Ray runs it on the head, which advertises no CPUs of its own."""
    return shlex.join(
        [
            "kuberl",
            "train",
            f"{settings.job_config_dir}/{JOB_CONFIG_FILE}",
            "--run-dir",
            run_dir(job, settings),
            "--metrics-port",
            str(settings.trainer_metrics_port),
        ]
    )


# --- Placement ----------------------------------------------------------------------------------


class SpotPreset(NamedTuple):
    """How a provider marks its spot nodes: a label, and on some clouds a taint of the same key
    and value."""

    label: str
    value: str
    tainted: bool

    def node_selector(self) -> dict[str, str]:
        return {self.label: self.value}

    def tolerations(self) -> list[Object]:
        if not self.tainted:
            return []
        return [
            {"key": self.label, "operator": "Equal", "value": self.value, "effect": "NoSchedule"}
        ]

    def not_spot(self) -> Object:
        """A node-affinity requirement matching every node but this provider's spot nodes (NotIn
        also matches nodes without the label)."""
        return {"key": self.label, "operator": "NotIn", "values": [self.value]}


SPOT_PRESETS: dict[SpotProvider, SpotPreset] = {
    SpotProvider.GKE: SpotPreset("cloud.google.com/gke-spot", "true", tainted=True),
    SpotProvider.EKS: SpotPreset("eks.amazonaws.com/capacityType", "SPOT", tainted=False),
    SpotProvider.KARPENTER: SpotPreset("karpenter.sh/capacity-type", "spot", tainted=False),
    SpotProvider.AKS: SpotPreset("kubernetes.azure.com/scalesetpriority", "spot", tainted=True),
}


class Placement(NamedTuple):
    """Where a pod may run: node selector, tolerations, and node-affinity requirements."""

    node_selector: dict[str, str]
    tolerations: list[Object]
    required: list[Object]

    def pod_fields(self) -> Object:
        fields: Object = {}
        if self.node_selector:
            fields["nodeSelector"] = self.node_selector
        if self.tolerations:
            # The same toleration from a preset and from the user would read as a mistake.
            fields["tolerations"] = [
                t for i, t in enumerate(self.tolerations) if t not in self.tolerations[:i]
            ]
        if self.required:
            terms = [{"matchExpressions": self.required}]
            fields["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            }
        return fields


def _tolerations(tolerations: list[Toleration]) -> list[Object]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tolerations]


def _spot_preset(job: RLJob) -> SpotPreset | None:
    """The preset of the provider the job names (enabled or not); None for custom or none."""
    provider = job.spec.rollout_workers.spot.provider
    return SPOT_PRESETS.get(provider) if provider else None


def _head_placement(job: RLJob, settings: OperatorSettings) -> Placement:
    learner, preset = job.spec.learner, _spot_preset(job)
    gpu_model = {settings.gpu_type_label: learner.gpu_type} if learner.gpu_type else {}
    return Placement(
        node_selector=gpu_model | learner.node_selector,
        tolerations=([dict(GPU_TOLERATION)] if learner.gpus else [])
        + _tolerations(learner.tolerations),
        required=[preset.not_spot()] if preset else [],
    )


def _spot_placement(workers: RolloutWorkers, preset: SpotPreset | None) -> Placement:
    selector = preset.node_selector() if preset else {}
    tolerations = preset.tolerations() if preset else []
    return Placement(
        node_selector=selector | workers.node_selector,
        tolerations=tolerations + _tolerations(workers.tolerations),
        required=[],
    )


def _on_demand_placement(workers: RolloutWorkers, preset: SpotPreset | None) -> Placement:
    if preset is None:  # custom: the user's selectors and tolerations are the spot placement
        return Placement(node_selector={}, tolerations=[], required=[])
    return Placement(
        node_selector=dict(workers.node_selector),
        tolerations=_tolerations(workers.tolerations),
        required=[preset.not_spot()],
    )


def _plain_placement(workers: RolloutWorkers) -> Placement:
    return Placement(dict(workers.node_selector), _tolerations(workers.tolerations), required=[])


# --- Containers, pods, groups -------------------------------------------------------------------


def _auth_env(job: RLJob) -> list[Object]:
    secret = {"name": child_names(job).auth_secret, "key": RAY_AUTH_TOKEN_SECRET_KEY}
    return [
        {"name": RAY_AUTH_MODE_ENV, "value": "token"},
        {"name": RAY_AUTH_TOKEN_ENV, "valueFrom": {"secretKeyRef": secret}},
    ]


# Every Ray container: nothing to escalate to and no capabilities (Pod Security "restricted").
# KubeRay copies the Ray container's securityContext to the init container it injects into worker
# pods (wait-gcs-ready), so that one is covered too.
CONTAINER_SECURITY_CONTEXT: Object = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
SHARED_MEMORY_VOLUME = "shared-mem"  # KubeRay's name: it then adds no /dev/shm of its own


def _shared_memory(memory: str) -> tuple[Object, Object]:
    """(volume, mount) of Ray's object store: memory-backed /dev/shm (a container runtime's
    default is 64 MiB), at most the pod's memory, which it counts against anyway."""
    return (
        {"name": SHARED_MEMORY_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": memory}},
        {"name": SHARED_MEMORY_VOLUME, "mountPath": SHARED_MEMORY_PATH},
    )


def _ray_container(
    job: RLJob, settings: OperatorSettings, name: str, resources: Object, gpus: int = 0
) -> Object:
    # No command: KubeRay generates `ray start` with the group's rayStartParams for a container
    # whose command does not already run it. KubeRay takes the first container as Ray's.
    default_image = settings.trainer_gpu_image if gpus else settings.trainer_image
    _, shared_memory = _shared_memory(resources["limits"]["memory"])
    return {
        "name": name,
        "image": job.spec.image or default_image,
        "resources": resources,
        "env": _auth_env(job),
        "volumeMounts": [shared_memory],
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }


def pod_security_context(settings: OperatorSettings) -> Object:
    """The Ray pods' securityContext: the trainer image's non-root user, its group owning the
    volumes (so the head can write checkpoints to a claim), the runtime's default seccomp
    profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "fsGroup": settings.run_as_group,
        # A claim full of checkpoints is re-owned only when its root is not the group's already.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_template(
    job: RLJob,
    settings: OperatorSettings,
    labels: dict[str, str],
    container: Object,
    placement: Placement,
    volumes: Sequence[Object] = (),
) -> Object:
    shared_memory, _ = _shared_memory(container["resources"]["limits"]["memory"])
    pods = job.spec.pods
    spec: Object = {
        "securityContext": pod_security_context(settings),
        "containers": [container],
        "volumes": [*volumes, shared_memory],
        **placement.pod_fields(),
    }
    if pods.service_account_name:
        # An allowed ServiceAccount was named for what its token (or its cloud identity) gives;
        # whether the token is mounted is the ServiceAccount's own automountServiceAccountToken.
        spec["serviceAccountName"] = pods.service_account_name
    else:
        # The namespace's default ServiceAccount: Ray needs no Kubernetes API, so no token.
        spec["automountServiceAccountToken"] = False
    if job.spec.priority_class_name:
        spec["priorityClassName"] = job.spec.priority_class_name
    # spec.pods.labels cannot hold the operator's keys (spec.py refuses them); they come last all
    # the same, so the pods' selectors hold whatever the job says.
    metadata: Object = {"labels": {**pods.labels, **labels}}
    if pods.annotations:
        metadata["annotations"] = dict(pods.annotations)
    return {"metadata": metadata, "spec": spec}


def _cpu_quantity(cpus: float) -> str:
    if float(cpus).is_integer():
        return str(int(cpus))
    # round() first: 0.3 * 1000 is 300.00000000000006 in binary floating point.
    return f"{math.ceil(round(cpus * 1000, 6))}m"


def _head_resources(job: RLJob) -> Object:
    learner = job.spec.learner
    # Limits equal to requests give the head Guaranteed QoS: the last pod a node under memory
    # pressure evicts, which matters for the one pod whose loss restarts the whole job.
    amounts = {"cpu": learner.cpu, "memory": learner.memory}
    gpus = {GPU_RESOURCE: str(learner.gpus)} if learner.gpus else {}
    return {"requests": dict(amounts), "limits": amounts | gpus}


def _rollout_resources(workers: RolloutWorkers, settings: OperatorSettings) -> Object:
    # The request is the worker's share, so the scheduler packs fractional workers densely. The
    # limit is rounded up to whole CPUs: `ray start --num-cpus` counts whole CPUs, so the pod
    # advertises ceil(cpusPerWorker) to Ray, and a fractional CFS quota would throttle the raylet
    # and the actor below what Ray believes the pod has.
    memory = settings.rollout_worker_memory
    return {
        "requests": {"cpu": _cpu_quantity(workers.cpus_per_worker), "memory": memory},
        "limits": {"cpu": str(math.ceil(workers.cpus_per_worker)), "memory": memory},
    }


def _head_container(job: RLJob, settings: OperatorSettings) -> Object:
    container = _ray_container(
        job, settings, "ray-head", _head_resources(job), gpus=job.spec.learner.gpus
    )
    # The head runs the driver, the one process that writes checkpoints: it alone gets the
    # object store's credentials, from either field, as environment variables.
    # The same list the operator's allowed_secrets is checked against (policy.py).
    names = list(dict.fromkeys(name for _, name in referenced_secrets(job)))
    if names:
        container["envFrom"] = [{"secretRef": {"name": name}} for name in names]
    capacity = {"name": RAY_CAPACITY_ENV, "value": ray_capacity(job, settings).to_json()}
    container["env"] = [*container["env"], capacity]
    return container | {
        "ports": [
            {"name": "gcs-server", "containerPort": RAY_GCS_PORT},
            {"name": "dashboard", "containerPort": RAY_DASHBOARD_PORT},
            {"name": "metrics", "containerPort": RAY_METRICS_PORT},
            {"name": "kuberl-metrics", "containerPort": settings.trainer_metrics_port},
        ],
        "volumeMounts": [
            *container["volumeMounts"],
            *(mount for _, mount in _head_volumes(job, settings)),
        ],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", STOP_DRIVER]}}},
    }


def _head_volumes(job: RLJob, settings: OperatorSettings) -> list[tuple[Object, Object]]:
    """(volume, mount) pairs of the head: the job's manifest and the run directory's storage."""
    # The manifest directory is mounted whole (no subPath), so edits of the job reach the file.
    manifest = (
        {"name": "job-config", "configMap": {"name": child_names(job).job_config}},
        {"name": "job-config", "mountPath": settings.job_config_dir, "readOnly": True},
    )
    claim = job.spec.storage.persistent_volume_claim if job.spec.storage else None
    if claim is None:
        runs = (
            {"name": "runs", "emptyDir": {}},
            {"name": "runs", "mountPath": settings.run_dir_root},
        )
        return [manifest, runs]
    storage = (
        {"name": "storage", "persistentVolumeClaim": {"claimName": claim.claim_name}},
        {"name": "storage", "mountPath": job.spec.storage.mount_path},
    )
    return [manifest, storage]


def _head_group(job: RLJob, settings: OperatorSettings, labels: dict[str, str]) -> Object:
    template = _pod_template(
        job,
        settings,
        labels,
        _head_container(job, settings),
        _head_placement(job, settings),
        volumes=[volume for volume, _ in _head_volumes(job, settings)],
    )
    template["spec"]["terminationGracePeriodSeconds"] = head_grace_period_seconds(job, settings)
    return {
        "serviceType": "ClusterIP",
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
    container = _ray_container(job, settings, "ray-worker", _rollout_resources(workers, settings))
    advertised = _rollout_node_resources(workers, group.spot)
    start_params = {"num-cpus": str(advertised.pop("CPU"))}
    if advertised:
        start_params["resources"] = _ray_resources_param(advertised)
    return {
        "groupName": group.name,
        # KubeRay keeps replicas within [minReplicas, maxReplicas]; the operator sets replicas.
        "replicas": group.replicas,
        "minReplicas": 0,
        "maxReplicas": rollout_pods(job),
        "rayStartParams": start_params,
        "template": _pod_template(job, settings, labels, container, group.placement),
    }


def _rollout_node_resources(workers: RolloutWorkers, spot: bool) -> dict[str, int]:
    """The Ray resources a rollout pod advertises: whole CPUs (`ray start --num-cpus` counts
    whole ones), and on the spot group's pods one unit of `spot`."""
    return {"CPU": math.ceil(workers.cpus_per_worker)} | ({SPOT_RAY_RESOURCE: 1} if spot else {})


def rollout_pods(job: RLJob) -> int:
    """Rollout worker pods, one per worker: rolloutWorkers.replicas, for every trial of a PBT
    population (each trial has workers of its own)."""
    trainer = job.spec.trainer
    trials = trainer.hyperparameters.population if trainer.algorithm == PBT else 1
    return job.spec.rollout_workers.replicas * trials


def head_cpus(job: RLJob) -> int:
    """CPUs the head advertises to Ray: none (they are the driver's), but for a PBT population
    its trials' actors, which are learners like the driver (whole CPUs: `ray start --num-cpus`)."""
    trainer = job.spec.trainer
    if trainer.algorithm != PBT:
        return 0
    return math.ceil(trainer.hyperparameters.population * trainer.hyperparameters.cpus_per_trial)


def head_grace_period_seconds(job: RLJob, settings: OperatorSettings) -> int:
    """The head pod's terminationGracePeriodSeconds: the driver's checkpoint grace, then time for
    Ray to stop; never less than the operator's setting."""
    grace = job.spec.trainer.checkpoint.grace_period_seconds + RAY_STOP_MARGIN_SECONDS
    return max(settings.termination_grace_period_seconds, math.ceil(grace))


def ray_capacity(job: RLJob, settings: OperatorSettings) -> Capacity:
    """The most the job's RayCluster offers the driver's actors (kuberl_trainer.capacity): the
    head (no CPUs: they are the learner's; its GPUs) and every rollout group at its maxReplicas,
    the spot group and the on-demand fallback group together, as the builders make them."""
    learner, workers, pods = job.spec.learner, job.spec.rollout_workers, rollout_pods(job)
    groups = [NodeGroup({"CPU": float(head_cpus(job)), "GPU": float(learner.gpus)}, 1)]
    if pods:
        spot = workers.spot.enabled
        groups.append(NodeGroup(_floats(_rollout_node_resources(workers, spot)), pods))
        if spot and workers.spot.fallback_to_on_demand:
            on_demand = _rollout_node_resources(workers, spot=False)
            groups.append(NodeGroup(_floats(on_demand), pods))
    return Capacity(tuple(groups), float(settings.workers_join_timeout_seconds))


def _floats(resources: dict[str, int]) -> dict[str, float]:
    return {name: float(amount) for name, amount in resources.items()}


def _ray_resources_param(resources: dict[str, int]) -> str:
    """rayStartParams' `resources` as KubeRay takes it: JSON in double quotes with its own quotes
    escaped, since KubeRay pastes it into the `ray start` command line."""
    return '"' + json.dumps(resources).replace('"', '\\"') + '"'


def _worker_groups(
    job: RLJob, settings: OperatorSettings, labels: dict[str, str], on_demand_replicas: int
) -> list[Object]:
    workers, pods = job.spec.rollout_workers, rollout_pods(job)
    if pods == 0:  # the driver samples itself
        return []
    if not workers.spot.enabled:
        groups = [RolloutGroup(ROLLOUT_GROUP, pods, _plain_placement(workers))]
    else:
        preset = _spot_preset(job)
        placement = _spot_placement(workers, preset)
        groups = [RolloutGroup(ROLLOUT_GROUP, pods, placement, spot=True)]
        if workers.spot.fallback_to_on_demand:
            placement = _on_demand_placement(workers, preset)
            groups.append(RolloutGroup(ROLLOUT_ON_DEMAND_GROUP, on_demand_replicas, placement))
    return [_rollout_group(job, settings, labels, group) for group in groups]


# --- The objects --------------------------------------------------------------------------------


def build_ray_cluster(
    job: RLJob, settings: OperatorSettings, attempt: int, *, on_demand_replicas: int = 0
) -> Object:
    """The job's KubeRay RayCluster (ray.io/v1) for an attempt (1, 2, ...); `on_demand_replicas`
    is the size of the on-demand fallback group, from `fallback_replicas`."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if not 0 <= on_demand_replicas <= rollout_pods(job):
        raise ValueError(
            f"on_demand_replicas must be within 0..{rollout_pods(job)}, got {on_demand_replicas}"
        )
    labels = child_labels(job) | {ATTEMPT_LABEL: str(attempt)}
    queue = {KUEUE_QUEUE_LABEL: job.queue_name} if job.queue_name else {}
    metadata = _metadata(job, child_names(job).ray_cluster, labels | queue)
    metadata["annotations"] = {SPEC_HASHES_ANNOTATION: json.dumps(spec_hashes(job))}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": {
            "rayVersion": job.spec.ray_version,
            "enableInTreeAutoscaling": False,
            # Kueue admits only clusters created suspended, then unsuspends them itself.
            "suspend": job.spec.suspend or bool(queue),
            "authOptions": {"mode": "token", "secretName": child_names(job).auth_secret},
            "headGroupSpec": _head_group(job, settings, labels),
            "workerGroupSpecs": _worker_groups(job, settings, labels, on_demand_replicas),
        },
    }


def ray_auth_token(settings: OperatorSettings, namespace: str, name: str, uid: str) -> str | None:
    """The Ray auth token of the job `namespace/name` with UID `uid`: HMAC-SHA256 of the settings'
    ray_auth_key over the three, so the operator (restarted or not) computes it again instead of
    reading it back from the job's Secret, and a job recreated under the same name gets another.
    None without a key (the caller then generates a random token and reads it back)."""
    if settings.ray_auth_key is None:
        return None
    key = settings.ray_auth_key.get_secret_value().encode()
    message = "\n".join((namespace, name, uid)).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def build_auth_secret(job: RLJob, token: str) -> Object:
    """The Secret holding the Ray auth token of the job's cluster. Immutable: Ray reads the token
    once per process, so changing it under a running cluster would split it in two."""
    if not token:
        raise ValueError("the Ray auth token is empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(job, child_names(job).auth_secret, child_labels(job)),
        "type": "Opaque",
        "immutable": True,
        "stringData": {RAY_AUTH_TOKEN_SECRET_KEY: token},
    }


def build_job_config_map(job: RLJob) -> Object:
    """The ConfigMap holding the job's manifest for `kuberl train` in the head: the spec as the
    user wrote it (defaults left to the trainer's models, so a trainer image with an older kuberl
    still reads every job that uses no newer field), no status, and of the metadata only the name
    and namespace (the rest changes on every write)."""
    manifest = job.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"status"})
    namespace = job.metadata.namespace
    manifest["metadata"] = {"name": job.name} | ({"namespace": namespace} if namespace else {})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, child_names(job).job_config, child_labels(job)),
        "data": {JOB_CONFIG_FILE: yaml.safe_dump(manifest, sort_keys=False)},
    }


def build_pod_disruption_budget(job: RLJob) -> Object:
    """A PodDisruptionBudget that keeps drains and evictions off the healthy head pod, selected by
    the labels KubeRay gives it. An unhealthy head may still be evicted: it is not running the job,
    and blocking a node drain on it would help nobody."""
    selector = {
        RAY_CLUSTER_LABEL: child_names(job).ray_cluster,
        RAY_NODE_TYPE_LABEL: RAY_HEAD_NODE_TYPE,
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(job, child_names(job).head_pdb, child_labels(job)),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def ray_pod_selector(job: RLJob) -> dict[str, str]:
    """The labels of the job's Ray pods: KubeRay's cluster label (pods of the job's RayCluster)
    and the job's label from the operator's pod templates, both required, so no other pod of the
    namespace is taken for one of them."""
    return {RAY_CLUSTER_LABEL: child_names(job).ray_cluster, JOB_LABEL: job.name}


def _tcp(*ports: int) -> list[Object]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def build_network_policy(job: RLJob, settings: OperatorSettings) -> Object:
    """A NetworkPolicy that admits into the job's Ray pods only:
    - any port, from the job's own Ray pods (GCS, raylets, object transfer, workers' ports: Ray
      uses many, some random, and they need no one else);
    - the Ray dashboard's port (which serves the Jobs API) and the driver's metrics port, from the
      operator's pods (settings.operator_namespace and operator_pod_labels), which submit and watch
      the driver there and read its progress;
    - the driver's metrics port, from Prometheus (pods of settings.prometheus_namespace, or of any
      namespace when that is empty).
    Anything else (the dashboard from other pods, Ray's client port, Ray's own metrics) is refused.
    Egress is left alone: drivers and workers fetch packages, environments and checkpoints from
    wherever the job says. Traffic from the node itself (kubelet probes) is not governed by
    NetworkPolicies on the usual network plugins."""
    ray_pods = {"podSelector": {"matchLabels": ray_pod_selector(job)}}
    operator = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: settings.operator_namespace}},
        "podSelector": {"matchLabels": dict(settings.operator_pod_labels)},
    }
    scraper = (
        {"matchLabels": {NAMESPACE_NAME_LABEL: settings.prometheus_namespace}}
        if settings.prometheus_namespace
        else {}  # every namespace
    )
    metrics = settings.trainer_metrics_port
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(job, child_names(job).network_policy, child_labels(job)),
        "spec": {
            "podSelector": {"matchLabels": ray_pod_selector(job)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [ray_pods]},
                {"from": [operator], "ports": _tcp(RAY_DASHBOARD_PORT, metrics)},
                {"from": [{"namespaceSelector": scraper}], "ports": _tcp(metrics)},
            ],
        },
    }


def build_children(
    job: RLJob, settings: OperatorSettings, attempt: int, token: str
) -> list[Object]:
    """Every object the operator creates for an attempt, in creation order: what the Ray pods
    mount, and the policy that fences them in, come before the cluster."""
    return [
        build_auth_secret(job, token),
        build_job_config_map(job),
        build_network_policy(job, settings),
        build_ray_cluster(job, settings, attempt),
        build_pod_disruption_budget(job),
    ]


# --- Spec edits under a running attempt ---------------------------------------------------------

# What the operator itself acts on: an edit of these applies at once, with no new Ray cluster.
APPLIED_IN_PLACE = frozenset(
    {"suspend", "restartPolicy", "activeDeadlineSeconds", "ttlSecondsAfterFinished"}
)


def spec_hashes(job: RLJob) -> dict[str, str]:
    """A short hash of each spec field the Ray cluster and the driver are built from (every field
    but APPLIED_IN_PLACE), kept on the RayCluster so a later edit of one can be named."""
    spec = job.spec.model_dump(mode="json", by_alias=True)
    return {
        key: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
        for key, value in sorted(spec.items())
        if key not in APPLIED_IN_PLACE
    }


def stale_spec(job: RLJob, ray_cluster: Object) -> tuple[str, ...]:
    """The spec fields edited since `ray_cluster` was built (they apply on the next attempt).
    A cluster without the annotation (made by hand, or by an older operator) reports none."""
    annotation = (ray_cluster.get("metadata", {}).get("annotations") or {}).get(
        SPEC_HASHES_ANNOTATION
    )
    try:
        built = json.loads(annotation or "null")
    except ValueError:
        return ()
    if not isinstance(built, dict):
        return ()
    now = spec_hashes(job)
    return tuple(key for key in sorted(now.keys() | built.keys()) if now.get(key) != built.get(key))


# --- Falling back to on-demand rollout workers --------------------------------------------------


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
