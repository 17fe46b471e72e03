"""Pure builders: an RLJob and the operator's settings in, the Kubernetes objects it runs on out.

No I/O and no environment reads: handlers call these, adopt the results (`kopf.adopt`) and apply
them, and `kuberl render` prints them.

Where each question is answered:
- names.py: the fixed names of a job's children (a RayCluster name KubeRay accepts, and its head
  Service's; the Ray auth Secret's, keyed so nobody else can hold it), where each lives in the
  API (`child_refs`), and the labels every child carries.
- driver.py: the driver's submission id, entrypoint and run directory (and so its storage), and
  how the head stops it (the preStop hook and the head's grace period).
- warm_start.py: spec.trainer.warmStart on a server: relative paths refused, and where the
  checkpoint of a warmStart.job is (the other job's object store, or its claim mounted read-only).
- placement.py: where the Ray pods run: the head on on-demand nodes, rollout workers on each
  provider's spot nodes (selectors, tolerations, node affinity).
- capacity.py: the Ray resources each group advertises, how many rollout pods a job has, and the
  capacity the driver is told about.
- pods.py: the Ray containers and pod templates: resources, volumes, authentication environment,
  security context.
- drift.py: which spec fields were edited under a running attempt.
- ray_cluster.py: the RayCluster, its head and rollout groups, Kueue admission, Ray's token
  authentication.
- children.py: the job's own claim (spec.storage.size), the Secret, ConfigMap,
  PodDisruptionBudget and NetworkPolicy beside the RayCluster, and `build_children`, every object
  of an attempt in creation order.
- scaling.py: resizing a running cluster's rollout groups in place: the on-demand group that
  stands in for spot workers (and why the operator sizes it rather than Ray's autoscaler; how far
  to fall back is decided with the status: status/fallback.py), an elastic fleet scaled within
  its bounds; and the selector of the job's worker pods.

Each module imports only modules listed above it, so the list reads from the smallest pieces to the
objects made of them.
"""

from kuberl_operator.builders.capacity import ray_capacity
from kuberl_operator.builders.children import (
    build_auth_secret,
    build_children,
    build_job_config_map,
    build_network_policy,
    build_pod_disruption_budget,
    build_storage_claim,
    ray_auth_token,
)
from kuberl_operator.builders.drift import stale_spec
from kuberl_operator.builders.driver import (
    RAY_STOP_MARGIN_SECONDS,
    STOP_DRIVER,
    driver_entrypoint,
    run_dir,
    submission_id,
    submission_id_of,
)
from kuberl_operator.builders.names import (
    ChildRef,
    auth_secret_name,
    child_names,
    child_names_of,
    child_refs,
    head_service_name,
    job_claim_name,
    job_uid,
    ray_cluster_name,
)
from kuberl_operator.builders.ray_cluster import build_ray_cluster
from kuberl_operator.builders.scaling import scale_on_demand, scale_rollout, worker_pods_selector
from kuberl_operator.builders.warm_start import (
    WARM_START_MOUNT_PATH,
    WarmStartSource,
    WarmStartUnavailable,
    cluster_warm_start_source,
    served_warm_start_problems,
    source_job_problem,
)

__all__ = [
    "RAY_STOP_MARGIN_SECONDS",
    "STOP_DRIVER",
    "WARM_START_MOUNT_PATH",
    "ChildRef",
    "WarmStartSource",
    "WarmStartUnavailable",
    "auth_secret_name",
    "build_auth_secret",
    "build_children",
    "build_job_config_map",
    "build_network_policy",
    "build_pod_disruption_budget",
    "build_ray_cluster",
    "build_storage_claim",
    "child_names",
    "child_names_of",
    "child_refs",
    "cluster_warm_start_source",
    "driver_entrypoint",
    "head_service_name",
    "job_claim_name",
    "job_uid",
    "ray_auth_token",
    "ray_capacity",
    "ray_cluster_name",
    "run_dir",
    "scale_on_demand",
    "scale_rollout",
    "served_warm_start_problems",
    "source_job_problem",
    "stale_spec",
    "submission_id",
    "submission_id_of",
    "worker_pods_selector",
]
