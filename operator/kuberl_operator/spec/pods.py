"""spec.pods: labels, annotations and ServiceAccount of every pod of the job's Ray cluster, and
the keys the operator and KubeRay keep for themselves."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from kuberl_contract.config import Spec
from kuberl_operator.constants import (
    KUEUE_QUEUE_LABEL,
    MANAGED_BY_LABEL,
    RESERVED_ANNOTATION_PREFIXES,
    RESERVED_LABEL_PREFIXES,
)
from kuberl_operator.spec.formats import DNS_SUBDOMAIN_PATTERN, LabelMap, is_qualified_key


def check_pod_labels(labels: dict[str, str]) -> dict[str, str]:
    """Refuses the labels the operator and KubeRay select pods by: a job's own value there would
    detach its pods from their job, or attach them to another's."""
    for key in labels:
        if key.startswith(RESERVED_LABEL_PREFIXES) or key == MANAGED_BY_LABEL:
            raise ValueError(
                f"{key!r} is a label the operator or KubeRay sets on the job's pods and selects "
                f"them by (every key under {', '.join(RESERVED_LABEL_PREFIXES)} and "
                f"{MANAGED_BY_LABEL}); remove it, or use a key of your own"
            )
        if key == KUEUE_QUEUE_LABEL:
            raise ValueError(
                f"{key!r} queues the job in Kueue only as a label of the RLJob itself: move it to "
                "metadata.labels"
            )
    return labels


def check_pod_annotations(annotations: dict[str, str]) -> dict[str, str]:
    """Refuses annotations KubeRay or the operator act on, and the legacy security annotations
    (the pods' security context is the operator's to set)."""
    for key in annotations:
        if not is_qualified_key(key):
            raise ValueError(
                f"{key!r} is not a valid annotation key: an optional DNS-subdomain prefix and '/', "
                "then at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit"
            )
        if key.startswith(RESERVED_ANNOTATION_PREFIXES):
            raise ValueError(
                f"{key!r} is reserved: annotations under {', '.join(RESERVED_ANNOTATION_PREFIXES)} "
                "are the operator's, KubeRay's or the pods' security context's; remove it"
            )
    return annotations


class Pods(Spec):
    """Metadata and identity of every pod of the job's Ray cluster (the head and each rollout
    worker), as KubeRay users set them in a RayCluster's pod templates."""

    labels: Annotated[LabelMap, AfterValidator(check_pod_labels)] = Field(default_factory=dict)
    """Labels added to every pod (for cost allocation, policies or monitoring). The labels the
    operator and KubeRay select pods by (keys under kuberl.io/ and ray.io/, and
    app.kubernetes.io/managed-by) are refused. The RLJob's own metadata.labels reach the pods
    too."""

    annotations: Annotated[dict[str, str], AfterValidator(check_pod_annotations)] = Field(
        default_factory=dict
    )
    """Annotations added to every pod (a service mesh's opt-out, a log shipper's parser). Keys
    under kuberl.io/ and ray.io/ and the legacy AppArmor and seccomp annotations are refused."""

    service_account_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN
    )
    """ServiceAccount of every pod, such as one bound to a cloud identity for the object store.
    It must be one the operator allows (its allowed_service_accounts setting). Unset: the
    namespace's default ServiceAccount, with no API token mounted into the pods."""
