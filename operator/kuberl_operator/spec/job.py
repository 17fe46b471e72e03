"""The RLJob itself: its metadata (the job's name), its spec (RLJobSpec: the trainer, image,
sections, suspension, deadlines and priority, and the checks across sections) and its status.

`spec.trainer` is the trainer's own model (kuberl_contract.config), so `kuberl train` on a laptop
and the operator read the same manifest the same way.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from kuberl_contract.config import (
    LEARNER_GPUS_NEEDED,
    PBT,
    OptimizerName,
    Spec,
    TrainerConfig,
)
from kuberl_operator.constants import (
    API_VERSION,
    DEFAULT_RAY_VERSION,
    KIND,
    KUEUE_QUEUE_LABEL,
    MAX_JOB_NAME_LENGTH,
)
from kuberl_operator.spec.budget import Budget
from kuberl_operator.spec.formats import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    IMAGE_PATTERN,
    JOB_NAME_PATTERN,
    VERSION_PATTERN,
    LabelMap,
)
from kuberl_operator.spec.learner import Learner
from kuberl_operator.spec.pods import Pods
from kuberl_operator.spec.restart import RestartPolicy
from kuberl_operator.spec.status import RLJobStatus
from kuberl_operator.spec.storage import Storage
from kuberl_operator.spec.workers import RolloutWorkers


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


LEARNER_THREADS = (OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY)
"""The optimizers whose learner thread reports how busy it is (learner_utilisation)."""


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
    """Storage for the driver's run directory and checkpoints that outlives its pod: a claim the
    operator creates for the job (size), an existing PersistentVolumeClaim, or the credentials of
    an object store. Without it a lost head loses
    its checkpoints (unless trainer.checkpoint.uri points outside the pod)."""

    suspend: bool = False
    """Stop the job's Ray cluster but keep the job and its checkpoints; false resumes it."""

    budget: Budget | None = None
    """The most the job may cost (status.cost); null sets no limit."""

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
    def _learner_autoscaling_needs_a_learner_thread(self) -> RLJobSpec:
        optimizer = self.trainer.optimizer_name
        if self.rollout_workers.autoscaling is not None and optimizer not in LEARNER_THREADS:
            raise ValueError(
                f"rolloutWorkers.autoscaling: policy Learner reads how busy the learner thread "
                f"of AsyncSamples (IMPALA, APPO) or AsyncReplay (Ape-X) is, and {optimizer} has "
                "none; remove autoscaling, or size the fleet with replicas"
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
