"""The names and labels of a job's children.

Every child has a fixed name (`child_names`; the RayCluster's is shortened where KubeRay would
refuse the job's, and names its head Service), and the labels `app.kubernetes.io/managed-by:
kuberl` and `kuberl.io/job: <job>`; the job's own labels are copied first, so they can never
override those, and labels under `kuberl.io/` and `ray.io/` (the keys kuberl and KubeRay select
by) are not copied at all.

Fixed names can be taken: anyone may create an object under a name a job's child needs before the
job exists. The operator reads each child before it acts on one and leaves alone what the job does
not own (`child_refs` lists what it reads). It may not read Secrets, though, so the job's Ray auth
Secret is named with a digest of the operator's key (`auth_secret_name`): a name nobody else can
know beforehand, and so nobody else can hold.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any, NamedTuple

from kuberl_operator.constants import (
    HEAD_SERVICE_SUFFIX,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_RAY_CLUSTER_NAME_LENGTH,
    RAY_API_VERSION,
    RAY_AUTH_SECRET_SUFFIX,
    RESERVED_LABEL_PREFIXES,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob

Object = dict[str, Any]


class ChildNames(NamedTuple):
    """The fixed names of a job's children (all in the job's namespace)."""

    ray_cluster: str
    head_service: str
    """The head's Service, which the RayCluster names (headGroupSpec.headService) and the operator
    dials for the Ray Jobs API and the driver's metrics."""
    auth_secret: str
    """The Ray auth Secret's name where no key names it (`auth_secret_name`)."""
    job_config: str
    head_pdb: str
    network_policy: str
    storage_claim: str
    """The claim created for spec.storage.size (`job_claim_name`)."""


# Characters of the digest that tells apart the clusters of long job names with a common prefix.
_DIGEST_LENGTH = 5


def ray_cluster_name(job_name: str) -> str:
    """The RayCluster of a job: named like the job where KubeRay accepts the name (at most
    MAX_RAY_CLUSTER_NAME_LENGTH characters), else the name's start, '-' and a digest of the whole
    name (`<first 47 characters>-k3x9q`): a function of the name alone, so an operator restarted
    finds the same cluster, and two long names that share their start get two clusters."""
    if len(job_name) <= MAX_RAY_CLUSTER_NAME_LENGTH:
        return job_name
    digest = hashlib.sha256(job_name.encode()).digest()
    suffix = _lower_base32(digest)[:_DIGEST_LENGTH]
    prefix = job_name[: MAX_RAY_CLUSTER_NAME_LENGTH - _DIGEST_LENGTH - 1].rstrip("-")
    return f"{prefix}-{suffix}"


def _lower_base32(digest: bytes) -> str:
    # Base32 in lower case is letters and digits only: a DNS-1035 label's characters.
    return base64.b32encode(digest).decode().lower().rstrip("=")


def keyed_digest(settings: OperatorSettings, *parts: str) -> bytes | None:
    """HMAC-SHA256 of the settings' ray_auth_key over `parts`, one per line (no part of a
    Kubernetes name holds a newline, so different parts never give one message); None without a
    key."""
    if settings.ray_auth_key is None:
        return None
    key = settings.ray_auth_key.get_secret_value().encode()
    return hmac.new(key, "\n".join(parts).encode(), hashlib.sha256).digest()


def job_uid(job: RLJob) -> str | None:
    """The job's UID, as Kubernetes gave it (None for a manifest not yet created)."""
    return (job.metadata.model_extra or {}).get("uid")


# Characters of the key's digest in the Ray auth Secret's name: 50 bits nobody can guess.
_KEYED_LENGTH = 10
# What the digest in the Secret's name is of, beside the job's identity (the token itself is the
# digest of the identity alone: builders.ray_auth_token).
_AUTH_SECRET_NAME_PURPOSE = "ray-auth-secret-name"


