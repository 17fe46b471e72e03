"""The operator's settings: read once at startup from `KUBERL_*` environment variables.

`OperatorSettings.from_env(os.environ)` is the only place the operator reads its environment;
everything else (the builders above all) receives the settings as an argument, so the same job
always builds the same objects.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from kuberl_contract.docstrings import Described
from kuberl_operator.constants import (
    GPU_TYPE_LABEL,
    JOB_CONFIG_DIR,
    RAY_DASHBOARD_PORT,
    TRAINER_GID,
    TRAINER_UID,
)
from kuberl_operator.cost import DEFAULT_PRICES, PriceTable
from kuberl_operator.spec import (
    DNS_LABEL_PATTERN,
    IMAGE_PATTERN,
    LABEL_KEY_PATTERN,
    LabelMap,
    Quantity,
)

ENV_PREFIX = "KUBERL_"


def parse_list(value: Any) -> Any:
    """`a,b,c` (an environment variable's form) as a tuple, blanks dropped; anything else
    unchanged."""
    if not isinstance(value, str):
        return value
    return tuple(filter(None, (part.strip() for part in value.split(","))))


def parse_labels(value: Any) -> Any:
    """`key=value,key=value` (as `kubectl -l` writes labels) as a dict; anything else unchanged."""
    if not isinstance(value, str):
        return value
    labels = {}
    for pair in parse_list(value):
        key, equals, label_value = pair.partition("=")
        if not equals:
            raise ValueError(f"{pair!r} is not key=value")
        labels[key.strip()] = label_value.strip()
    return labels


def parse_json(value: Any) -> Any:
    """A JSON document (an environment variable's form of a nested setting) decoded; anything
    else unchanged."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def check_prices(values: dict[str, Any]) -> dict[str, Any]:
    """The values unchanged, once PriceTable accepts them (its error names the key path)."""
    PriceTable.from_values(values)
    return values


Labels = Annotated[LabelMap, BeforeValidator(parse_labels)]
"""Labels, also accepted as `key=value,key=value` (an environment variable's form)."""


PriceValues = Annotated[dict[str, Any], BeforeValidator(parse_json), AfterValidator(check_prices)]
"""A price table as the chart's values write it (cost.PriceTable.from_values), also accepted as
JSON (an environment variable's form)."""

NAME_GLOB_PATTERN = r"^[a-z0-9*?\[\]!]([-a-z0-9.*?\[\]!]*)$"
IMAGE_PREFIX_PATTERN = r"^[^\s,]+$"

NameGlobs = Annotated[
    tuple[Annotated[str, Field(max_length=253, pattern=NAME_GLOB_PATTERN)], ...],
    BeforeValidator(parse_list),
]
"""Object names or fnmatch globs (`s3-credentials`, `ckpt-*`), also accepted as `a,b,c`."""

ImagePrefixes = Annotated[
    tuple[Annotated[str, Field(pattern=IMAGE_PREFIX_PATTERN)], ...], BeforeValidator(parse_list)
]
"""Image reference prefixes, also accepted as `a,b,c`."""


class InvalidSettings(ValueError):
    """An environment variable holds a value the operator cannot use; the message names it."""


class OperatorSettings(Described):
    """How the operator builds every job's objects; one value per operator process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trainer_image: str = Field("ghcr.io/kuberl/trainer:0.1.0", pattern=IMAGE_PATTERN)
    """Image of the Ray head and workers for jobs whose spec.image is empty (KUBERL_TRAINER_IMAGE).
    It must hold kuberl's trainer, the Ray version of spec.rayVersion, and procps (the head's
    preStop hook signals the driver with pkill)."""

    trainer_gpu_image: str = Field("ghcr.io/kuberl/trainer:0.1.0-cuda", pattern=IMAGE_PATTERN)
    """Image of the Ray head for jobs whose learner has GPUs and whose spec.image is empty
    (KUBERL_TRAINER_GPU_IMAGE): the trainer image's CUDA variant, with the same Python, Ray and
    kuberl as trainer_image, which the rollout workers keep."""

    watch_namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL_PATTERN)
    """The one namespace whose RLJobs the operator reconciles; empty means every namespace
    (KUBERL_WATCH_NAMESPACE)."""

    termination_grace_period_seconds: int = Field(60, ge=5, le=3600)
    """The least time a head pod gets between the stop signal and being killed: the driver must
    write its checkpoint within it (KUBERL_TERMINATION_GRACE_PERIOD_SECONDS). A job whose
    trainer.checkpoint.gracePeriodSeconds needs longer gets that plus a margin for Ray to stop.
    Spot notices are ~30 s on GCP and Azure, but the head runs on on-demand nodes, where drains
    honour this in full."""

    gpu_type_label: str = Field(GPU_TYPE_LABEL, pattern=LABEL_KEY_PATTERN)
    """Node label whose value is the GPU model that spec.learner.gpuType selects
    (KUBERL_GPU_TYPE_LABEL): cloud.google.com/gke-accelerator on GKE, nvidia.com/gpu.product where
    NVIDIA's GPU feature discovery labels the nodes (EKS, AKS, on-premises)."""

    workers_join_timeout_seconds: int = Field(900, ge=0, le=86_400)
    """Seconds a driver waits at start for the Ray nodes of its rollout workers to join (their pods
    may be Pending on spot capacity, then fall back to on-demand nodes) before it fails the attempt
    (KUBERL_WORKERS_JOIN_TIMEOUT_SECONDS). A request the job's Ray cluster can never satisfy fails
    the job at once instead."""

    fallback_pending_seconds: int = Field(120, ge=0, le=86_400)
    """Seconds spot rollout workers may stay Pending before the operator starts on-demand ones in
    their place (KUBERL_FALLBACK_PENDING_SECONDS)."""

    kueue_elastic_jobs: bool = False
    """Kueue runs with its ElasticJobsViaWorkloadSlices feature gate: a queued job whose fleet is
    elastic (rolloutWorkers.minReplicas and maxReplicas) has its RayCluster marked
    kueue.x-k8s.io/elastic-job and is scaled in place, Kueue admitting each scale-up as a new
    workload slice. Off, a queued job keeps the shape Kueue admitted, and a replicas edit applies
    on its next attempt (KUBERL_KUEUE_ELASTIC_JOBS)."""

    rollout_worker_memory: Quantity = "2Gi"
    """Memory request and limit of each rollout worker's pod, Ray's object store included
    (KUBERL_ROLLOUT_WORKER_MEMORY)."""

    trainer_metrics_port: int = Field(9464, ge=1024, le=65535)
    """Port on which the driver serves its Prometheus metrics in the head pod
    (KUBERL_TRAINER_METRICS_PORT)."""

    run_dir_root: str = Field("/kuberl/runs", pattern=r"^(/[^/:\s]+)+$")
    """Directory in the head pod (an emptyDir volume) holding the run directories of jobs without
    spec.storage.persistentVolumeClaim (KUBERL_RUN_DIR_ROOT)."""

    job_config_dir: str = Field(JOB_CONFIG_DIR, pattern=r"^(/[^/:\s]+)+$")
    """Directory in the head pod where the job's ConfigMap (its manifest, job.yaml) is mounted
    (KUBERL_JOB_CONFIG_DIR)."""

    ray_dashboard_url: str = Field(
        f"http://{{service}}.{{namespace}}.svc:{RAY_DASHBOARD_PORT}",
        pattern=r"^https?://\S+$",
    )
    """URL of a job's Ray Jobs API, with {service} (the head's Service, which the operator names
    in the RayCluster: <cluster>-head-svc), {cluster} (the RayCluster) and {namespace} filled in:
    the head's ClusterIP Service unless the operator reaches heads another way
    (KUBERL_RAY_DASHBOARD_URL)."""

    trainer_metrics_url: str = Field(
        "http://{service}.{namespace}.svc:{port}/metrics", pattern=r"^https?://\S+$"
    )
    """URL of a job's driver metrics, with {service}, {cluster}, {namespace} and {port} (the
    trainer_metrics_port) filled in: the operator reads the job's progress there
    (KUBERL_TRAINER_METRICS_URL)."""

    poll_seconds: float = Field(5.0, gt=0, le=30)
    """How often the operator looks at each active job (its pods, its driver, its progress), on
    top of reacting to edits at once (KUBERL_POLL_SECONDS); progress reaches the status within
    this plus one metrics read."""

    operator_namespace: str = Field("kuberl-system", max_length=63, pattern=DNS_LABEL_PATTERN)
    """Namespace the operator's pods run in (KUBERL_OPERATOR_NAMESPACE; the chart sets it from the
    pod's own namespace): each job's NetworkPolicy lets pods there that carry operator_pod_labels
    reach the Ray Jobs API and the driver's metrics."""

    operator_pod_labels: Labels = Field(
        default_factory=lambda: {
            "app.kubernetes.io/name": "kuberl",
            "app.kubernetes.io/component": "operator",
        },
        min_length=1,
    )
    """Labels of the operator's pods, as `key=value,key=value` (KUBERL_OPERATOR_POD_LABELS; the
    chart sets it from its Deployment's pod labels): with operator_namespace they say which pods
    each job's NetworkPolicy admits to the Ray Jobs API and the driver's metrics."""

    prometheus_namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL_PATTERN)
    """Namespace of the Prometheus that scrapes the drivers' metrics (KUBERL_PROMETHEUS_NAMESPACE):
    each job's NetworkPolicy lets only pods there reach the metrics port. Empty: the operator's own
    namespace (operator_namespace), since the metrics name every job and its figures, which pods of
    other teams' namespaces are not owed."""

    prometheus_pod_labels: Labels = Field(default_factory=dict)
    """Labels of the Prometheus pods that scrape the drivers' metrics, as `key=value,key=value`
    (KUBERL_PROMETHEUS_POD_LABELS): with them, only those pods of prometheus_namespace reach the
    metrics port. Empty: any pod of that namespace."""

    metrics_port: int = Field(8080, ge=0, le=65535)
    """Port of the operator's own Prometheus metrics (/metrics); 0 turns them off
    (KUBERL_METRICS_PORT)."""

    webhook_port: int = Field(0, ge=0, le=65535)
    """Port of the operator's validating admission webhook (HTTPS), which refuses an invalid RLJob
    at `kubectl apply` with the field and what to do; 0 turns it off (KUBERL_WEBHOOK_PORT; the
    chart sets it, with its ValidatingWebhookConfiguration). The operator checks every job anyway,
    failing an invalid one with reason InvalidSpec."""

    log_relay_port: int = Field(0, ge=0, le=65535)
    """Port on which the operator serves the drivers' output to the kuberl API (log_relay.py), so
    that the API, which serves `GET .../logs`, holds no job's Ray auth token, each of which would
    let it run anything on that job's Ray cluster; 0 turns it off (KUBERL_LOG_RELAY_PORT; the
    chart sets it, with a Service the API reaches it by)."""

    log_relay_token: SecretStr | None = Field(None, min_length=32)
    """The bearer token the API presents to the log relay, which refuses every request without it
    (KUBERL_LOG_RELAY_TOKEN; the chart keeps it in a Secret given to both). Required with
    log_relay_port."""

    webhook_cert_dir: str = Field("/etc/kuberl/webhook", pattern=r"^(/[^/:\s]+)+$")
    """Directory holding the webhook's certificate and key, tls.crt and tls.key (a mounted
    kubernetes.io/tls Secret), re-read when they change (KUBERL_WEBHOOK_CERT_DIR)."""

    allowed_secrets: NameGlobs = ()
    """Secrets a job may give its driver as environment variables (spec.storage.secretRef and
    spec.trainer.checkpoint.credentialsSecret), as names or fnmatch globs in the job's namespace,
    comma-separated (KUBERL_ALLOWED_SECRETS, e.g. `s3-credentials,ckpt-*`). Empty: no job may
    reference a Secret. The operator's own Secrets (<job>-ray-auth, every job's Ray token, and
    <release>-ray-auth-key) are never allowed, whatever this says."""

    allowed_image_prefixes: ImagePrefixes = ()
    """Prefixes spec.image may start with, beyond the repositories of trainer_image and
    trainer_gpu_image, which are always allowed (KUBERL_ALLOWED_IMAGE_PREFIXES, comma-separated).
    A prefix matches at a boundary of the reference: `registry.example.com/rl/` allows every
    image below that path, `registry.example.com/rl/trainer` that repository at any tag or
    digest; `*` allows any image. Empty: only the trainer images' repositories."""

    allowed_priority_classes: NameGlobs = ()
    """PriorityClasses spec.priorityClassName may name, as names or fnmatch globs,
    comma-separated (KUBERL_ALLOWED_PRIORITY_CLASSES). Empty: no job may set one (its pods get the
    cluster's default priority), so no job can claim system-node-critical."""

    allowed_service_accounts: NameGlobs = ()
    """ServiceAccounts spec.pods.serviceAccountName may name, as names or fnmatch globs in the
    job's namespace, comma-separated (KUBERL_ALLOWED_SERVICE_ACCOUNTS). Empty: the pods run as the
    namespace's default ServiceAccount, with no API token mounted."""

    run_as_user: int = Field(TRAINER_UID, ge=1, le=2_147_483_647)
    """User ID every process of the Ray pods runs as, never root (KUBERL_RUN_AS_USER): the trainer
    image's non-root user by default. Images in spec.image must work as this user."""

    run_as_group: int = Field(TRAINER_GID, ge=0, le=2_147_483_647)
    """Group ID of the Ray pods' processes and of their volumes (fsGroup), so the head can write
    checkpoints to a claim (KUBERL_RUN_AS_GROUP)."""

    ray_auth_key: SecretStr | None = Field(None, min_length=32)
    """The key each job's Ray auth token is derived from, as HMAC-SHA256 over the job's namespace,
    name and UID (KUBERL_RAY_AUTH_KEY; the chart sets it from a Secret it keeps in the operator's
    namespace). With it the operator never reads a Secret: a restarted operator derives the same
    tokens. Empty (a local run): each job gets a random token that the operator reads back from
    the job's <job>-ray-auth Secret, which needs `get` on Secrets."""

    cost: PriceValues = Field(default_factory=lambda: copy.deepcopy(DEFAULT_PRICES))
    """The prices jobs' cost is computed with, as JSON (KUBERL_COST): dollars per node-hour,
    onDemand and spot, for node pools (the value of the node label poolLabel, kuberl.io/pool by
    default) and for instance types (node.kubernetes.io/instance-type), with the pool `default`
    pricing every other node. A node's pool entry wins over its instance type's."""

    @property
    def price_table(self) -> PriceTable:
        """The cost setting as the cost model reads it."""
        return PriceTable.from_values(self.cost)

    @property
    def image_prefixes(self) -> tuple[str, ...]:
        """Every prefix spec.image may start with: the trainer images' repositories, then
        allowed_image_prefixes."""
        own = (image_repository(self.trainer_image), image_repository(self.trainer_gpu_image))
        return tuple(dict.fromkeys((*own, *self.allowed_image_prefixes)))

    def dashboard_url(self, service: str, cluster: str, namespace: str) -> str:
        """ray_dashboard_url for the head Service `service` of the RayCluster `cluster`."""
        return self.ray_dashboard_url.format(service=service, cluster=cluster, namespace=namespace)

    def metrics_url(self, service: str, cluster: str, namespace: str) -> str:
        """trainer_metrics_url for the head Service `service` of the RayCluster `cluster`."""
        return self.trainer_metrics_url.format(
            service=service, cluster=cluster, namespace=namespace, port=self.trainer_metrics_port
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """The settings given by `KUBERL_<FIELD>` variables (an empty one means the default).
        Raises InvalidSettings naming every variable with an unusable value."""
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = environ.get(env_name(name), "").strip()
            if raw:
                values[name] = raw
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = [
                f"{env_name(str(error['loc'][0]))}={_shown(str(error['loc'][0]), values)}: "
                f"{error['msg']}"
                for error in exc.errors()
            ]
            raise InvalidSettings("; ".join(problems)) from None


def _shown(field: str, values: dict[str, Any]) -> str:
    """A setting's value as an error message may show it: never a secret's (it would reach the
    operator's log)."""
    if OperatorSettings.model_fields[field].annotation == SecretStr | None:
        return "(hidden)"
    return repr(values[field])


def image_repository(image: str) -> str:
    """The repository of an image reference, without its tag or digest:
    `registry:5000/rl/trainer:1.0@sha256:...` -> `registry:5000/rl/trainer`."""
    repository = image.partition("@")[0]
    name_start = repository.rfind("/") + 1
    tag = repository.rfind(":")
    return repository[:tag] if tag >= name_start else repository


def env_name(field: str) -> str:
    """`trainer_image` -> `KUBERL_TRAINER_IMAGE`."""
    return ENV_PREFIX + field.upper()
