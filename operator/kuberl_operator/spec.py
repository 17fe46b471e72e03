"""The RLJob custom resource (kuberl.io/v1alpha1) as pydantic models: spec, status and metadata.

These models are the one source of truth for the resource: `crd.py` generates the CRD's
openAPIV3Schema from them, and `validation.py` turns a manifest into an `RLJob` with errors that
name the field. `spec.trainer` is the trainer's own model (kuberl_trainer.config), so `kuberl train`
on a laptop and the operator read the same manifest the same way.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from kuberl_operator.constants import (
    API_VERSION,
    CONTROL_PLANE_NODE_LABELS,
    DEFAULT_CHECKPOINT_MOUNT_PATH,
    DEFAULT_RAY_VERSION,
    KIND,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY_LABEL,
    MAX_JOB_NAME_LENGTH,
    RESERVED_ANNOTATION_PREFIXES,
    RESERVED_LABEL_PREFIXES,
    SPOT_RAY_RESOURCE,
)
from kuberl_trainer.config import (
    LEARNER_GPUS_NEEDED,
    PBT,
    OptimizerName,
    RolloutConfig,
    Spec,
    TrainerConfig,
)

# --- Kubernetes formats -------------------------------------------------------------------------

# resource.Quantity as Kubernetes' own CRDs spell it, minus the sign: resources are never negative.
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
PERCENT_PATTERN = r"^[0-9]+%$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1035 label: it names the Ray cluster
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+$"
IMAGE_PATTERN = r"^\S+$"
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MOUNT_PATH_PATTERN = r"^(/[^/:\s]+)+/?$"  # absolute, not the root; Kubernetes forbids ':'

# What a pattern means in words, for error messages (validation.py shows these instead of regexes).
PATTERN_HINTS: dict[str, str] = {
    DNS_SUBDOMAIN_PATTERN: "a DNS subdomain: lowercase letters, digits, '-' and '.', starting and "
    "ending with a letter or digit",
    LABEL_VALUE_PATTERN: "a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit",
    VERSION_PATTERN: "a version like 2.60.0",
    IMAGE_PATTERN: "an image reference without spaces, like ghcr.io/org/trainer:1.0",
    REASON_PATTERN: "a CamelCase reason like TrainingStarted",
    MOUNT_PATH_PATTERN: "an absolute directory path other than / and without ':' or spaces, like "
    "/kuberl/checkpoints",
}


def _quantity(value: object) -> object:
    """Kubernetes reads quantities as an integer or a string; YAML floats are neither."""
    if isinstance(value, float):
        raise ValueError(
            f"write {value} as a quoted string such as '{value}' or '{round(value * 1000)}m': "
            "Kubernetes accepts quantities as integers or strings only"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write a number with an optional suffix, "
            "such as 500m, 2, 512Mi or 8Gi"
        )
    return value


def _int_or_percent(value: object) -> object:
    if isinstance(value, str) and not re.fullmatch(PERCENT_PATTERN, value):
        raise ValueError(f"{value!r} is neither a count nor a percentage: write 1 or '25%'")
    if isinstance(value, str) and int(value[:-1]) > 100:
        raise ValueError(f"{value!r} is more than 100%")
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ValueError(f"{value} is negative: write a count >= 0 or a percentage like '25%'")
    return value


def _int_or_string_schema(pattern: str) -> WithJsonSchema:
    # The shape Kubernetes' own CRDs use for quantities and int-or-percent fields.
    return WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": pattern,
            "x-kubernetes-int-or-string": True,
        }
    )


Quantity = Annotated[str, BeforeValidator(_quantity), _int_or_string_schema(QUANTITY_PATTERN)]
"""A Kubernetes resource quantity such as 500m, 2 or 8Gi (an integer or a string in YAML)."""

IntOrPercent = Annotated[
    int | str, BeforeValidator(_int_or_percent), _int_or_string_schema(PERCENT_PATTERN)
]
"""A count, or a percentage of a total written like '25%'."""


def _is_qualified_key(key: str) -> bool:
    """A label or annotation key as the API server takes it: an optional DNS-subdomain prefix and
    '/', then a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    return bool(re.fullmatch(LABEL_KEY_PATTERN, key)) and len(name) <= 63 and len(prefix) <= 253


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Rejects keys and values the Kubernetes API server would refuse, naming the offending one."""
    for key, value in labels.items():
        if not _is_qualified_key(key):
            raise ValueError(
                f"{key!r} is not a valid label key: an optional DNS-subdomain prefix and '/', then "
                "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
                "digit"
            )
        if len(value) > 63 or not re.fullmatch(LABEL_VALUE_PATTERN, value):
            raise ValueError(f"{value!r} (at {key!r}) is not {PATTERN_HINTS[LABEL_VALUE_PATTERN]}")
    return labels


LabelMap = Annotated[dict[str, str], AfterValidator(check_labels)]
"""Label keys to values, checked as the API server would (labels and node selectors)."""


def check_not_control_plane(selector: dict[str, str]) -> dict[str, str]:
    """Refuses a node selector that picks control-plane nodes: they run the cluster itself (the
    API server, etcd), and a job's pods there would share a node with the cluster's secrets."""
    for key in selector:
        if key in CONTROL_PLANE_NODE_LABELS:
            raise ValueError(
                f"{key!r} selects control-plane nodes, which run the cluster itself; RLJob pods "
                "may not run there: remove it and select worker nodes by their own labels"
            )
    return selector


NodeSelector = Annotated[LabelMap, AfterValidator(check_not_control_plane)]
"""Node labels a pod requires; never a control-plane node's."""


