"""What the reconciler observed, in plain values: `Observed` and its parts (the RayCluster, the
current attempt's head pod, its driver, pods the scheduler cannot place, spot pods waiting for a
node, the newest progress, the names of children that other objects hold, the pods on their nodes
and the prices that cost them).

They are frozen dataclasses that hold no Kubernetes object, so every rule of the status is tested
with a few lines of plain values; `kuberl_operator.observe` reads them out of the API's objects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from kuberl_contract.final_record import EXIT_INVALID_JOB, Outcome
from kuberl_operator.cost import PodOnNode, PriceTable
from kuberl_operator.spec import Condition, RLJobStatus
from kuberl_operator.status.disruption import PodAboutToGo


class HeadFate(StrEnum):
    """What became of the current attempt's head pod."""

    RUNNING = "Running"
    PREEMPTED = "Preempted"  # a DisruptionTarget condition, or its node is gone
    FAILED = "Failed"  # any other loss: the container failed, the pod was deleted or evicted


class DriverState(StrEnum):
    """A submission's status as the Ray Jobs API reports it."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass(frozen=True)
class ObservedCluster:
    """The job's RayCluster as it is now."""

    name: str
    attempt: int
    """Its `kuberl.io/attempt` label."""
    state: str | None = None
    """KubeRay's `.status.state`: "ready", "suspended", or None while it comes up."""
    head_ready: bool = False
    """The head pod is Ready."""

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.head_ready


@dataclass(frozen=True)
class ObservedHead:
    """The current attempt's head pod."""

    fate: HeadFate
    reason: str = ""
    """Why it was lost, in words (the pod's reason and message, or "node gone")."""
    uid: str = ""
    """The pod's UID: KubeRay may replace a failed head with a new pod before the operator sees
    the old one fail, and the new UID is how that shows."""


HEAD_GROUP = "head"
"""`UnschedulablePods.group` of the head pod."""


@dataclass(frozen=True)
class UnschedulablePods:
    """Pods of one group of the current attempt's Ray cluster that the scheduler cannot place
    (their PodScheduled condition is False with reason Unschedulable)."""

    group: str
    """HEAD_GROUP for the head pod, else the worker group's name (rollout, rollout-on-demand)."""
    pods: int
    message: str
    """The scheduler's message, such as "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    (the most common one among the group's pods)."""

    def describe(self) -> str:
        """The group's problem in words, naming the group."""
        if self.group == HEAD_GROUP:
            return f"the head pod cannot be scheduled: {self.message}"
        pods = "1 pod" if self.pods == 1 else f"{self.pods} pods"
        return f"{pods} of worker group {self.group} cannot be scheduled: {self.message}"


@dataclass(frozen=True)
class ObservedDriver:
    """The current attempt's driver submission in the Ray Jobs API."""

    state: DriverState
    message: str = ""
    """Why it ended: its final record's message, else the Jobs API's."""
    exit_code: int | None = None
    """The driver's exit status once it has exited (the Jobs API's driver_exit_code)."""
    outcome: Outcome | None = None
    """How its final record says it ended; None without one (it runs, or it crashed)."""

    @property
    def invalid_job(self) -> bool:
        """The driver found the job invalid: retrying cannot help (EXIT_INVALID_JOB)."""
        return self.state == DriverState.FAILED and (
            self.exit_code == EXIT_INVALID_JOB or self.outcome == Outcome.INVALID_JOB
        )


@dataclass(frozen=True)
class ObservedProgress:
    """The driver's newest progress (from its metrics, or its final record), and when it was
    reported."""

    row: dict[str, Any]
    """Keys of a progress row (kuberl_contract.progress_row): iteration, timesteps_total,
    episode_return_mean, samples_per_s."""
    time: datetime
    last_checkpoint: str | None = None
    exported_policy: str | None = None


@dataclass(frozen=True)
class LearnerLoad:
    """How the running driver's learner keeps up, from its metrics (an asynchronous optimizer's
    learner thread: AsyncSamples, AsyncReplay)."""

    utilisation: float
    """Share (0..1) of the last iteration the learner spent learning; the rest it waited."""
    policy_lag_max: float | None
    """The largest policy lag of the last iteration's batches."""
    stale_batches_dropped: int
    """Batches dropped as too stale so far in this run (a counter)."""


