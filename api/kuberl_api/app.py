"""The REST API: FastAPI routes over one backend and one authorizer.

In front of every route, the request guard refuses what a web page could have forged (guard.py).
Every job route authorizes first (the verb RBAC would check, on rljobs in the URL's namespace),
then asks the backend. Errors of any kind leave as a Kubernetes `Status` with the field paths in
`details.causes`; every status code a route can answer is declared in the OpenAPI document, which
schemathesis checks the answers against.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from kuberl_api.backend import Action, ApiError, Authorizer, Backend, Cause, ListQuery, Verb
from kuberl_api.errors import error_response, status_response
from kuberl_api.guard import RequestGuard, no_body, read_body
from kuberl_api.metrics import ApiMetrics, RequestMetricsMiddleware, listable
from kuberl_api.page import PLOT_ROUTE, cookie_token, page_routes
from kuberl_api.schemas import ProgressHistory, ProgressPoint, RLJobList, Status
from kuberl_api.submission import JSON_TYPES, MAX_BODY_BYTES, YAML_TYPES, parse_submission
from kuberl_operator.constants import MAX_JOB_NAME_LENGTH
from kuberl_operator.spec import DNS_LABEL_PATTERN, JOB_NAME_PATTERN, Phase, RLJob
from kuberl_trainer.plots import MEDIA_TYPES, Curve, PlotFormat, draw

log = logging.getLogger(__name__)

Namespace = Annotated[
    str, Path(description="The job's namespace.", max_length=63, pattern=DNS_LABEL_PATTERN)
]
JobName = Annotated[
    str,
    Path(description="The job's name.", max_length=MAX_JOB_NAME_LENGTH, pattern=JOB_NAME_PATTERN),
]
bearer = HTTPBearer(auto_error=False, description="A bearer token, as configured for the server.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
NoBody = [Depends(no_body)]


# Any route can answer the request guard's 421 (guard.py); its 403 and 415 only some, which
# declare them.
_MISDIRECTED = {421: {"model": Status, "description": "The Host is not a loopback name."}}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error codes a route answers (all with a Status body)."""
    return {code: {"model": Status} for code in (400, 401, 403, 500, 503, *codes)}


