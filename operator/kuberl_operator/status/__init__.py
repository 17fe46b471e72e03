"""The job's status, computed by one pure function from the spec and what the reconciler observed.

`compute_status(spec, observed)` reads no clock, no environment and no API: the reconciler gathers
an `Observed` (the current status, the RayCluster, the head pod, disrupted rollout workers, pods
the scheduler cannot place, spot pods waiting for nodes, the driver's submission, the newest
progress row, the pods on their nodes and their prices, the time), calls it, writes
`StatusUpdate.status` when it differs from the current one, emits `StatusUpdate.events`, carries
out `StatusUpdate.action` and sizes the rollout groups as `StatusUpdate.rollout_replicas` and
`StatusUpdate.on_demand_replicas` say.

The phase is decided by one transition function, `next_phase(current, event)`, over the table
`TRANSITIONS`; `compute_status` only works out which `PhaseEvent` the observation amounts to. The
API's local backend goes through the same table and lifecycle (`local_decide`, `lifecycle.enter`),
so each backend only applies what is decided here.

One module per question:
- `observed`: what the reconciler observes (`Observed` and its parts: the RayCluster, the head
  pod, the driver, the newest progress, pods the scheduler cannot place, children's names that
  objects the job does not own hold).
- `actions`: what the reconciler does next (`Nothing`, `CreateCluster`, `SubmitDriver`,
  `StopDrivers`, `DeleteCluster`, `Requeue`, `DeleteJob`), the `KubeEvent`s it emits, and
  `StatusUpdate`.
- `phases`: the phase machine (`PhaseEvent`, `TRANSITIONS`, `next_phase`) and what an event
  implies besides the phase (`attempt_after`, `resumes`).
- `decide`: which event an observation amounts to and what to do about it: attempts, restarts
  and their backoff, preemption, activeDeadlineSeconds, suspension. Why did my job restart?
  `decision` holds what it works out on the way.
- `attempts`: when the next attempt starts (the backoff), whether it runs on the same Ray cluster
  or a new one (`rebuild_reason`), and that it never overlaps the last (`next_driver`).
- `local_decide`: the same for the API's local backend: what a submission, spec.suspend, a
  trainer's start and its exit amount to.
- `lifecycle`: what every backend shares (the API's local one too): the conditions a phase
  implies, startTime and completionTime, and how a new status meets the previous one (`enter`
  takes the local backend's events through it all). Why is Ready False?
- `progress`: status.progress from a progress row, for every backend.
- `cost`: status.cost, the job's cost carried from poll to poll (and whether its target was
  reached); `budget`: whether it is to be suspended (spec.suspend, or a spent spec.budget).
- `fallback`: the rollout groups' sizes: an elastic fleet's, and how many on-demand rollout
  workers stand in for spot ones that get no node.
- `conditions`: the operator's conditions: the lifecycle's, and those only a cluster has.
- `events`: the Kubernetes Events a change emits.
- `autoscale`: the learner-driven size of an elastic fleet (rolloutWorkers.autoscaling).
- `disruption`: pods about to go (a DisruptionTarget, a node's taint, a deletion), and which of
  them get their Ray nodes drained (status.draining, `StatusUpdate.drains`).
- `compute`: `compute_status`, which puts them together.
"""

from kuberl_operator.status.actions import (
    Action,
    CreateCluster,
    DeleteCluster,
    DeleteJob,
    KubeEvent,
    Nothing,
    Requeue,
    StatusUpdate,
    StopDrivers,
    SubmitDriver,
)
from kuberl_operator.status.attempts import backoff_seconds
from kuberl_operator.status.compute import compute_status
from kuberl_operator.status.observed import (
    HEAD_GROUP,
    DriverState,
    HeadFate,
    LearnerLoad,
    Observed,
    ObservedCluster,
    ObservedDriver,
    ObservedHead,
    ObservedProgress,
    PendingSpotWorkers,
    TakenName,
    UnschedulablePods,
)
from kuberl_operator.status.phases import TERMINAL, TRANSITIONS, PhaseEvent, next_phase

__all__ = [
    "HEAD_GROUP",
    "TERMINAL",
    "TRANSITIONS",
    "Action",
    "CreateCluster",
    "DeleteCluster",
    "DeleteJob",
    "DriverState",
    "HeadFate",
    "KubeEvent",
    "LearnerLoad",
    "Nothing",
    "Observed",
    "ObservedCluster",
    "ObservedDriver",
    "ObservedHead",
    "ObservedProgress",
    "PendingSpotWorkers",
    "PhaseEvent",
    "Requeue",
    "StatusUpdate",
    "StopDrivers",
    "SubmitDriver",
    "TakenName",
    "UnschedulablePods",
    "backoff_seconds",
    "compute_status",
    "next_phase",
]
