"""The one shape of every refusal: a Kubernetes `Status` as JSON, whoever refuses (a route, the
exception handlers or the request guard in front of them)."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from kuberl_api.backend import ApiError, Cause
from kuberl_api.schemas import Status, StatusCause, StatusDetails


def status_response(
    code: int,
    reason: str,
    message: str,
    causes: list[Cause] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    status = Status(
        code=code,
        reason=reason,
        message=message,
        details=StatusDetails(
            causes=[StatusCause(field=c.field, message=c.message) for c in causes or []]
        ),
    )
    if code == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(
        status.model_dump(mode="json", by_alias=True), status_code=code, headers=headers
    )


def error_response(error: ApiError) -> JSONResponse:
    return status_response(error.code, error.reason, error.message, error.causes)