@dataclass(frozen=True)
class PendingSpotWorkers:
    """The spot rollout pods of the job's cluster that wait for a node, with what the fallback to
    on-demand workers (`status.fallback`) weighs them against besides the spec."""

    pods: int
    """Pods of the spot rollout group that are Pending."""
    seconds: float
    """How long the oldest of them has been Pending."""
    grace_seconds: float
    """How long they may be Pending before on-demand workers take their place (the operator's
    fallback_pending_seconds)."""
    queued: bool = False
    """The job is queued in Kueue, which admitted the cluster's shape: the fallback is Kueue's to
    make (`builders.scaling`)."""


@dataclass(frozen=True)
class TakenName:
    """A name one of the job's children needs, held by an object the job does not own (no
    controller ownerReference with the job's UID). The operator never changes or deletes it."""

    kind: str
    name: str
    leftover: bool = False
    """The object is a child of an earlier RLJob of the same name (deleted: its controller is an
    RLJob of this name with another UID), which the garbage collector is removing; else it is
    someone else's."""

    def describe(self) -> str:
        if self.leftover:
            return (
                f"{self.kind} {self.name} is left by an earlier RLJob of this name and is being "
                "garbage-collected"
            )
        return f"{self.kind} {self.name} exists and is not this job's: rename the job"


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile observed, in plain values; `compute_status` reads nothing else."""

    status: RLJobStatus
    generation: int
    now: datetime
    kuberay_available: bool = True
    """KubeRay's RayCluster CRD is installed."""
    spec_problems: tuple[str, ...] = ()
    """Why the spec is invalid, each naming its field; empty when valid."""
    cluster: ObservedCluster | None = None
    head: ObservedHead | None = None
    """The head pod of the current attempt's cluster; None while there is none."""
    disrupted_workers: frozenset[str] = frozenset()
    """UIDs of the current attempt's rollout worker pods that were preempted (a DisruptionTarget
    condition, or their node gone) and still exist; each is counted once (status.preemptedPods)."""
    workers_short: int = 0
    """Rollout worker pods the current attempt's cluster lacks: its replicas minus the worker pods
    that exist and were not preempted (0 once KubeRay has refilled the group)."""
    worker_selector: str | None = None
    """The label selector of the job's rollout worker pods (status.selector); None when the job
    could not be read."""
    workers_live: int = 0
    """The current attempt's rollout worker pods that exist and were not preempted (status.replicas,
    the job's current size as its scale subresource reports it)."""
    stale_spec: tuple[str, ...] = ()
    """Spec fields that changed since the current attempt's cluster was built and cannot change
    under a running driver (they apply on the next attempt)."""
    driver: ObservedDriver | None = None
    """The current attempt's submission; None before it is submitted (or while the Jobs API cannot
    be reached)."""
    earlier_drivers: tuple[int, ...] = ()
    """Earlier attempts whose drivers have not ended on the cluster the current attempt runs on
    (it retries a failed driver there), looked for until the current attempt's driver is
    submitted."""
    progress: ObservedProgress | None = None
    learner_load: LearnerLoad | None = None
    """How the running driver's learner keeps up; None when the driver does not say."""
    pending_spot: PendingSpotWorkers | None = None
    """The job's cluster's spot rollout pods that wait for a node; None without a cluster."""
    driver_waiting_s: float = 0.0
    """Seconds the running driver has been waiting for Ray nodes that its rollout workers fit on
    (pods still starting); 0 when it is not waiting."""
    unschedulable: tuple[UnschedulablePods, ...] = ()
    """The current attempt's pods the scheduler cannot place, by group (the head first); empty
    when every pod is scheduled or still waiting for the scheduler's first try."""
    taken_names: tuple[TakenName, ...] = ()
    """Children's names held by objects the job does not own, looked for while the job has no Ray
    cluster of its own (the children would be created next); a RayCluster of the job's name that
    is not the job's is here, never in `cluster`."""
    pods_on_nodes: tuple[PodOnNode, ...] = ()
    """The job's pods that hold a node now, with their nodes (those that could be read)."""
    prices: PriceTable | None = None
    """The operator's price table; None counts no cost (status.cost stays as it is)."""
    about_to_go: tuple[PodAboutToGo, ...] = ()
    """The current attempt's pods that Kubernetes says are about to go, looked for while its
    driver runs (`disruption.pods_about_to_go`)."""
    pod_names: frozenset[str] = frozenset()
    """Names of the pods of the job's Ray cluster that exist (status.draining keeps only those)."""


def condition_of(status: RLJobStatus, type_: str) -> Condition | None:
    """The status's condition of this type; None before one was written."""
    return next((c for c in status.conditions if c.type == type_), None)