def create_app(backend: Backend, authorizer: Authorizer, loopback_hosts_only: bool) -> FastAPI:
    """The API over `backend`; starting and closing the backend follow the app's lifespan.
    `loopback_hosts_only`: serve only requests to a loopback Host (when nobody is authenticated)."""
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await backend.start()
        try:
            yield
        finally:
            await backend.close()

    app = FastAPI(
        title="kuberl API",
        version="v1",
        summary="Submit, follow and control reinforcement-learning jobs (RLJobs).",
        description=f"Backend: `{backend.name}`. Errors are Kubernetes `Status` objects whose "
        "`details.causes` name each bad field.",
        lifespan=lifespan,
        responses=_MISDIRECTED if loopback_hosts_only else None,
    )
    app.add_middleware(RequestGuard, loopback_hosts_only=loopback_hosts_only)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # outermost: refusals count too

    async def authorize(credentials: Credentials, verb: Verb, namespace: str, name: str | None):
        token = credentials.credentials if credentials else None
        await authorizer.authorize(token, Action(verb, namespace, name))

    # --- errors ---------------------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def bad_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
        causes = [
            Cause(".".join(str(part) for part in error["loc"][1:]) or "request", error["msg"])
            for error in exc.errors()
        ]
        message = "; ".join(f"{cause.field}: {cause.message}" for cause in causes)
        return status_response(400, "BadRequest", message, causes)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "BadRequest")
        return status_response(exc.status_code, reason, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return status_response(500, "InternalError", f"internal error: {type(exc).__name__}")

    # --- jobs -----------------------------------------------------------------------------------

    jobs = "/v1/namespaces/{namespace}/jobs"
    job = jobs + "/{name}"
    body_schema = {"$ref": "#/components/schemas/RLJob"}

    @app.post(
        jobs,
        status_code=201,
        response_model=RLJob,
        responses=_errors(404, 409, 413, 415, 422),
        tags=["jobs"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "An RLJob manifest, as JSON or YAML.",
                "content": {
                    **{media: {"schema": body_schema} for media in sorted(JSON_TYPES)},
                    **{media: {"schema": {"type": "string"}} for media in sorted(YAML_TYPES)},
                },
            }
        },
    )
    async def submit_job(namespace: Namespace, request: Request, credentials: Credentials):
        """Submit a job. 201 with the stored job; 409 when the name is taken; 422 naming every
        bad field. Nothing is stored unless the whole job is valid."""
        await authorize(credentials, "create", namespace, None)
        body = await read_body(request, MAX_BODY_BYTES)
        job_model, document = parse_submission(body, request.headers.get("content-type"), namespace)
        stored = await backend.create(namespace, job_model, document)
        return JSONResponse(stored, status_code=201)

    @app.get(jobs, response_model=RLJobList, responses=_errors(), tags=["jobs"])
    async def list_jobs(
        namespace: Namespace,
        credentials: Credentials,
        phase: Annotated[Phase | None, Query(description="Only jobs in this phase.")] = None,
        label_selector: Annotated[
            str | None,
            Query(
                alias="labelSelector",
                description="Kubernetes label selector: `team=rl,tier in (a,b),!canary`.",
            ),
        ] = None,
        limit: Annotated[
            int | None, Query(ge=0, description="At most this many jobs (0: no limit).")
        ] = None,
        continue_token: Annotated[
            str | None,
            Query(alias="continue", description="`metadata.continue` of the previous page."),
        ] = None,
    ):
        """List the namespace's jobs by name, a page at a time."""
        await authorize(credentials, "list", namespace, None)
        query = ListQuery(phase, label_selector, limit or None, continue_token)
        found = await backend.list(namespace, query)
        metadata = {"continue": found.continue_token} if found.continue_token else {}
        return JSONResponse(
            {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJobList", "metadata": metadata}
            | {"items": found.items}
        )

    @app.get(job, response_model=RLJob, responses=_errors(404), tags=["jobs"])
    async def get_job(namespace: Namespace, name: JobName, credentials: Credentials):
        """One job, with its status."""
        await authorize(credentials, "get", namespace, name)
        return Response(await backend.get_json(namespace, name), media_type="application/json")

    @app.get(
        job + "/progress",
        response_model=ProgressHistory,
        responses=_errors(404),
        tags=["jobs"],
        description="The job's training progress, one row per iteration. Source in this "
        f"deployment: {backend.history_source}.",
    )
    async def job_progress(namespace: Namespace, name: JobName, credentials: Credentials):
        await authorize(credentials, "get", namespace, name)
        rows = await backend.progress(namespace, name)
        history = ProgressHistory(
            namespace=namespace,
            name=name,
            source=backend.history_source,
            items=[ProgressPoint(**asdict(row)) for row in rows],
        )
        return JSONResponse(history.model_dump(mode="json", by_alias=True))

    @app.post(
        job + "/suspend",
        response_model=RLJob,
        responses=_errors(404, 415),
        dependencies=NoBody,
        tags=["jobs"],
    )
    async def suspend_job(namespace: Namespace, name: JobName, credentials: Credentials):
        """Set spec.suspend: a running trainer checkpoints and stops; the job is Suspended."""
        await authorize(credentials, "patch", namespace, name)
        return JSONResponse(await backend.set_suspended(namespace, name, True))

    @app.post(
        job + "/resume",
        response_model=RLJob,
        responses=_errors(404, 415),
        dependencies=NoBody,
        tags=["jobs"],
    )
    async def resume_job(namespace: Namespace, name: JobName, credentials: Credentials):
        """Clear spec.suspend: the job continues from its newest checkpoint."""
        await authorize(credentials, "patch", namespace, name)
        return JSONResponse(await backend.set_suspended(namespace, name, False))

    @app.delete(
        job, response_model=RLJob, responses=_errors(404, 415), dependencies=NoBody, tags=["jobs"]
    )
    async def delete_job(namespace: Namespace, name: JobName, credentials: Credentials):
        """Stop the job's trainer and remove the job; answers the job as it was."""
        await authorize(credentials, "delete", namespace, name)
        return JSONResponse(await backend.delete(namespace, name))

    @app.get(
        job + "/logs",
        responses={
            **_errors(404, 501),
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        },
        tags=["jobs"],
    )
    async def job_logs(
        namespace: Namespace,
        name: JobName,
        credentials: Credentials,
        tail_lines: Annotated[
            int | None, Query(alias="tailLines", ge=0, description="Only the last N lines.")
        ] = None,
    ):
        """The trainer's output (stdout and stderr), where the backend keeps it."""
        await authorize(credentials, "get", namespace, name)
        return PlainTextResponse(await backend.logs(namespace, name, tail_lines))

    @app.get(
        job + "/plot",
        name=PLOT_ROUTE,
        response_class=Response,
        responses={
            **_errors(404, 501),
            200: {
                "description": "The learning curve.",
                "content": {
                    "image/png": {"schema": {"type": "string", "format": "binary"}},
                    "image/svg+xml": {"schema": {"type": "string"}},
                },
            },
        },
        tags=["jobs"],
    )
    async def job_plot(
        namespace: Namespace,
        name: JobName,
        request: Request,
        credentials: Credentials,
        format: Annotated[PlotFormat, Query(description="The image format.")] = "png",
    ):
        """The job's learning curve: the mean episode return (the greedy evaluation's dashed)
        against env steps; a job without progress yet gets a figure saying so. The status page's
        cookie is accepted in place of the bearer token. 501 where the backend keeps no history."""
        token = credentials.credentials if credentials else cookie_token(request)
        await authorizer.authorize(token, Action("get", namespace, name))
        if backend.no_history_reason:
            await backend.get(namespace, name)  # an unknown job is a 404 all the same
            raise ApiError(501, "NotImplemented", backend.no_history_reason)
        rows = await backend.progress(namespace, name)
        curve = Curve(
            name,
            timesteps=[row.timesteps for row in rows],
            returns=[row.episode_return_mean for row in rows],
            evaluation_returns=[row.evaluation_return_mean for row in rows],
        )
        # matplotlib draws for tens of milliseconds: off the event loop.
        image = await asyncio.to_thread(draw, [curve], format, name)
        return Response(
            image, media_type=MEDIA_TYPES[format], headers={"Cache-Control": "no-cache"}
        )

    app.include_router(page_routes(backend, authorizer))

    # --- operations -----------------------------------------------------------------------------

    text_200 = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}}

    @app.get("/healthz", response_class=PlainTextResponse, responses=text_200, tags=["ops"])
    async def healthz():
        """The process answers."""
        return PlainTextResponse("ok")

    @app.get(
        "/readyz",
        response_class=PlainTextResponse,
        responses={**text_200, 503: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
        tags=["ops"],
    )
    async def readyz():
        """The backend can serve requests (503 with the reason when not)."""
        reason = await backend.not_ready_reason()
        return PlainTextResponse(reason or "ok", status_code=503 if reason else 200)

    @app.get("/metrics", response_class=PlainTextResponse, responses=text_200, tags=["ops"])
    async def prometheus_metrics(credentials: Credentials):
        """Prometheus exposition. Requests and their latency, for anyone; jobs by phase and each
        job's latest return and timesteps only for the namespaces whose rljobs the caller's bearer
        token may list (as GET .../jobs would be authorized). The series of a namespace the token
        may not list are left out; the scrape itself never fails on it."""
        token = credentials.credentials if credentials else None
        body = metrics.render(await listable(await backend.summaries(), authorizer, token))
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