# --- Metadata -----------------------------------------------------------------------------------


class ObjectMeta(Spec):
    """The standard Kubernetes object metadata; keys set by the API server pass through."""

    model_config = ConfigDict(extra="allow")

    name: str
    """The job's name. It also names the Ray cluster and its pods, so it must be a DNS-1035
    label."""

    namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL_PATTERN)
    """Namespace of the job; null means the current one."""

    labels: LabelMap = Field(default_factory=dict)
    """Labels; `kueue.x-k8s.io/queue-name` submits the job to that Kueue LocalQueue."""

    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations."""

    @field_validator("name")
    @classmethod
    def _dns_1035_label(cls, name: str) -> str:
        if len(name) > MAX_JOB_NAME_LENGTH or not re.fullmatch(JOB_NAME_PATTERN, name):
            raise ValueError(
                f"{name!r} is not a valid job name: use at most {MAX_JOB_NAME_LENGTH} lowercase "
                "letters, digits and '-', starting with a letter and ending with a letter or digit "
                "(it names the Ray cluster and its pods)"
            )
        return name


# --- Spec ---------------------------------------------------------------------------------------


class Toleration(Spec):
    """A Kubernetes toleration: lets pods schedule onto nodes with a matching taint."""

    key: str | None = None
    """Taint key to match. Required: a toleration of every taint (no key, operator Exists) is
    refused, as are the control-plane taints."""

    operator: Literal["Equal", "Exists"] = "Equal"
    """Equal matches key and value; Exists matches the key with any value."""

    value: str | None = None
    """Taint value to match (operator Equal only)."""

    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; null matches every effect."""

    toleration_seconds: int | None = Field(None, ge=0)
    """How long a NoExecute taint is tolerated before eviction; null tolerates it forever."""

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value: must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds: only applies to effect NoExecute")
        # Without a key, Exists tolerates every taint: the pod could go onto control-plane and
        # other reserved nodes.
        if not self.key:
            raise ValueError(
                "key: a toleration without a key tolerates every taint, the control plane's "
                "included; name the taint to tolerate, such as nvidia.com/gpu"
            )
        if self.key in CONTROL_PLANE_NODE_LABELS:
            raise ValueError(
                f"key: {self.key} is the taint of control-plane nodes, which run the cluster "
                "itself; RLJob pods may not run there: remove this toleration"
            )
        return self


class Learner(Spec):
    """Resources and placement of the learner, which computes the gradient updates."""

    gpus: int = Field(0, ge=0, le=16)
    """GPUs for the learner; 0 trains on CPU. The learner trains on one of them, except with
    the LocalMultiGPU optimizer, which splits every SGD minibatch across all of them."""

    cpu: Quantity = "2"
    """CPU request of the learner's pod, as a Kubernetes quantity (2, 500m)."""

    memory: Quantity = "4Gi"
    """Memory request of the learner's pod, as a Kubernetes quantity (4Gi, 512Mi)."""

    gpu_type: str | None = Field(None, max_length=63, pattern=LABEL_VALUE_PATTERN)
    """GPU model, such as nvidia-l4 or nvidia-tesla-t4: the operator selects nodes whose GPU-model
    label has this value (cloud.google.com/gke-accelerator by default; the operator can be set up
    with another key, such as nvidia.com/gpu.product)."""

    node_selector: NodeSelector = Field(default_factory=dict)
    """Node labels the learner's pod requires (never a control-plane node's)."""

    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the learner's pod (GPU nodes are often tainted)."""

    @model_validator(mode="after")
    def _gpu_type_needs_gpus(self) -> Learner:
        if self.gpu_type and self.gpus == 0:
            raise ValueError(
                f"gpuType: {self.gpu_type} asks for a GPU node but gpus is 0; set gpus >= 1 or "
                "remove gpuType"
            )
        return self


