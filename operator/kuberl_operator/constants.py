"""Names of the RLJob resource and the labels around it, defined once and imported everywhere."""

from __future__ import annotations

GROUP = "kuberl.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RLJob"
PLURAL = "rljobs"
SINGULAR = "rljob"
SHORT_NAMES = ("rlj",)
CATEGORIES = ("kuberl",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# Kueue admits a job whose metadata carries this label into the named LocalQueue.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
"""Kueue's per-job opt-in to elastic workloads (ElasticJobsViaWorkloadSlices), value "true"."""

# GKE's node label naming the GPU model; spec.learner.gpuType selects nodes by it.
GPU_TYPE_LABEL = "cloud.google.com/gke-accelerator"

# The Ray version the trainer image is built with (pinned in pyproject.toml).
DEFAULT_RAY_VERSION = "2.60.0"

# Job names become Ray cluster, Service and Pod names, which KubeRay requires to be DNS-1035 labels.
MAX_JOB_NAME_LENGTH = 63
# KubeRay (since v1.4) refuses RayClusters with longer names, so that `<name>-serve-svc`, its
# longest Service name, fits in 63 characters; a longer job name gets a shortened cluster name.
MAX_RAY_CLUSTER_NAME_LENGTH = 53
# KubeRay's head Service is `<cluster>-head-svc` unless the RayCluster names it; the operator names
# it so, explicitly (KubeRay before v1.4 cut long default names from the front instead).
HEAD_SERVICE_SUFFIX = "-head-svc"

# --- The objects the operator creates -----------------------------------------------------------

# Every child carries these; builders apply them after the user's labels, so a user label cannot
# detach a child from its job (or the operator's selectors from their objects).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kuberl"
KEPT_FILES_ANNOTATION = "kuberl.io/kept-run-directory"
"""On the job the local API's delete answers: where its run directory (checkpoints, progress,
exported policy) was kept, for a job deleted without purge."""
JOB_LABEL = "kuberl.io/job"
# Which attempt (1, 2, ...) of the job the Ray cluster and its pods belong to.
ATTEMPT_LABEL = "kuberl.io/attempt"
# User labels under these prefixes are not copied to children: kuberl and KubeRay own them.
RESERVED_LABEL_PREFIXES = ("kuberl.io/", "ray.io/")
# Pod annotations a job may not set: the operator's and KubeRay's own (KubeRay reads some, such as
# ray.io/overwrite-container-cmd), and the legacy security annotations, since the pods' security
# context is the operator's to set.
RESERVED_ANNOTATION_PREFIXES = (
    *RESERVED_LABEL_PREFIXES,
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)

# Node labels (and taint keys) of control-plane nodes, which run the cluster itself: no RLJob pod
# may select or tolerate them.
CONTROL_PLANE_NODE_LABELS = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)

# The label Kubernetes (>= 1.22) sets on every namespace to its name: what NetworkPolicies select a
# namespace by.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# The labels KubeRay puts on the pods of a RayCluster (ray-operator/controllers/ray/utils).
RAY_API_VERSION = "ray.io/v1"  # KubeRay's RayCluster
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_HEAD_NODE_TYPE = "head"

# Worker groups of the RayCluster; fixed names, so the operator can find and scale them.
ROLLOUT_GROUP = "rollout"
ROLLOUT_ON_DEMAND_GROUP = "rollout-on-demand"

# Ray token authentication, as KubeRay >= 1.6 and Ray >= 2.52 spell it: the Secret's data key and
# the environment variables every Ray process and client reads.
RAY_AUTH_TOKEN_SECRET_KEY = "auth_token"
# Each job's token Secret is <job><RAY_AUTH_SECRET_SUFFIX>; the chart's key the tokens derive from
# is in <release><RAY_AUTH_KEY_SECRET_SUFFIX>, and the log relay's token (log_relay.py) in
# <release><LOG_RELAY_SECRET_SUFFIX>. No job may reference any of them (reach.py).
RAY_AUTH_SECRET_SUFFIX = "-ray-auth"
RAY_AUTH_KEY_SECRET_SUFFIX = "-ray-auth-key"
LOG_RELAY_SECRET_SUFFIX = "-log-relay"
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"

GPU_RESOURCE = "nvidia.com/gpu"

# Where the head finds the job's manifest (a ConfigMap volume) and, by default, its checkpoints.
JOB_CONFIG_DIR = "/etc/kuberl"
JOB_CONFIG_FILE = "job.yaml"
JOB_CONFIG_PATH = f"{JOB_CONFIG_DIR}/{JOB_CONFIG_FILE}"
DEFAULT_CHECKPOINT_MOUNT_PATH = "/kuberl/checkpoints"

