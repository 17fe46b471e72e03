"""What the reconciler does next (one `Action` per reconcile), the Events it emits, and
`StatusUpdate`, which carries both with the new status and the on-demand rollout group's size.

The status is decided by pure functions and carried out by the reconciler: these values are the
whole interface between the two, so the decision never touches an API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kuberl_operator.spec import Phase, RLJobStatus
from kuberl_operator.status.disruption import PodAboutToGo


@dataclass(frozen=True)
class Nothing:
    """Nothing to do until something changes (the reconciler's timer still polls)."""


@dataclass(frozen=True)
class CreateCluster:
    """Create the children of this attempt (builders.build_children), unless they exist."""

    attempt: int


@dataclass(frozen=True)
class SubmitDriver:
    """Submit the driver as `builders.submission_id(job, attempt)` (a retry of the same id is
    recognised by the Jobs API, not run twice)."""

    attempt: int


@dataclass(frozen=True)
class StopDrivers:
    """Stop these earlier attempts' drivers, still running on the cluster the current attempt is
    to run on (the Jobs API's stop); the current one is submitted once they have ended."""

    attempts: tuple[int, ...]


@dataclass(frozen=True)
class DeleteCluster:
    """Delete the job's RayCluster (the job, its checkpoints and its storage stay)."""

    reason: str


@dataclass(frozen=True)
class Requeue:
    """Look again after this many seconds."""

    after_seconds: float


@dataclass(frozen=True)
class DeleteJob:
    """Delete the RLJob itself (its TTL after finishing has passed)."""


Action = Nothing | CreateCluster | SubmitDriver | StopDrivers | DeleteCluster | Requeue | DeleteJob


@dataclass(frozen=True)
class KubeEvent:
    """A Kubernetes Event to emit on the RLJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class StatusUpdate:
    """The result of one `compute_status`."""

    status: RLJobStatus
    events: tuple[KubeEvent, ...] = ()
    action: Action = field(default_factory=Nothing)
    on_demand_replicas: int | None = None
    """The size the job's on-demand rollout group should have (`status.fallback`); None leaves
    it as it is."""
    scale_to: int | None = None
    """The elastic fleet's new size, which the learner-driven autoscaling decided: written to
    spec.rolloutWorkers.replicas; None leaves it as it is."""
    rollout_replicas: int | None = None
    """The size an elastic job's rollout group should have (`status.fallback.rollout_replicas`);
    None leaves it as it is."""
    drains: tuple[PodAboutToGo, ...] = ()
    """Pods about to go whose Ray nodes are to be drained now, each by one Ray job
    (`disruption.drain_submission_id`), before the status that names them in status.draining is
    written: one that could not be submitted is left out of it, and tried again next poll."""

    @property
    def attempt(self) -> int:
        return self.status.attempt

    @property
    def phase(self) -> Phase:
        assert self.status.phase is not None
        return self.status.phase