class SpotProvider(StrEnum):
    """Whose spot capacity the rollout workers use; each has its own node label and taint."""

    GKE = "gke"
    EKS = "eks"
    KARPENTER = "karpenter"
    AKS = "aks"
    CUSTOM = "custom"  # the operator adds nothing: the user's nodeSelector and tolerations decide


class Spot(Spec):
    """Run rollout workers on preemptible (spot) nodes."""

    enabled: bool = False
    """Schedule rollout workers on spot nodes."""

    provider: SpotProvider | None = None
    """Cloud or autoscaler whose spot node label and taint the operator adds: gke, eks,
    karpenter, aks, or custom (add your own nodeSelector and tolerations). Required when
    enabled."""

    fallback_to_on_demand: bool = True
    """Bring up on-demand rollout workers while spot capacity is missing."""

    max_unavailable: IntOrPercent = "25%"
    """Rollout workers that may be missing (preempted or pending) before the operator falls back
    to on-demand nodes: a count, or a percentage of replicas such as '25%'. Training continues at
    reduced speed meanwhile."""

    @model_validator(mode="after")
    def _provider_when_enabled(self) -> Spot:
        if self.enabled and self.provider is None:
            names = ", ".join(p.value for p in SpotProvider)
            raise ValueError(f"provider: required when spot is enabled; one of {names}")
        return self


class RolloutWorkers(RolloutConfig):
    """The remote rollout workers (Ray actors) and where their pods run."""

    spot: Spot = Field(default_factory=Spot)
    """Spot (preemptible) placement of the rollout workers."""

    node_selector: NodeSelector = Field(default_factory=dict)
    """Node labels the rollout workers' pods require (never a control-plane node's)."""

    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the rollout workers' pods."""

    @model_validator(mode="after")
    def _spot_needs_workers(self) -> RolloutWorkers:
        if self.spot.enabled and self.replicas == 0:
            raise ValueError(
                "spot.enabled: replicas is 0, so there are no remote rollout workers to put on "
                "spot nodes; set replicas >= 1 or disable spot"
            )
        if self.spot.provider == SpotProvider.CUSTOM and not (
            self.node_selector or self.tolerations
        ):
            raise ValueError(
                "spot.provider: custom adds no node selector or toleration; set nodeSelector or "
                "tolerations here so the workers reach your spot nodes"
            )
        if SPOT_RAY_RESOURCE in self.ray_resources and not self.spot.enabled:
            raise ValueError(
                f"rayResources.{SPOT_RAY_RESOURCE}: only the pods of the spot worker group "
                f"advertise {SPOT_RAY_RESOURCE}, and spot is not enabled; enable spot or remove "
                "it, or no rollout worker could ever be placed"
            )
        return self


class PreemptionPolicy(StrEnum):
    """What a preempted job does."""

    RESUME = "Resume"  # resume from the newest checkpoint; not counted against maxRestarts
    COUNT_AS_RESTART = "CountAsRestart"  # resume, but count it like a failure
    FAIL = "Fail"  # the job fails


class RestartPolicy(Spec):
    """How the operator recovers a job whose driver failed or whose nodes were preempted."""

    max_restarts: int = Field(3, ge=0, le=1000)
    """Restarts after failures before the job is Failed; each resumes from the newest
    checkpoint."""

    backoff_seconds: int = Field(30, ge=0, le=86_400)
    """Seconds to wait before a restart."""

    on_preemption: PreemptionPolicy = PreemptionPolicy.RESUME
    """Resume (from the newest checkpoint, not counted against maxRestarts), CountAsRestart, or
    Fail."""


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

    persistent_volume_claim: PersistentVolumeClaimRef | None = None
    """Mount this claim into the head: the driver's run directory (progress and checkpoints) is
    <mountPath>/<job name>."""

    mount_path: Annotated[str, AfterValidator(check_mount_path)] = Field(
        DEFAULT_CHECKPOINT_MOUNT_PATH, max_length=1024, pattern=MOUNT_PATH_PATTERN
    )
    """Where the head mounts persistentVolumeClaim: an absolute path without '.' or '..'
    segments, outside the image's system directories (/bin, /boot, /dev, /etc, /lib, /lib64,
    /opt/kuberl, /proc, /root, /run, /sbin, /sys, /usr, and /var except below /var/lib/) and outside
    Ray's /tmp/ray (and /tmp itself)."""

    secret_ref: SecretRef | None = None
    """Credentials for an object store (such as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY),
    given to the driver as environment variables, one per key of this Secret. The operator must
    allow the Secret (its allowed_secrets setting)."""

    @model_validator(mode="after")
    def _one_kind_of_storage(self) -> Storage:
        if (self.persistent_volume_claim is None) == (self.secret_ref is None):
            raise ValueError(
                "set either persistentVolumeClaim (a volume mounted into the head) or secretRef "
                "(object-store credentials), not both or neither"
            )
        if self.secret_ref and self.mount_path != DEFAULT_CHECKPOINT_MOUNT_PATH:
            raise ValueError("mountPath: only applies to persistentVolumeClaim; remove it")
        return self


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
        if not _is_qualified_key(key):
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


