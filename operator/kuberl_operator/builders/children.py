"""Every object the operator creates for an attempt (`build_children`), and the small ones besides
the RayCluster.

The children of a job:
- with spec.storage.size, a `PersistentVolumeClaim` for the job alone (`build_storage_claim`), kept
  across attempts and deleted with the job (its ownerReference, like every child's),
- a KubeRay `RayCluster` named like the job (`build_ray_cluster`, ray_cluster.py),
- a `Secret` with the Ray auth token (`build_auth_secret`, named by `auth_secret_name`; the caller
  passes the token, derived by `ray_auth_token` from the operator's key and the job's identity),
- a `ConfigMap` with the job's manifest (`build_job_config_map`), mounted into the head at
  /etc/kuberl/job.yaml for `kuberl train`,
- a `PodDisruptionBudget` that, unless spec.learner.disruptionBudget says otherwise, lets no
  voluntary disruption (a drain, an upgrade) take the head while it is healthy
  (`build_pod_disruption_budget`),
- a `NetworkPolicy` around the job's Ray pods (`build_network_policy`): Ray's ports are open only
  among them, the Ray Jobs API (on the dashboard's port) and the driver's metrics to the operator
  (which also relays the driver's output to the kuberl API: log_relay.py), and the metrics alone
  to Prometheus.
"""

from __future__ import annotations

import base64

import yaml

from kuberl_operator.builders.names import (
    Object,
    auth_secret_name,
    child_labels,
    child_metadata,
    child_names,
    keyed_digest,
)
from kuberl_operator.builders.ray_cluster import build_ray_cluster
from kuberl_operator.builders.warm_start import WarmStartSource, resolved_manifest
from kuberl_operator.constants import (
    JOB_CONFIG_FILE,
    JOB_LABEL,
    NAMESPACE_NAME_LABEL,
    RAY_AUTH_TOKEN_SECRET_KEY,
    RAY_CLUSTER_LABEL,
    RAY_DASHBOARD_PORT,
    RAY_HEAD_NODE_TYPE,
    RAY_NODE_TYPE_LABEL,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob


def ray_auth_token(settings: OperatorSettings, namespace: str, name: str, uid: str) -> str | None:
    """The Ray auth token of the job `namespace/name` with UID `uid`: HMAC-SHA256 of the settings'
    ray_auth_key over the three, so the operator (restarted or not) computes it again instead of
    reading it back from the job's Secret, and a job recreated under the same name gets another.
    None without a key (the caller then generates a random token and reads it back)."""
    digest = keyed_digest(settings, namespace, name, uid)
    return None if digest is None else base64.urlsafe_b64encode(digest).decode().rstrip("=")


def build_auth_secret(job: RLJob, settings: OperatorSettings, token: str) -> Object:
    """The Secret holding the Ray auth token of the job's cluster. Immutable: Ray reads the token
    once per process, so changing it under a running cluster would split it in two."""
    if not token:
        raise ValueError("the Ray auth token is empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(job, auth_secret_name(job, settings), child_labels(job)),
        "type": "Opaque",
        "immutable": True,
        "stringData": {RAY_AUTH_TOKEN_SECRET_KEY: token},
    }


def build_job_config_map(job: RLJob, warm_start: WarmStartSource | None = None) -> Object:
    """The ConfigMap holding the job's manifest for `kuberl train` in the head: the spec as the
    user wrote it (defaults left to the trainer's models, so a trainer image with an older kuberl
    still reads every job that uses no newer field), no status, and of the metadata only the name
    and namespace (the rest changes on every write). A warmStart.job is replaced by the checkpoint
    location it resolved to (`warm_start`)."""
    manifest = job.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude={"status"})
    namespace = job.metadata.namespace
    manifest["metadata"] = {"name": job.name} | ({"namespace": namespace} if namespace else {})
    if warm_start is not None:
        manifest = resolved_manifest(manifest, warm_start)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, child_names(job).job_config, child_labels(job)),
        "data": {JOB_CONFIG_FILE: yaml.safe_dump(manifest, sort_keys=False)},
    }


