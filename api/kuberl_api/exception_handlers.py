"""The app's exception handlers: whatever goes wrong in a route, the answer is a Kubernetes
`Status` (errors.py), with the field paths of bad parameters in `details.causes`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from kuberl_api.backend import ApiError, Cause
from kuberl_api.errors import error_response, status_response

log = logging.getLogger(__name__)

HTTP_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
"""The methods of RFC 9110 and PATCH (RFC 5789), less CONNECT and TRACE, which no route serves."""


async def api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc)


async def bad_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
    causes = [
        Cause(".".join(str(part) for part in error["loc"][1:]) or "request", error["msg"])
        for error in exc.errors()
    ]
    message = "; ".join(f"{cause.field}: {cause.message}" for cause in causes)
    return status_response(400, "BadRequest", message, causes)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "BadRequest")
    headers = exc.headers
    if exc.status_code == 405 and (methods := allowed_methods(request)):
        # Starlette's Allow names the methods of the first route on the path only; a path served
        # by several routes (GET and POST .../jobs) supports all of theirs (RFC 9110, 15.5.6).
        headers = {**(headers or {}), "Allow": ", ".join(methods)}
    return status_response(exc.status_code, reason, str(exc.detail), headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method the app's routes serve on the request's path, sorted: each method of HTTP is
    offered to the router as the request's own would be, and kept when a route takes it."""
    routes = request.app.router.routes
    return [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]


async def internal_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error")
    return status_response(500, "InternalError", f"internal error: {type(exc).__name__}")


EXCEPTION_HANDLERS: dict[Any, Callable[..., Any]] = {
    ApiError: api_error,
    RequestValidationError: bad_parameters,
    HTTPException: http_error,
    Exception: internal_error,
}
"""For `FastAPI(exception_handlers=...)`."""