# The trainer image's non-root user and group (deploy/docker/Dockerfile): the Ray pods run as them.
TRAINER_UID = 10001
TRAINER_GID = 10001
# Where Ray's object store lives in its pods (a memory-backed emptyDir).
SHARED_MEMORY_PATH = "/dev/shm"

# The Ray ports the head declares (KubeRay's defaults). The Jobs API is served on the dashboard
# port; the head Service is ClusterIP, so none of them leaves the cluster.
RAY_GCS_PORT = 6379
RAY_DASHBOARD_PORT = 8265
RAY_METRICS_PORT = 8080

# --- Status: the CRD every job reports on (the reasons are spec.Reason) -----------------------

# KubeRay's RayCluster CRD, whose absence every job reports (ConditionType.KUBERAY_AVAILABLE).
RAYCLUSTER_CRD_NAME = "rayclusters.ray.io"

# The longest wait between restarts: backoffSeconds doubles per restart up to this (or up to
# backoffSeconds itself, when that is longer).
MAX_BACKOFF_SECONDS = 3600
# How often a job waiting for KubeRay's CRD looks again.
KUBERAY_RECHECK_SECONDS = 60
# A job whose RayCluster is missing believes KubeRay installed only if it was found this recently:
# uninstalling KubeRay deletes every RayCluster with its CRD.
KUBERAY_CONFIRM_SECONDS = 5
# A job whose children's names are still held by those of an earlier RLJob of its name (deleted,
# their ownerReference names its UID) looks again this often while the garbage collector removes
# them.
LEFTOVER_RECHECK_SECONDS = 2
# The custom Ray resource the spot group's pods advertise, one unit each (each pod is sized for
# one rollout worker): `rolloutWorkers.rayResources: {spot: 1}` pins the workers to spot pods, one
# per pod. The on-demand fallback group does not advertise it.
SPOT_RAY_RESOURCE = "spot"

# --- The operator's Prometheus metrics (metrics.py serves them; the dashboards and alert rules in
# deploy/ import these names) --------------------------------------------------------------------

METRIC_JOBS = "kuberl_jobs"
"""Gauge: RLJobs by namespace and phase. One metric, exported by whoever runs the jobs: the operator
on a cluster, the API's local backend on one machine (the API on the kubernetes backend leaves it to
the operator)."""
METRIC_JOB_PHASE = "kuberl_operator_job_phase"
"""Gauge: 1 for each RLJob's current phase."""
METRIC_JOB_PHASE_SECONDS = "kuberl_operator_job_phase_seconds_total"
"""Counter: seconds each RLJob spent in each phase."""
METRIC_ROLLOUT_WORKERS = "kuberl_operator_rollout_workers"
"""Gauge: running rollout worker pods of each RLJob, by capacity (spot or on-demand)."""
METRIC_ROLLOUT_WORKER_SECONDS = "kuberl_operator_rollout_worker_seconds_total"
"""Counter: seconds of running rollout worker pods of each RLJob, by capacity."""
METRIC_RECONCILE_DURATION = "kuberl_operator_reconcile_duration_seconds"
"""Histogram: time one reconcile of one RLJob takes."""
METRIC_RECONCILE_ERRORS = "kuberl_operator_reconcile_errors_total"
"""Counter: reconciles that failed (and are retried), by namespace."""
METRIC_PREEMPTIONS = "kuberl_operator_preemptions_total"
"""Counter: preempted pods of each RLJob."""
METRIC_RESTARTS = "kuberl_operator_restarts_total"
"""Counter: restarts of each RLJob after failures."""
METRIC_JOB_COST = "kuberl_job_cost_dollars_total"
"""Counter: dollars each RLJob has cost (its status.cost), by capacity (spot or on-demand)."""
METRIC_JOB_ON_DEMAND_EQUIVALENT = "kuberl_job_on_demand_equivalent_dollars_total"
"""Counter: what each RLJob's pod-hours would have cost on on-demand nodes."""
METRIC_JOB_GPU_HOURS = "kuberl_job_gpu_hours_total"
"""Counter: GPU-hours of each RLJob's pods."""
METRIC_JOB_WORKER_HOURS = "kuberl_job_worker_hours_total"
"""Counter: rollout worker pod-hours of each RLJob."""
METRIC_JOB_COST_AT_TARGET = "kuberl_job_cost_at_target_dollars"
"""Gauge: dollars each RLJob had cost when it first reached its target return (once it has)."""
METRIC_JOB_BUDGET = "kuberl_job_budget_dollars"
"""Gauge: each RLJob's spec.budget.maxDollars (where it sets one)."""
