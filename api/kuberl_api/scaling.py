"""A job's scale: the rollout workers it wants (spec.rolloutWorkers.replicas), how many are ready,
and the bounds a scale stays within; what PUT .../scale takes, and when a scale is refused.

The bounds are the job's own: a job scaled to N workers must still be a valid job, as an edit of
spec.rolloutWorkers.replicas would have to be, so with minReplicas and maxReplicas both set N is
within them. The kubernetes backend leaves that check to the API server and the operator's
webhook (its scale review makes the same one); the local backend makes it with `scale_refusal`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kuberl_api.backend import ApiError, Cause
from kuberl_api.local_lifecycle import manifest_of, with_workers
from kuberl_api.schemas import JobScale, ScaleRequest
from kuberl_api.submission import decode_body
from kuberl_contract.config.rollout import RolloutConfig
from kuberl_operator.validation import InvalidManifest, validate_rljob

WORKERS_FIELD = "spec.rolloutWorkers.replicas"
"""The field a scale writes (the CRD's specReplicasPath), named by its refusals."""

MAX_SCALE_BODY_BYTES = 4096
"""A scale's body is one number: anything much longer is not one."""


def parse_scale_request(body: bytes, content_type: str | None) -> int:
    """The workers a PUT .../scale body asks for; ApiError 415 for a body that is not JSON or
    YAML, 422 naming the field for one that is not `{"workers": N}` with N >= 0."""
    try:
        document = decode_body(body, content_type, '{"workers": N}')
        return ScaleRequest.model_validate(document).workers
    except InvalidManifest as exc:
        causes = [Cause(problem.path, problem.message) for problem in exc.problems]
    except ValidationError as exc:
        causes = [
            Cause(".".join(str(part) for part in error["loc"]) or "(body)", error["msg"])
            for error in exc.errors()
        ]
    summary = "; ".join(f"{cause.field}: {cause.message}" for cause in causes)
    raise ApiError(422, "Invalid", f'invalid scale (send {{"workers": N}}): {summary}', causes)


def scale_of(job: dict[str, Any]) -> JobScale:
    """The scale of the RLJob document `job`."""
    # Read as written, not validated: a job scaled out of its bounds where no webhook guarded it
    # still shows its scale (and its status says why it failed).
    written = (job.get("spec") or {}).get("rolloutWorkers") or {}
    rollout = RolloutConfig.model_construct(**written)
    return JobScale(
        workers=rollout.replicas,
        ready_workers=(job.get("status") or {}).get("replicas") or 0,
        min_workers=rollout.fewest,
        max_workers=rollout.most,
        elastic=rollout.min_replicas is not None and rollout.max_replicas is not None,
    )


def scale_refusal(job: dict[str, Any], workers: int) -> ApiError | None:
    """Why the stored RLJob document `job` may not be scaled to `workers` (422, each problem on
    spec.rolloutWorkers.replicas), or None: the job so scaled must be valid, as an edit would
    have to be."""
    try:
        validate_rljob(manifest_of(with_workers(job, workers)))
    except InvalidManifest as exc:
        causes = [Cause(WORKERS_FIELD, f"{workers}: {problem}") for problem in exc.problems]
        summary = "; ".join(cause.message for cause in causes)
        return ApiError(422, "Invalid", f"{WORKERS_FIELD}: cannot scale to {summary}", causes)
    return None
