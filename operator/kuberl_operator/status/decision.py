"""`Decision`: what `decide` works out, step by step, before `compute_status` assembles the status
from it (and `conditions` and `events` say it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kuberl_operator.status.actions import Action, Nothing
from kuberl_operator.status.phases import PhaseEvent, attempt_after


@dataclass
class Decision:
    """What compute_status works out, step by step, before the status is assembled."""

    event: PhaseEvent | None = None
    reason: str = ""
    message: str = ""
    action: Action = field(default_factory=Nothing)
    attempt: int = 0
    cluster_attempt: int = 0
    """The attempt the job's Ray cluster is (to be) built for: `status.clusterAttempt`."""
    restarts: int = 0
    preemptions: int = 0
    workers_preempted: int = 0
    preempted_pods: tuple[str, ...] = ()
    in_backoff: bool = False
    waiting_for_workers: bool = False
    not_stopped: str = ""
    """Why the driver is submitted while an earlier one still runs (a Warning Event); "" else."""
    suspended: tuple[str, str] | None = None
    """(reason, message) of why the job is suspended (spec.suspend, a spent budget); None when it
    is not to be."""

    def amount_to(
        self, event: PhaseEvent, reason: str, message: str, same_cluster: bool = False
    ) -> None:
        """The observation amounts to `event`, for `reason`, said in `message`; the attempt moves
        as the event implies (`attempt_after`), and a new attempt gets a new Ray cluster unless it
        runs on the `same_cluster`."""
        self.event, self.reason, self.message = event, reason, message
        attempt = attempt_after(self.attempt, event)
        if attempt != self.attempt and not same_cluster:
            self.cluster_attempt = attempt
        self.attempt = attempt