class RLJobSpec(Spec):
    """What to train and on which resources."""

    trainer: TrainerConfig
    """The training job: algorithm, env, hyperparameters, stop conditions, checkpoints."""

    image: str | None = Field(None, min_length=1, pattern=IMAGE_PATTERN)
    """Container image with kuberl's trainer and the env's dependencies; null uses the operator's
    default trainer image. It must start with a prefix the operator allows (its
    allowed_image_prefixes setting) and run as a non-root user (the pods run as UID 10001 unless
    the operator is set up otherwise)."""

    ray_version: str = Field(DEFAULT_RAY_VERSION, pattern=VERSION_PATTERN)
    """Ray version inside the image (KubeRay needs it); must match the image."""

    learner: Learner = Field(default_factory=Learner)
    """The learner's resources and placement."""

    rollout_workers: RolloutWorkers = Field(default_factory=RolloutWorkers)
    """How many rollout workers sample, with how many envs each, and where they run."""

    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    """Recovery from failures and preemptions."""

    storage: Storage | None = None
    """Storage for the driver's run directory and checkpoints that outlives its pod: a
    PersistentVolumeClaim, or the credentials of an object store. Without it a lost head loses
    its checkpoints (unless trainer.checkpoint.uri points outside the pod)."""

    suspend: bool = False
    """Stop the job's Ray cluster but keep the job and its checkpoints; false resumes it."""

    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    """Delete the job this many seconds after it succeeded or failed; null keeps it."""

    active_deadline_seconds: int | None = Field(None, ge=1)
    """Fail the job once this many seconds have passed since it started (status.startTime), as
    Kubernetes Jobs count: provisioning and restarts included, time suspended not; null sets no
    deadline."""

    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PriorityClass of the job's pods; it must be one the operator allows (its
    allowed_priority_classes setting)."""

    pods: Pods = Field(default_factory=Pods)
    """Labels, annotations and ServiceAccount of every pod of the job's Ray cluster."""

    @model_validator(mode="after")
    def _replay_shards_need_ray(self) -> RLJobSpec:
        if self.trainer.optimizer_name == OptimizerName.ASYNC_REPLAY and (
            self.rollout_workers.replicas == 0
        ):
            raise ValueError(
                "rolloutWorkers.replicas: AsyncReplay feeds its replay shards from remote rollout "
                "workers, and replicas is 0; set replicas to 1 or more, or use SyncReplay"
            )
        return self

    @model_validator(mode="after")
    def _trials_learn_on_cpus(self) -> RLJobSpec:
        if self.trainer.algorithm == PBT and self.learner.gpus:
            raise ValueError(
                "learner.gpus: PBT's trials learn in Ray actors of "
                "hyperparameters.cpus_per_trial CPUs each, without GPUs; set gpus to 0"
            )
        return self

    @model_validator(mode="after")
    def _towers_need_gpus_and_samples(self) -> RLJobSpec:
        if self.trainer.optimizer_name != OptimizerName.LOCAL_MULTI_GPU:
            return self
        towers = self.learner.gpus
        if towers < 2:
            raise ValueError(LEARNER_GPUS_NEEDED)
        # A minibatch is minibatch_size samples, or the whole batch when that is smaller: at
        # least one worker's (the others' may be dropped as stragglers).
        trials = self.trainer.trainer if self.trainer.algorithm == PBT else self.trainer
        hp = trials.hyperparameters
        samples = min(hp.minibatch_size, hp.rollout_length * self.rollout_workers.envs_per_worker)
        if samples < towers:
            raise ValueError(
                f"learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's "
                f"{towers} GPUs, and a minibatch may hold only {samples} samples (minibatch_size, "
                "or rollout_length x envsPerWorker when smaller); raise those or lower gpus"
            )
        return self


