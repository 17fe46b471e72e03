"""The local backend's job documents: what is stored at submission, what the trainer reads, and
each change of status, decided by `kuberl_operator.status.local_decide` and worked out by the
lifecycle the operator shares (`kuberl_operator.status.lifecycle`): the same phases, conditions,
reasons, attempts, startTime, completionTime and observedGeneration, so a client reads a job alike
on both backends."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from kuberl_operator.spec import RLJob, RLJobStatus
from kuberl_operator.status.lifecycle import enter
from kuberl_operator.status.local_decide import Change, submitted


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def initial_document(job: RLJob, namespace: str, created: datetime) -> dict[str, Any]:
    """The job as stored at submission: validated spec with defaults, server-set metadata, and a
    first status (Suspended when submitted with spec.suspend, else Pending)."""
    document = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["metadata"] |= {
        "namespace": namespace,
        "uid": str(uuid.uuid4()),
        "creationTimestamp": timestamp(created),
        "generation": 1,
    }
    document["status"] = {}
    return with_change(document, submitted(job.spec.suspend), created)


def manifest_of(document: dict[str, Any]) -> dict[str, Any]:
    """What the trainer reads: the job without status and server-set metadata."""
    metadata = {key: document["metadata"][key] for key in ("name", "namespace", "labels")}
    return {
        "apiVersion": document["apiVersion"],
        "kind": document["kind"],
        "metadata": metadata,
        "spec": document["spec"],
    }


def with_suspend(document: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """`spec.suspend` set as asked; the generation moves only when the spec changes."""
    if document["spec"].get("suspend", False) == suspend:
        return document
    return _with_spec(document, {**document["spec"], "suspend": suspend})


def with_workers(document: dict[str, Any], workers: int) -> dict[str, Any]:
    """`spec.rolloutWorkers.replicas` set as asked (the rest of the spec untouched); the
    generation moves only when the spec changes."""
    rollout = document["spec"].get("rolloutWorkers") or {}
    if rollout.get("replicas") == workers:
        return document
    return _with_spec(
        document, {**document["spec"], "rolloutWorkers": rollout | {"replicas": workers}}
    )


def _with_spec(document: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The document with a changed `spec`, one generation on."""
    metadata = {**document["metadata"], "generation": document["metadata"]["generation"] + 1}
    return {**document, "metadata": metadata, "spec": spec}


def with_change(document: dict[str, Any], change: Change, at: datetime) -> dict[str, Any]:
    """The document after `change`, its status as the lifecycle the operator shares decides it
    (`lifecycle.enter`): the phase, the five conditions, the attempt, startTime and
    completionTime."""
    previous = RLJobStatus.model_validate(document["status"])
    generation = document["metadata"]["generation"]
    status = enter(previous, change.events, change.entered, at, generation)
    return {**document, "status": status.model_dump(mode="json", by_alias=True, exclude_none=True)}
