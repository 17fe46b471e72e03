"""The driver: how the Ray Jobs API starts it on the head, where it writes, and how it is stopped.

Storage. With spec.storage.persistentVolumeClaim (or size: a claim the operator creates for the
job) the head mounts the claim at mountPath and the
driver's run directory (progress and checkpoints) is <mountPath>/<job>, the same for every attempt,
so a restarted driver resumes from the newest checkpoint. With spec.storage.secretRef, or
spec.trainer.checkpoint.credentialsSecret, the driver gets the Secret's keys as environment
variables (object-store credentials; the head only, since only the driver writes checkpoints).
Without a claim the run directory is an emptyDir: it survives the driver's restarts but not the
head pod, so a job on spot workers without storage still resumes after a worker is preempted, but
restarts from scratch if its head is lost (unless trainer.checkpoint.uri is an object store).
The head's volumes and credentials are built with its container (pods.py).

Stopping the head. Kubernetes runs the head's preStop hook before it signals `ray start`: the hook
sends SIGTERM to the driver (found by its command line, `kuberl train`, with pkill) and waits for it
to exit, so the driver writes its checkpoint and exits 143 while Ray is still up. The pod's grace
period bounds hook and shutdown together: the job's trainer.checkpoint.gracePeriodSeconds plus
RAY_STOP_MARGIN_SECONDS for Ray to stop, and at least the operator's
`termination_grace_period_seconds` (60 s by default). The rollout worker pods checkpoint nothing
and keep Kubernetes' default.
"""

from __future__ import annotations

import math
import shlex

from kuberl_operator.constants import JOB_CONFIG_FILE
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob, RLJobSpec

# `[k]uberl train` matches the driver's command line but not this shell's, which holds the pattern
# itself (a plain "kuberl train" would make pkill signal the hook's own shell).
STOP_DRIVER = (
    'pkill -TERM -f "[k]uberl train" || exit 0; '
    'while pgrep -f "[k]uberl train" > /dev/null; do sleep 1; done'
)
# What the head's grace period leaves, beyond the driver's checkpoint, for Ray itself to stop.
RAY_STOP_MARGIN_SECONDS = 15


def submission_id(job: RLJob, attempt: int) -> str:
    """The Ray Jobs API submission id of an attempt: one per attempt, so a retried submission of
    the same attempt is recognised instead of starting a second driver."""
    return submission_id_of(job.name, attempt)


def submission_id_of(job_name: str, attempt: int) -> str:
    """submission_id of the job named `job_name` (it depends on nothing else)."""
    return f"{job_name}-{attempt}"


def run_dir(job: RLJob, settings: OperatorSettings) -> str:
    """The driver's run directory in the head pod, the same for every attempt."""
    storage = job.spec.storage
    if storage and storage.mounts_claim:
        return run_dir_on_claim(job)
    return f"{settings.run_dir_root}/{job.name}"


def run_dir_on_claim(job: RLJob) -> str:
    """The run directory of a job whose head mounts a claim (spec.storage.mountPath/<job>)."""
    storage = job.spec.storage
    if storage is None or not storage.mounts_claim:
        raise ValueError(f"job {job.name} mounts no claim")
    return f"{storage.mount_path.rstrip('/')}/{job.name}"


OBJECT_STORES = ("s3", "gs", "az")


def ephemeral_checkpoints(spec: RLJobSpec) -> str | None:
    """Why the job's checkpoints (and the policy exported beside them when it ends) die with its
    Ray cluster, or None when they outlive it: in an object store, or on the claim of
    spec.storage, which the head mounts."""
    uri = spec.trainer.checkpoint.uri
    if uri is not None and uri.split("://", 1)[0] in OBJECT_STORES:
        return None
    if spec.storage is None or not spec.storage.mounts_claim:
        return (
            "the checkpoints, and the policy exported when the job ends, are kept in the head "
            "pod's emptyDir and deleted with the Ray cluster when the job ends or its head pod "
            "is lost: give the job a claim (spec.storage.size, or an existing one in "
            "spec.storage.persistentVolumeClaim) or set "
            "spec.trainer.checkpoint.uri to an object store (s3://, gs://, az://)"
        )
    mount = spec.storage.mount_path.rstrip("/")
    path = None if uri is None else uri.removeprefix("file://")
    if path is None or path == mount or path.startswith(f"{mount}/"):
        return None
    return (
        f"spec.trainer.checkpoint.uri {uri} is outside the claim mounted at {mount}: the "
        "checkpoints and the exported policy are deleted with the Ray cluster; put them under "
        f"{mount}/ or in an object store"
    )


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


def head_grace_period_seconds(job: RLJob, settings: OperatorSettings) -> int:
    """The head pod's terminationGracePeriodSeconds: the driver's checkpoint grace, then time for
    Ray to stop; never less than the operator's setting."""
    grace = job.spec.trainer.checkpoint.grace_period_seconds + RAY_STOP_MARGIN_SECONDS
    return max(settings.termination_grace_period_seconds, math.ceil(grace))
