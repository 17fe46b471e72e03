"""The scale routes, under /v1/namespaces/{namespace}/jobs/{name}/scale: how many rollout workers
a job wants and has (GET), and a new count (PUT `{"workers": N}`, `kuberl scale job NAME
--workers N`), as `kubectl scale rljob/NAME --replicas=N` writes the RLJob's scale subresource.

Authorized as kubectl scale is: `get` and `update` on rljobs/scale (which Kubernetes' edit role
grants with rljobs, and view grants `get` of), not on rljobs themselves.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kuberl_api.deps import BackendDep, CurrentCaller
from kuberl_api.guard import read_body
from kuberl_api.routes.documented import JobName, Namespace, error_responses
from kuberl_api.scaling import MAX_SCALE_BODY_BYTES, parse_scale_request, scale_of
from kuberl_api.schemas import JobScale, ScaleRequest
from kuberl_api.submission import JSON_TYPES, YAML_TYPES
from kuberl_operator.spec import RLJob

SCALE = "scale"
"""The RLJob's subresource these routes read and write."""


async def get_scale(
    namespace: Namespace, name: JobName, caller: CurrentCaller, backend: BackendDep
):
    """The job's rollout workers: wanted, ready, and the bounds a scale stays within."""
    await caller.authorize("get", namespace, name, SCALE)
    scale = scale_of(await backend.get(namespace, name))
    return JSONResponse(scale.model_dump(mode="json", by_alias=True))


async def put_scale(
    namespace: Namespace,
    name: JobName,
    request: Request,
    caller: CurrentCaller,
    backend: BackendDep,
):
    """Set the job's rollout workers (spec.rolloutWorkers.replicas); answers the job after the
    change. 422 outside [minReplicas, maxReplicas]. An elastic job on a cluster is resized as it
    runs; a fixed one with its next attempt. On the local backend a running job is refused (409):
    suspend it, scale it, resume it."""
    await caller.authorize("update", namespace, name, SCALE)
    body = await read_body(request, MAX_SCALE_BODY_BYTES)
    workers = parse_scale_request(body, request.headers.get("content-type"))
    return JSONResponse(await backend.scale(namespace, name, workers))


_BODY_SCHEMA = ScaleRequest.model_json_schema(by_alias=True)
_SCALE_BODY = {
    "requestBody": {
        "required": True,
        "description": 'The workers wanted, `{"workers": N}`, as JSON or YAML.',
        "content": {
            **{media: {"schema": _BODY_SCHEMA} for media in sorted(JSON_TYPES)},
            **{media: {"schema": {"type": "string"}} for media in sorted(YAML_TYPES)},
        },
    }
}


def router() -> APIRouter:
    """The scale routes."""
    scale = APIRouter(prefix="/v1/namespaces/{namespace}/jobs/{name}/scale", tags=["jobs"])
    scale.add_api_route(
        "", get_scale, methods=["GET"], response_model=JobScale, responses=error_responses(404)
    )
    scale.add_api_route(
        "",
        put_scale,
        methods=["PUT"],
        response_model=RLJob,
        responses=error_responses(404, 409, 413, 415, 422),
        openapi_extra=_SCALE_BODY,
    )
    return scale
