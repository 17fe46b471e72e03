"""status: the job's phase, its conditions (the standard Kubernetes shape), training progress
and restart and preemption counts, written only by the operator."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from kuberl_contract.config import Spec
from kuberl_operator.spec.formats import REASON_PATTERN


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
    UP_TO_DATE = "UpToDate"
    """Whether the current attempt runs the current spec; False when a field that cannot change
    under a running driver was edited (it applies on the next attempt)."""
    SCHEDULABLE = "Schedulable"
    """Whether the scheduler can place the current attempt's pods: False while a pod of the job's
    Ray cluster is Pending with the scheduler's PodScheduled=False (reason Unschedulable: no GPU
    node, a request larger than any node, a node selector nothing matches), with the scheduler's
    message."""
    KUBERAY_AVAILABLE = "KubeRayAvailable"
    """Whether KubeRay's RayCluster CRD is installed; without it no job can run, and every job
    says so."""
    DURABLE_CHECKPOINTS = "DurableCheckpoints"
    """Whether the job's checkpoints, and the policy it exports when it ends, outlive its Ray
    cluster: False, with a Warning Event, when they are kept in the head pod's emptyDir (no
    spec.storage claim holding them, no object store in spec.trainer.checkpoint.uri) and so are
    deleted with the cluster when the job ends."""


class Reason(StrEnum):
    """Why a condition is as it is (its `reason`), or why a Ray cluster is deleted: each written
    once, here. A condition may also carry a phase's name (Ready is False with reason Pending) or
    the scheduler's own reason."""

    # The phase's story (Progressing, Ready, Complete, Failed, Suspended).
    PROVISIONING = "Provisioning"
    DRIVER_RUNNING = "DriverRunning"
    WAITING_FOR_WORKERS = "WaitingForWorkers"
    """The driver runs but waits for the Ray nodes of its rollout workers to join."""
    RESUMING = "Resuming"
    RETRYING_ON_SAME_CLUSTER = "RetryingOnSameCluster"
    """The next attempt's driver goes to the Ray cluster the failed one ran on."""
    STOPPING_EARLIER_DRIVER = "StoppingEarlierDriver"
    """An earlier attempt's driver still runs on the cluster: it is stopped before the next one is
    submitted, so attempts never overlap."""
    EARLIER_DRIVER_NOT_STOPPED = "EarlierDriverNotStopped"
    """An earlier attempt's driver did not stop in time; the next one was submitted anyway, and
    the checkpoints' fencing refuses the older one's writes."""
    RESTART_BACKOFF = "RestartBackoff"
    DRIVER_SUCCEEDED = "DriverSucceeded"
    NOT_COMPLETE = "NotComplete"
    NOT_FAILED = "NotFailed"
    SUSPENDED = "Suspended"
    NOT_SUSPENDED = "NotSuspended"
    QUEUED = "Queued"
    """The local backend: waiting for a free trainer slot."""

    # Why an attempt failed (Failed, or Progressing during the restart backoff).
    INVALID_SPEC = "InvalidSpec"
    DRIVER_FAILED = "DriverFailed"
    TRAINER_LOST = "TrainerLost"
    """The local backend: the trainer process ended without an exit status."""
    HEAD_FAILED = "HeadFailed"
    HEAD_REPLACED = "HeadReplaced"
    """KubeRay replaced the head pod the attempt's driver was submitted to (status.headPodUID)."""
    CLUSTER_LOST = "RayClusterLost"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    NAME_CONFLICT = "NameConflict"
    """A name one of the job's children needs is held by an object the job does not own (its
    controller ownerReference is not the job's UID): the operator leaves it alone."""

    # Preempted.
    HEAD_PREEMPTED = "HeadPreempted"
    WORKER_PREEMPTED = "WorkerPreempted"
    WORKERS_REFILLED = "WorkersRefilled"
    NOT_PREEMPTED = "NotPreempted"
    NODE_DRAINING = "NodeDraining"
    """An Event's only: a pod is about to go, and its Ray node was asked to drain."""
    WARM_START_UNAVAILABLE = "WarmStartUnavailable"
    """An Event's only: the job its spec.trainer.warmStart.job names cannot start it now (gone,
    or its checkpoints with it); the job's cluster waits, tried again each poll."""

    # UpToDate.
    SPEC_APPLIED = "SpecApplied"
    RESTART_REQUIRED = "RestartRequired"

    # Schedulable.
    UNSCHEDULABLE = "Unschedulable"
    """The scheduler's own reason on the pod, kept."""
    NO_UNSCHEDULABLE_PODS = "NoUnschedulablePods"

    # KubeRayAvailable.
    CRD_FOUND = "CRDFound"
    CRD_NOT_FOUND = "CRDNotFound"

    # DurableCheckpoints.
    CHECKPOINTS_ON_STORAGE = "CheckpointsOnStorage"
    CHECKPOINTS_IN_POD = "CheckpointsInPod"

    # Suspended by the operator.
    SCALED_UP = "ScaledUp"
    """The learner waits for data: the operator added rollout workers (autoscaling)."""
    SCALED_DOWN = "ScaledDown"
    """The learner is saturated, or drops batches: the operator removed rollout workers."""
    BUDGET_EXCEEDED = "BudgetExceeded"
    """status.cost.dollars reached spec.budget.maxDollars: the job is suspended until the budget
    is raised or removed."""

    # Why a Ray cluster is deleted, beside the reasons above.
    FINISHED = "Finished"
    STALE_ATTEMPT = "StaleAttempt"


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
    """Mean return of the recent training episodes (the exploring policy's)."""

    evaluation_return_mean: float | None = None
    """Mean return of the latest greedy evaluation (spec.trainer.evaluation): what the trained
    policy scores without exploring; null before the first, or when the job does not evaluate."""

    last_checkpoint: str | None = None
    """Location of the newest checkpoint."""

    exported_policy: str | None = None
    """Location of the greedy policy the driver exported when a stop condition ended the job
    (policy.onnx beside the checkpoints, as `kuberl export` writes it); null before, or with
    spec.trainer.checkpoint.exportPolicy false."""

    last_update_time: datetime | None = None
    """When the driver last reported progress."""

    samples_per_second: float | None = Field(None, ge=0)
    """Env steps sampled per second over the last iteration."""


