"""spec.storage: the PersistentVolumeClaim (the user's, or one the operator creates for the job) or
object-store Secret that keeps the driver's run directory and checkpoints, and the mount paths a
claim may not take."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from kuberl_contract.config import Spec
from kuberl_operator.constants import DEFAULT_CHECKPOINT_MOUNT_PATH
from kuberl_operator.spec.formats import DNS_SUBDOMAIN_PATTERN, MOUNT_PATH_PATTERN, Quantity


class PersistentVolumeClaimRef(Spec):
    """A PersistentVolumeClaim in the job's namespace."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the claim. It must allow writes (the driver writes its run directory there), and
    ReadWriteMany lets a replacement head mount it while the old one is still terminating."""


class SecretRef(Spec):
    """A Secret in the job's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the Secret."""


# Directories of the image itself (and of the kernel's pseudo-filesystems): a volume mounted there
# would replace the programs and settings the head runs with (or hide /proc, /dev, /sys), and a
# claim other pods can write would let them change what runs in the head, next to its secrets.
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/kuberl",  # the trainer image's virtual environment
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
# Paths below a system path that are data, not the image's own files: /var/lib/<name> is where
# services keep their state.
DATA_PATHS_UNDER_SYSTEM = ("/var/lib/",)
# Ray keeps its session (sockets, logs, spilled objects) in /tmp/ray: a volume there, or over all
# of /tmp, would put Ray's sockets on the claim. Other paths below /tmp are fine.
RAY_TEMP_PATHS = ("/tmp", "/tmp/ray")


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def check_mount_path(path: str) -> str:
    """A normalized absolute path outside the image's system directories (the pattern has already
    ruled out relative paths, '//' and '/' itself)."""
    hint = f"such as {DEFAULT_CHECKPOINT_MOUNT_PATH} (the default)"
    segments = path.rstrip("/").split("/")[1:]
    if any(segment in (".", "..") for segment in segments):
        raise ValueError(
            f"{path!r} has '.' or '..' segments, which the kubelet resolves ('/..' is '/'); write "
            f"the directory itself, {hint}"
        )
    normalized = path.rstrip("/")
    for system in SYSTEM_PATHS:
        if _under(normalized, system) and not any(
            normalized.startswith(data) and normalized != data.rstrip("/")
            for data in DATA_PATHS_UNDER_SYSTEM
        ):
            where = path if normalized == system else f"{path} is under {system}, which"
            raise ValueError(
                f"{where} holds the image's own files or the kernel's; mounting a volume there "
                f"would replace them: choose a directory of its own, {hint}"
            )
    if normalized == RAY_TEMP_PATHS[0] or _under(normalized, RAY_TEMP_PATHS[1]):
        raise ValueError(
            f"{path} holds Ray's session directory (/tmp/ray: its sockets and logs); choose "
            f"another directory, {hint}"
        )
    return path


class Storage(Spec):
    """Where the driver keeps its run directory and checkpoints, so that they outlive its pod.

    Without storage, a job whose head is lost (a failed node, a deleted pod) restarts from
    scratch unless trainer.checkpoint.uri points at storage outside the pod."""

    size: Quantity | None = None
    """Have the operator create a claim for this job alone, of this size (such as 5Gi), named
    <job>-storage, ReadWriteOnce, and mount it at mountPath. The RLJob owns it: it is kept across
    the job's attempts and deleted with the job. Jobs never share it, so two jobs whose heads land
    on different nodes never wait for each other's volume."""

    storage_class_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN
    )
    """StorageClass of the claim created for `size`. Unset: the cluster's default class."""

    persistent_volume_claim: PersistentVolumeClaimRef | None = None
    """Mount this existing claim into the head: the driver's run directory (progress and
    checkpoints) is <mountPath>/<job name>. Jobs may share a claim only where it is ReadWriteMany;
    a ReadWriteOnce claim holds the heads of all its jobs to one node."""

    mount_path: Annotated[str, AfterValidator(check_mount_path)] = Field(
        DEFAULT_CHECKPOINT_MOUNT_PATH, max_length=1024, pattern=MOUNT_PATH_PATTERN
    )
    """Where the head mounts the claim (size or persistentVolumeClaim): an absolute path without
    '.' or '..' segments, outside the image's system directories (/bin, /boot, /dev, /etc, /lib,
    /lib64, /opt/kuberl, /proc, /root, /run, /sbin, /sys, /usr, and /var except below /var/lib/)
    and outside Ray's /tmp/ray (and /tmp itself)."""

    secret_ref: SecretRef | None = None
    """Credentials for an object store (such as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY),
    given to the driver as environment variables, one per key of this Secret. The operator must
    allow the Secret (its allowed_secrets setting)."""

    @property
    def mounts_claim(self) -> bool:
        """The head mounts a claim at mountPath: the user's or the job's own."""
        return self.persistent_volume_claim is not None or self.size is not None

    @model_validator(mode="after")
    def _one_kind_of_storage(self) -> Storage:
        kinds = (self.size, self.persistent_volume_claim, self.secret_ref)
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError(
                "set one of size (a claim the operator creates for the job), "
                "persistentVolumeClaim (an existing claim mounted into the head) or secretRef "
                "(object-store credentials)"
            )
        if self.storage_class_name is not None and self.size is None:
            raise ValueError(
                "storageClassName: only applies to the claim created for size; set size, or "
                "remove storageClassName"
            )
        if self.secret_ref and self.mount_path != DEFAULT_CHECKPOINT_MOUNT_PATH:
            raise ValueError("mountPath: only applies to a claim (size or persistentVolumeClaim)")
        return self