# --- Status -------------------------------------------------------------------------------------


class Phase(StrEnum):
    """Where the job is in its life; one transition function in the operator decides it."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    PREEMPTED = "Preempted"
    RESUMING = "Resuming"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class ConditionType(StrEnum):
    """The condition types the operator writes."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    PREEMPTED = "Preempted"
    COMPLETE = "Complete"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class Condition(Spec):
    """One aspect of the job's state, in the standard Kubernetes condition shape."""

    type: str = Field(min_length=1, max_length=316)
    """Condition type, such as Ready, Progressing, Preempted, Complete, Failed, Suspended."""

    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""

    reason: str = Field(min_length=1, max_length=1024, pattern=REASON_PATTERN)
    """Why, as one CamelCase word."""

    message: str = Field("", max_length=32_768)
    """Why, in words for people."""

    last_transition_time: datetime
    """When status last changed."""

    observed_generation: int | None = Field(None, ge=0)
    """The metadata.generation the condition was computed from."""


class Progress(Spec):
    """Training progress reported by the driver."""

    iteration: int = Field(0, ge=0)
    """Training iterations completed."""

    timesteps: int = Field(0, ge=0)
    """Env steps sampled in total."""

    episode_return_mean: float | None = None
    """Mean return of the recent training episodes."""

    last_checkpoint: str | None = None
    """Location of the newest checkpoint."""

    last_update_time: datetime | None = None
    """When the driver last reported progress."""

    samples_per_second: float | None = Field(None, ge=0)
    """Env steps sampled per second over the last iteration."""


class RLJobStatus(Spec):
    """The observed state of the job, written only by the operator."""

    phase: Phase | None = None
    """Pending, Provisioning, Running, Preempted, Resuming, Succeeded, Failed or Suspended;
    empty until the operator has seen the job."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Conditions, one per type: Ready, Progressing, Preempted, Complete, Failed, Suspended,
    and KubeRayAvailable (KubeRay's CRD is installed), UpToDate (the current attempt runs the
    current spec) and Schedulable (the cluster's pods can be placed; the scheduler's reason when
    not)."""

    progress: Progress = Field(default_factory=Progress)
    """Training progress."""

    attempt: int = Field(0, ge=0)
    """The current attempt (1, 2, ...): each has its own Ray cluster and submits its driver once;
    0 before the first."""

    restarts: int = Field(0, ge=0)
    """Restarts after failures so far (preemptions resumed under onPreemption Resume are not
    counted)."""

    preemptions: int = Field(0, ge=0)
    """Times the job's pods were preempted."""

    preempted_pods: list[str] = Field(default_factory=list)
    """UIDs of the preempted rollout worker pods already counted in preemptions, kept while the
    pods still exist, so each is counted once."""

    ray_cluster: str | None = None
    """Name of the job's RayCluster."""

    head_pod_uid: str | None = Field(None, alias="headPodUID")
    """UID of the head pod the current attempt's driver was submitted to. A head pod with another
    UID in the same attempt (KubeRay recreated it) lost that driver: the attempt is restarted
    rather than the driver submitted twice."""

    start_time: datetime | None = None
    """When the job started: its first Ray cluster was requested, or it was last resumed from
    suspension. activeDeadlineSeconds counts from here."""

    completion_time: datetime | None = None
    """When the job succeeded or failed."""

    observed_generation: int | None = Field(None, ge=0)
    """The metadata.generation the status was computed from."""


# --- The resource -------------------------------------------------------------------------------


class RLJob(Spec):
    """A reinforcement-learning training job, run by kuberl's operator on a Ray cluster."""

    api_version: Literal["kuberl.io/v1alpha1"] = API_VERSION
    """kuberl.io/v1alpha1."""

    kind: Literal["RLJob"] = KIND
    """RLJob."""

    metadata: ObjectMeta
    """Standard object metadata."""

    spec: RLJobSpec
    """What to train and on which resources."""

    status: RLJobStatus = Field(default_factory=RLJobStatus)
    """Observed state, written by the operator."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def queue_name(self) -> str | None:
        """The Kueue LocalQueue the job was submitted to, if any."""
        return self.metadata.labels.get(KUEUE_QUEUE_LABEL)
