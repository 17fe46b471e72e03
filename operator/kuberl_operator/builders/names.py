"""The names and labels of a job's children.

Every child has a fixed name (`child_names`) and the labels `app.kubernetes.io/managed-by: kuberl`
and `kuberl.io/job: <job>`; the job's own labels are copied first, so they can never override
those, and labels under `kuberl.io/` and `ray.io/` (the keys kuberl and KubeRay select by) are not
copied at all.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kuberl_operator.constants import (
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RAY_AUTH_SECRET_SUFFIX,
    RESERVED_LABEL_PREFIXES,
)
from kuberl_operator.spec import RLJob

Object = dict[str, Any]


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


def child_metadata(job: RLJob, name: str, labels: dict[str, str]) -> Object:
    metadata: Object = {"name": name}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    return metadata | {"labels": labels}