class Cost(Spec):
    """What the job has cost so far: each pod of its Ray cluster that runs on a node is charged
    its share of the node (its largest request over the node's allocatable, as OpenCost charges
    it) at the node's price in the operator's price table, for the time it held the node. Values
    are kept unrounded, so that many small polls add up."""

    dollars: float = Field(0.0, ge=0)
    """Dollars so far, spot and on-demand together."""

    spot_dollars: float = Field(0.0, ge=0)
    """Dollars of pods on spot (preemptible) nodes."""

    on_demand_dollars: float = Field(0.0, ge=0)
    """Dollars of pods on on-demand nodes."""

    on_demand_equivalent_dollars: float = Field(0.0, ge=0)
    """What the same pod-hours would have cost on on-demand nodes of the same types: the saving
    spot brought is this less dollars."""

    gpu_hours: float = Field(0.0, ge=0)
    """GPUs requested by the job's pods times the hours they ran."""

    worker_hours: float = Field(0.0, ge=0)
    """Rollout worker pods times the hours they ran."""

    dollars_at_target: float | None = Field(None, ge=0)
    """Dollars when the job first reached its target return (spec.trainer.stop's
    evaluationReturnMean where set, else its episodeReturnMean); null before, or without one."""

    last_tally_time: datetime | None = None
    """The time up to which the job's pods are counted. The next poll counts each pod from here,
    or from when it was scheduled if later: a restarted operator counts the time it was down for
    the pods that still run, and nothing twice."""


class Autoscaled(Spec):
    """What the learner-driven autoscaling (spec.rolloutWorkers.autoscaling) remembers between
    polls."""

    last_scale_time: datetime | None = None
    """When it last changed spec.rolloutWorkers.replicas."""

    stale_batches_dropped: int = Field(0, ge=0)
    """The driver's count of batches dropped as too stale, as last seen: a count that grew since
    is batches dropped now."""


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

    cost: Cost | None = None
    """What the job has cost so far; null before any of its pods ran on a node."""

    attempt: int = Field(0, ge=0)
    """The current attempt (1, 2, ...): each submits its driver once, as a new Ray job; 0 before
    the first."""

    cluster_attempt: int = Field(0, ge=0)
    """The attempt the job's Ray cluster was built for (its kuberl.io/attempt label). A failed
    driver's next attempt runs on the same cluster, so this stays behind attempt until the cluster
    is rebuilt (a lost head, a vanished cluster, a spec edit that needs new pods, a resumption).
    The API's local backend starts each attempt's trainer afresh: there it equals attempt."""

    restarts: int = Field(0, ge=0)
    """Restarts after failures so far (preemptions resumed under onPreemption Resume are not
    counted)."""

    preemptions: int = Field(0, ge=0)
    """Times the job's pods were preempted."""

    preempted_pods: list[str] = Field(default_factory=list)
    """UIDs of the preempted rollout worker pods already counted in preemptions, kept while the
    pods still exist, so each is counted once."""

    draining: list[str] = Field(default_factory=list)
    """Names of the job's pods that Kubernetes said are about to go and whose Ray nodes were asked
    to drain, kept while the pods exist, so each is drained once."""

    ray_cluster: str | None = None
    """Name of the job's RayCluster."""

    replicas: int = Field(0, ge=0)
    """Rollout worker pods of the current attempt that exist and were not preempted: what the
    scale subresource reports as the job's current size (spec.rolloutWorkers.replicas is the
    desired one)."""

    autoscaled: Autoscaled | None = None
    """The learner-driven autoscaling's memory; null without spec.rolloutWorkers.autoscaling."""

    selector: str | None = None
    """The label selector of the job's rollout worker pods, for the scale subresource (an HPA
    counts the pods it selects)."""

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
