"""The operations routes: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from kuberl_api.deps import BackendDep, CurrentCaller, MetricsDep
from kuberl_api.metrics import visible_jobs

router = APIRouter(tags=["ops"])

# Each route declares its text content itself (response_class=Response): under a text
# response_class FastAPI would document the request guard's JSON refusals as text too.
_TEXT = {"content": {"text/plain": {"schema": {"type": "string"}}}}

_BEARER_OPTIONAL = {"security": [{}]}
"""The scrape is served without a token too (requests and latency only): `{}` is OpenAPI's
"no credentials", added to the bearer scheme FastAPI documents (it appends lists)."""


@router.get("/healthz", response_class=Response, responses={200: _TEXT})
async def healthz():
    """The process answers."""
    return PlainTextResponse("ok")


@router.get("/readyz", response_class=Response, responses={200: _TEXT, 503: _TEXT})
async def readyz(backend: BackendDep):
    """The backend can serve requests (503 with the reason when not)."""
    reason = await backend.not_ready_reason()
    return PlainTextResponse(reason or "ok", status_code=503 if reason else 200)


@router.get(
    "/metrics", response_class=Response, responses={200: _TEXT}, openapi_extra=_BEARER_OPTIONAL
)
async def prometheus_metrics(caller: CurrentCaller, backend: BackendDep, metrics: MetricsDep):
    """Prometheus exposition. Requests and their latency, for anyone; jobs by phase and each
    job's latest return and timesteps only for the namespaces whose rljobs the caller's bearer
    token may list (as GET .../jobs would be authorized). Without a valid token nothing is
    listed; the series of a namespace the token may not list are left out; the scrape itself
    never fails on it."""
    body = metrics.render(await visible_jobs(backend, caller.authorizer, caller.token))
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
