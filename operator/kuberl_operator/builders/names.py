"""The names and labels of a job's children.

Every child has a fixed name (`child_names`; the RayCluster's is shortened where KubeRay would
refuse the job's, and names its head Service), and the labels `app.kubernetes.io/managed-by:
kuberl` and `kuberl.io/job: <job>`; the job's own labels are copied first, so they can never
override those, and labels under `kuberl.io/` and `ray.io/` (the keys kuberl and KubeRay select
by) are not copied at all.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, NamedTuple

from kuberl_operator.constants import (
    HEAD_SERVICE_SUFFIX,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_RAY_CLUSTER_NAME_LENGTH,
    RAY_AUTH_SECRET_SUFFIX,
    RESERVED_LABEL_PREFIXES,
)
from kuberl_operator.spec import RLJob

Object = dict[str, Any]


class ChildNames(NamedTuple):
    """The fixed names of a job's children (all in the job's namespace)."""

    ray_cluster: str
    head_service: str
    """The head's Service, which the RayCluster names (headGroupSpec.headService) and the operator
    dials for the Ray Jobs API and the driver's metrics."""
    auth_secret: str
    job_config: str
    head_pdb: str
    network_policy: str


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
    # Base32 in lower case is letters and digits only: still a DNS-1035 label after the '-'.
    suffix = base64.b32encode(digest).decode().lower()[:_DIGEST_LENGTH]
    prefix = job_name[: MAX_RAY_CLUSTER_NAME_LENGTH - _DIGEST_LENGTH - 1].rstrip("-")
    return f"{prefix}-{suffix}"


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