def build_pod_disruption_budget(job: RLJob) -> Object:
    """The head pod's PodDisruptionBudget, selecting it by the labels KubeRay gives it: with
    spec.learner.disruptionBudget.maxUnavailable 0 (the default) it keeps drains and evictions off
    the healthy head; with 1 it lets them through (the job resumes from its checkpoint). An
    unhealthy head may always be evicted: it is not running the job, and blocking a node drain on
    it would help nobody."""
    selector = {
        RAY_CLUSTER_LABEL: child_names(job).ray_cluster,
        RAY_NODE_TYPE_LABEL: RAY_HEAD_NODE_TYPE,
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(job, child_names(job).head_pdb, child_labels(job)),
        "spec": {
            "maxUnavailable": job.spec.learner.disruption_budget.max_unavailable,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_storage_claim(job: RLJob) -> Object:
    """The claim of spec.storage.size: ReadWriteOnce, since only the job's head mounts it (a
    replacement head waits for the old one to let go of the volume, as it must not write beside
    it anyway), of the storageClassName given or the cluster's default."""
    storage = job.spec.storage
    if storage is None or storage.size is None:
        raise ValueError("spec.storage.size is unset: the job has no claim of its own to create")
    spec: Object = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name is not None:
        spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": child_metadata(job, child_names(job).storage_claim, child_labels(job)),
        "spec": spec,
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
    - the driver's metrics port, from Prometheus: pods of settings.prometheus_namespace (the
      operator's namespace when that is empty) that carry settings.prometheus_pod_labels (any pod
      there when those are empty).
    Anything else (the dashboard from other pods, the kuberl API's included, which reads drivers'
    output through the operator's log relay; Ray's client port; Ray's own metrics) is refused.
    Egress is left alone: drivers and workers fetch packages, environments and checkpoints from
    wherever the job says. Traffic from the node itself (kubelet probes) is not governed by
    NetworkPolicies on the usual network plugins."""
    ray_pods = {"podSelector": {"matchLabels": ray_pod_selector(job)}}
    release_namespace = {"matchLabels": {NAMESPACE_NAME_LABEL: settings.operator_namespace}}
    operator = {
        "namespaceSelector": release_namespace,
        "podSelector": {"matchLabels": dict(settings.operator_pod_labels)},
    }
    scraper = {
        "namespaceSelector": {
            "matchLabels": {
                NAMESPACE_NAME_LABEL: settings.prometheus_namespace or settings.operator_namespace
            }
        },
        "podSelector": {"matchLabels": dict(settings.prometheus_pod_labels)},
    }
    metrics = settings.trainer_metrics_port
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(job, child_names(job).network_policy, child_labels(job)),
        "spec": {
            "podSelector": {"matchLabels": ray_pod_selector(job)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [ray_pods]},
                {"from": [operator], "ports": _tcp(RAY_DASHBOARD_PORT, metrics)},
                {"from": [scraper], "ports": _tcp(metrics)},
            ],
        },
    }


def build_children(
    job: RLJob,
    settings: OperatorSettings,
    attempt: int,
    token: str,
    warm_start: WarmStartSource | None = None,
) -> list[Object]:
    """Every object the operator creates for an attempt, in creation order (that of
    names.child_refs): what the Ray pods mount, the policy that fences them in and the head's
    disruption budget come before the cluster, so that a name found taken on the way stops the
    attempt before any Ray pod exists. `warm_start`: where the checkpoint of the job's
    warmStart.job is (warm_start.cluster_warm_start_source), for the manifest and the head."""
    own_claim = job.spec.storage is not None and job.spec.storage.size is not None
    return [
        *([build_storage_claim(job)] if own_claim else []),
        build_auth_secret(job, settings, token),
        build_job_config_map(job, warm_start),
        build_network_policy(job, settings),
        build_pod_disruption_budget(job),
        build_ray_cluster(job, settings, attempt, warm_start=warm_start),
    ]
