"""spec.restartPolicy: how many restarts a job gets, the backoff between them, and what a
preemption does."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from kuberl_contract.config import Spec


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