def auth_secret_name(job: RLJob, settings: OperatorSettings) -> str:
    """The Secret holding the job's Ray auth token: `<job>-ray-auth-<digest>`, the digest of the
    operator's key over the job's namespace, name and UID, where the settings hold a key; else
    (an operator run by hand, which reads its Secrets back and checks whose they are; `kuberl
    render`, which has no UID) `<job>-ray-auth`."""
    plain = child_names(job).auth_secret
    uid = job_uid(job)
    namespace = job.metadata.namespace or "default"
    digest = uid and keyed_digest(settings, _AUTH_SECRET_NAME_PURPOSE, namespace, job.name, uid)
    return f"{plain}-{_lower_base32(digest)[:_KEYED_LENGTH]}" if digest else plain


class ChildRef(NamedTuple):
    """Where one of a job's children lives in the API, and its name."""

    kind: str
    api_version: str
    plural: str
    name: str
    keyed: bool = False
    """Named with the operator's key (the Ray auth Secret, which the operator may not read): no
    one else can hold the name, so it is not looked for."""


def child_refs(job: RLJob, settings: OperatorSettings) -> tuple[ChildRef, ...]:
    """Every child of the job, in creation order (that of builders.build_children)."""
    names, keyed = child_names(job), settings.ray_auth_key is not None
    storage = job.spec.storage
    claim = ChildRef("PersistentVolumeClaim", "v1", "persistentvolumeclaims", names.storage_claim)
    return (
        *([claim] if storage and storage.size else []),
        ChildRef("Secret", "v1", "secrets", auth_secret_name(job, settings), keyed=keyed),
        ChildRef("ConfigMap", "v1", "configmaps", names.job_config),
        ChildRef("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies", names.network_policy),
        ChildRef("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", names.head_pdb),
        ChildRef("RayCluster", RAY_API_VERSION, "rayclusters", names.ray_cluster),
    )


def job_claim_name(job: RLJob) -> str | None:
    """The claim the head mounts at spec.storage.mountPath: the user's (persistentVolumeClaim) or
    the job's own (created for size); None without one."""
    storage = job.spec.storage
    if storage is None or not storage.mounts_claim:
        return None
    claim = storage.persistent_volume_claim
    return claim.claim_name if claim else child_names(job).storage_claim


def head_service_name(cluster: str) -> str:
    """The head Service of the RayCluster `cluster` (at most 62 characters: a valid Service
    name)."""
    return f"{cluster}{HEAD_SERVICE_SUFFIX}"


def child_names(job: RLJob) -> ChildNames:
    return child_names_of(job.name)


def child_names_of(job_name: str) -> ChildNames:
    """The names of the children of the job named `job_name` (they depend on nothing else)."""
    # Names that are DNS subdomains (up to 253 characters) take the job's name whole; the
    # RayCluster's (and so its Services' and pods') must be shorter (ray_cluster_name).
    cluster = ray_cluster_name(job_name)
    return ChildNames(
        ray_cluster=cluster,
        head_service=head_service_name(cluster),
        auth_secret=f"{job_name}{RAY_AUTH_SECRET_SUFFIX}",
        job_config=f"{job_name}-job",
        head_pdb=f"{job_name}-head",
        network_policy=f"{job_name}-ray",
        storage_claim=f"{job_name}-storage",
    )


def child_labels(job: RLJob) -> dict[str, str]:
    """The job's labels, minus the reserved and the Kueue ones, then the operator's own."""
    copied = {
        key: value
        for key, value in job.metadata.labels.items()
        if not key.startswith(RESERVED_LABEL_PREFIXES) and key != KUEUE_QUEUE_LABEL
    }
    return {**copied, MANAGED_BY_LABEL: MANAGED_BY, JOB_LABEL: job.name}


def child_metadata(job: RLJob, name: str, labels: dict[str, str]) -> Object:
    metadata: Object = {"name": name}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    return metadata | {"labels": labels}
