"""The Ray pods: their containers, resources, volumes and security context.

What the pods may do. Every Ray pod passes Pod Security "restricted": it runs as the trainer
image's non-root user (settings.run_as_user, the group owning its volumes), with the runtime's
default seccomp profile, and every container drops all capabilities and cannot escalate. Without an
allowed spec.pods.serviceAccountName the pods mount no API token: Ray needs none. spec.pods adds
labels (never the operator's: spec.pods refuses those) and annotations. Ray's object store gets a
memory-backed /dev/shm as large as the pod's memory. What a job may reach beyond that (its Secrets,
image, PriorityClass and ServiceAccount) is checked against the settings before anything is built
(reach.py).

Authentication. Every Ray container gets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from the job's
Secret (names.auth_secret_name) explicitly (KubeRay adds them only where missing), so `kuberl
train` in the head and every `ray job` client authenticate without depending on what KubeRay
injects (ray_cluster.py).

The head's container runs the driver: it mounts the job's manifest and the run directory's storage,
gets the object store's credentials and the cluster's capacity (capacity.py), and stops the driver
in its preStop hook (driver.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from kuberl_contract.capacity import RAY_CAPACITY_ENV
from kuberl_operator.builders.capacity import ray_capacity
from kuberl_operator.builders.driver import STOP_DRIVER
from kuberl_operator.builders.names import Object, auth_secret_name, child_names, job_claim_name
from kuberl_operator.builders.placement import Placement
from kuberl_operator.builders.warm_start import WARM_START_MOUNT_PATH, WarmStartSource
from kuberl_operator.constants import (
    GPU_RESOURCE,
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_TOKEN_ENV,
    RAY_AUTH_TOKEN_SECRET_KEY,
    RAY_DASHBOARD_PORT,
    RAY_GCS_PORT,
    RAY_METRICS_PORT,
    SHARED_MEMORY_PATH,
)
from kuberl_operator.reach import referenced_secrets
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob, RolloutWorkers

RAY_JOB_STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
"""Seconds Ray's Jobs API waits, after the SIGTERM of a stop, before it kills the driver."""


def _auth_env(job: RLJob, settings: OperatorSettings) -> list[Object]:
    secret = {"name": auth_secret_name(job, settings), "key": RAY_AUTH_TOKEN_SECRET_KEY}
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


def ray_container(
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
        "env": _auth_env(job, settings),
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


def pod_template(
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
    # spec.pods.labels cannot hold the operator's keys (spec refuses them); they come last all
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


def rollout_resources(workers: RolloutWorkers, settings: OperatorSettings) -> Object:
    # The request is the worker's share, so the scheduler packs fractional workers densely. The
    # limit is rounded up to whole CPUs: `ray start --num-cpus` counts whole CPUs, so the pod
    # advertises ceil(cpusPerWorker) to Ray, and a fractional CFS quota would throttle the raylet
    # and the actor below what Ray believes the pod has.
    memory = settings.rollout_worker_memory
    return {
        "requests": {"cpu": _cpu_quantity(workers.cpus_per_worker), "memory": memory},
        "limits": {"cpu": str(math.ceil(workers.cpus_per_worker)), "memory": memory},
    }


def head_container(
    job: RLJob, settings: OperatorSettings, warm_start: WarmStartSource | None = None
) -> Object:
    container = ray_container(
        job, settings, "ray-head", _head_resources(job), gpus=job.spec.learner.gpus
    )
    # The head runs the driver, the one process that writes checkpoints: it alone gets the
    # object store's credentials, from either field, as environment variables.
    # The same list the operator's allowed_secrets is checked against (reach.py).
    names = list(dict.fromkeys(name for _, name in referenced_secrets(job)))
    if names:
        container["envFrom"] = [{"secretRef": {"name": name}} for name in names]
    capacity = {"name": RAY_CAPACITY_ENV, "value": ray_capacity(job, settings).to_json()}
    # A driver the operator stops (an earlier attempt's, before the next is submitted to the same
    # cluster) gets the Jobs API's SIGTERM, and its checkpoint grace before Ray's SIGKILL, not
    # Ray's default 3 s.
    grace = math.ceil(job.spec.trainer.checkpoint.grace_period_seconds)
    stop_wait = {"name": RAY_JOB_STOP_WAIT_ENV, "value": str(grace)}
    container["env"] = [*container["env"], capacity, stop_wait]
    return container | {
        "ports": [
            {"name": "gcs-server", "containerPort": RAY_GCS_PORT},
            {"name": "dashboard", "containerPort": RAY_DASHBOARD_PORT},
            {"name": "metrics", "containerPort": RAY_METRICS_PORT},
            {"name": "kuberl-metrics", "containerPort": settings.trainer_metrics_port},
        ],
        "volumeMounts": [
            *container["volumeMounts"],
            *(mount for _, mount in head_volumes(job, settings, warm_start)),
        ],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", STOP_DRIVER]}}},
    }


def head_volumes(
    job: RLJob, settings: OperatorSettings, warm_start: WarmStartSource | None = None
) -> list[tuple[Object, Object]]:
    """(volume, mount) pairs of the head: the job's manifest, the run directory's storage, and
    the claim of the job its warmStart.job names (`warm_start`), read-only, where it has one."""
    return [*_own_volumes(job, settings), *_warm_start_volumes(warm_start)]


def _warm_start_volumes(warm_start: WarmStartSource | None) -> list[tuple[Object, Object]]:
    if warm_start is None or warm_start.claim is None:
        return []
    claim = {"claimName": warm_start.claim, "readOnly": True}
    return [
        (
            {"name": "warm-start", "persistentVolumeClaim": claim},
            {"name": "warm-start", "mountPath": WARM_START_MOUNT_PATH, "readOnly": True},
        )
    ]


def _own_volumes(job: RLJob, settings: OperatorSettings) -> list[tuple[Object, Object]]:
    # The manifest directory is mounted whole (no subPath), so edits of the job reach the file.
    manifest = (
        {"name": "job-config", "configMap": {"name": child_names(job).job_config}},
        {"name": "job-config", "mountPath": settings.job_config_dir, "readOnly": True},
    )
    claim = job_claim_name(job)
    if claim is None or job.spec.storage is None:
        runs = (
            {"name": "runs", "emptyDir": {}},
            {"name": "runs", "mountPath": settings.run_dir_root},
        )
        return [manifest, runs]
    storage = (
        {"name": "storage", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "storage", "mountPath": job.spec.storage.mount_path},
    )
    return [manifest, storage]
