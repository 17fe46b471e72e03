"""The REST API: FastAPI routes over one backend and one authorizer.

In front of every route, the request guard refuses what a web page could have forged (guard.py).
Every job route authorizes first (the verb RBAC would check, on rljobs in the URL's namespace, or
at the cluster scope for GET /v1/jobs), then asks the backend. Errors of any kind leave as a
Kubernetes `Status` with the field paths in `details.causes`; every status code a route can answer
is declared in the OpenAPI document, which schemathesis checks the answers against.

This module only assembles the app: the routes live in routes/ (one router per resource), what
they depend on in deps.py, the exception handlers in exception_handlers.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI

from kuberl_api.backend import Authorizer, Backend
from kuberl_api.exception_handlers import EXCEPTION_HANDLERS
from kuberl_api.guard import RequestGuard
from kuberl_api.log_follows import FollowLimits, Follows
from kuberl_api.metrics import ApiMetrics, RequestMetricsMiddleware
from kuberl_api.routes import docs, jobs, ops, page, scale
from kuberl_api.schemas import Status
from kuberl_api.sessions import PageSessions

# Any route can answer the request guard's 421 (guard.py); its 403 and 415 only some, which
# declare them.
_MISDIRECTED = {421: {"model": Status, "description": "The Host is not a loopback name."}}
_FASTAPI_VALIDATION_ERROR = {"$ref": "#/components/schemas/HTTPValidationError"}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    backend: Backend = app.state.backend
    await backend.start()
    try:
        yield
    finally:
        await backend.close()


def create_app(
    backend: Backend,
    authorizer: Authorizer,
    loopback_hosts_only: bool,
    secure_cookies: bool = False,
    follow_limits: FollowLimits | None = None,
) -> FastAPI:
    """The API over `backend`; starting and closing the backend follow the app's lifespan.
    `loopback_hosts_only`: serve only requests to a loopback Host (when nobody is authenticated);
    `secure_cookies`: mark the status page's session cookie `Secure` even on a request that did
    not come over HTTPS (page.cookie_is_secure); `follow_limits`: the most log follows open at
    once (by default from the environment: log_follows.FollowLimits.from_environ)."""
    metrics = ApiMetrics(counts_jobs=backend.counts_jobs)
    app = FastAPI(
        title="kuberl API",
        version="v1",
        summary="Submit, follow and control reinforcement-learning jobs (RLJobs).",
        description=f"Backend: `{backend.name}`. Errors are Kubernetes `Status` objects whose "
        "`details.causes` name each bad field.",
        lifespan=lifespan,
        responses=_MISDIRECTED if loopback_hosts_only else None,
        exception_handlers=EXCEPTION_HANDLERS,
        # The documentation pages are docs.py's, which serves their scripts itself (no CDN).
        docs_url=None,
        redoc_url=None,
    )
    # What the routes depend on (deps.py reads it from here).
    app.state.backend = backend
    app.state.authorizer = authorizer
    app.state.metrics = metrics
    app.state.follows = Follows(follow_limits or FollowLimits.from_environ(os.environ))
    app.state.sessions = PageSessions()
    app.state.secure_cookies = secure_cookies
    app.add_middleware(RequestGuard, loopback_hosts_only=loopback_hosts_only)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # outermost: refusals count too
    app.include_router(jobs.router(backend.history_source))
    app.include_router(scale.router())
    app.include_router(page.router)
    app.include_router(ops.router)
    app.include_router(docs.router)
    app.mount(docs.STATIC_ROUTE, docs.STATIC_FILES, name="docs_static")
    app.openapi = partial(openapi_document, app)  # type: ignore[method-assign]
    return app


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, without the 422 FastAPI documents on every route with
    parameters: a bad parameter here is a 400 Status (exception_handlers.bad_parameters), which
    every route declares, never FastAPI's HTTPValidationError. A route's own 422 (an invalid
    RLJob) is a Status and stays."""
    if app.openapi_schema is None:
        document = FastAPI.openapi(app)
        for operations in document["paths"].values():
            for operation in operations.values():
                responses = operation["responses"]
                if _schema_of(responses.get("422", {})) == _FASTAPI_VALIDATION_ERROR:
                    del responses["422"]
        schemas = document.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
    return app.openapi_schema


def _schema_of(response: dict[str, Any]) -> Any:
    return response.get("content", {}).get("application/json", {}).get("schema")
