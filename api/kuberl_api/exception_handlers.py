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

from kuberl_api.backend import ApiError, Cause
from kuberl_api.errors import error_response, status_response

log = logging.getLogger(__name__)


async def api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc)


async def bad_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
    causes = [
        Cause(".".join(str(part) for part in error["loc"][1:]) or "request", error["msg"])
        for error in exc.errors()
    ]
    message = "; ".join(f"{cause.field}: {cause.message}" for cause in causes)
    return status_response(400, "BadRequest", message, causes)


async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
    reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "BadRequest")
    return status_response(exc.status_code, reason, str(exc.detail), headers=exc.headers)


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
