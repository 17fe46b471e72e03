"""Spec edits under a running attempt: which fields changed since its RayCluster was built.

A running Ray cluster and its driver keep the spec they were built from; an edit of the spec
applies on the next attempt, except the fields the operator acts on itself (APPLIED_IN_PLACE) and
rolloutWorkers.replicas within the bounds the cluster was built with (minReplicas and
maxReplicas, which the operator resizes the rollout group within, and the driver follows). So
the RayCluster carries a hash of each other field (SPEC_HASHES_ANNOTATION), and `stale_spec`
names the fields whose edit is still waiting for a new attempt.
"""

from __future__ import annotations

import hashlib
import json

from kuberl_operator.builders.names import Object
from kuberl_operator.constants import KUEUE_ELASTIC_JOB_ANNOTATION
from kuberl_operator.spec import RLJob

# On the RayCluster: the hashes of the spec fields it was built from (`spec_hashes`).
SPEC_HASHES_ANNOTATION = "kuberl.io/spec-hashes"

# What the operator itself acts on: an edit of these applies at once, with no new Ray cluster.
APPLIED_IN_PLACE = frozenset(
    {"suspend", "budget", "restartPolicy", "activeDeadlineSeconds", "ttlSecondsAfterFinished"}
)


def scales_in_place(job: RLJob, kueue_elastic: bool) -> bool:
    """Whether the job's rollout group is resized in place as its replicas change: an elastic
    fleet (minReplicas and maxReplicas both set), unless it is queued in a Kueue whose elastic jobs
    (`kueue_elastic`) are off, which holds it to the shape it admitted (scaling.py)."""
    workers = job.spec.rollout_workers
    elastic = workers.min_replicas is not None and workers.max_replicas is not None
    return elastic and (job.queue_name is None or kueue_elastic)


def spec_hashes(job: RLJob, kueue_elastic: bool = False) -> dict[str, str]:
    """A short hash of each spec field the Ray cluster and the driver are built from (every field
    but APPLIED_IN_PLACE), kept on the RayCluster so a later edit of one can be named."""
    spec = job.spec.model_dump(mode="json", by_alias=True)
    if scales_in_place(job, kueue_elastic):
        # Its bounds, not its desired count, are what the cluster is built from. A fixed fleet's
        # replicas is one of its bounds, and needs a new attempt.
        del spec["rolloutWorkers"]["replicas"]
    return {
        key: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]
        for key, value in sorted(spec.items())
        if key not in APPLIED_IN_PLACE
    }


def stale_spec(job: RLJob, ray_cluster: Object) -> tuple[str, ...]:
    """The spec fields edited since `ray_cluster` was built (they apply on the next attempt).
    A cluster without the annotation (made by hand, or by an older operator) reports none."""
    annotation = (ray_cluster.get("metadata", {}).get("annotations") or {}).get(
        SPEC_HASHES_ANNOTATION
    )
    try:
        built = json.loads(annotation or "null")
    except ValueError:
        return ()
    if not isinstance(built, dict):
        return ()
    annotations = ray_cluster["metadata"].get("annotations") or {}
    now = spec_hashes(job, annotations.get(KUEUE_ELASTIC_JOB_ANNOTATION) == "true")
    return tuple(key for key in sorted(now.keys() | built.keys()) if now.get(key) != built.get(key))
