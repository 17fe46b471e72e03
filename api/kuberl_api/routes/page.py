"""The status page's routes: `GET /` (the page), `POST /login` and `POST /logout` (the session
and its cookie). page.py draws the page and says why the cookie cannot be used to change anything;
sessions.py keeps the sessions.

The page and the login form take their token from the header, the cookie or the form rather than
from a declared security scheme, so these routes ask for the authorizer itself (`AuthorizerDep`).
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response

from kuberl_api.backend import Action, ApiError, Authorizer, ListQuery, bad_request
from kuberl_api.deps import BackendDep
from kuberl_api.guard import read_body
from kuberl_api.page import (
    PAGE_LIMIT,
    cookie_is_secure,
    forbidden_page,
    jobs_page,
    login_page,
    page_sessions,
    request_token,
    session_id,
    session_token,
)
from kuberl_api.schemas import Status
from kuberl_api.sessions import SESSION_COOKIE
from kuberl_operator.spec import DNS_LABEL_PATTERN

router = APIRouter(tags=["page"])

_MAX_FORM_BYTES = 16 * 1024
_HTML_TEXT = {"text/html": {"schema": {"type": "string"}}}
_STATUS_BODY = {"model": Status}

NamespaceQuery = Annotated[
    str,
    Query(description="The jobs' namespace.", max_length=63, pattern=DNS_LABEL_PATTERN),
]


def get_authorizer(request: Request) -> Authorizer:
    return request.app.state.authorizer


AuthorizerDep = Annotated[Authorizer, Depends(get_authorizer)]


# response_class=Response: the page's answers are HTML, its refusals JSON; FastAPI would document
# the Status bodies under a response_class's media type, so each content is declared instead.
@router.get(
    "/",
    response_class=Response,
    responses={
        200: {"content": _HTML_TEXT},
        401: {"content": _HTML_TEXT, "description": "The token form."},
        403: {"content": _HTML_TEXT},
        **{code: _STATUS_BODY for code in (400, 500, 503)},
    },
)
async def status_page(
    request: Request,
    backend: BackendDep,
    authorizer: AuthorizerDep,
    namespace: NamespaceQuery = "default",
):
    """The namespace's jobs as an HTML page: phase, iteration, timesteps, return and the
    learning curve of each (the first PAGE_LIMIT jobs by name)."""
    try:
        await authorizer.authorize(request_token(request), Action("list", namespace))
    except ApiError as exc:
        if exc.code == 401:
            return login_page(namespace, exc.message)
        if exc.code == 403:
            return forbidden_page(exc.message)
        raise
    first = await backend.list(namespace, ListQuery(limit=PAGE_LIMIT))

    def route_url(route: str, name: str) -> str:
        return request.app.url_path_for(route, namespace=namespace, name=name)

    return jobs_page(
        namespace, first, route_url, backend.no_history_reason, bool(session_token(request))
    )


@router.post(
    "/login",
    status_code=303,
    response_class=RedirectResponse,
    responses={
        303: {"description": "The token is kept in a session; on to the page."},
        401: {"content": _HTML_TEXT, "description": "The form again: the token is invalid."},
        **{code: _STATUS_BODY for code in (400, 403, 413, 415, 500, 503)},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "token": {"type": "string"},
                            "namespace": {"type": "string", "pattern": DNS_LABEL_PATTERN},
                        },
                        "required": ["token"],
                    }
                }
            },
        }
    },
)
async def login(request: Request, authorizer: AuthorizerDep):
    """Check the form's token, keep it in a session on the server, and give the browser the
    session's id in an HttpOnly cookie for the page."""
    fields = await _form(request)
    namespace = fields.get("namespace") or "default"
    if len(namespace) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, namespace):
        raise bad_request("namespace", f"{namespace!r} is not a namespace name")
    token = fields.get("token", "").strip()
    try:
        await authorizer.authorize(token or None, Action("list", namespace))
    except ApiError as exc:
        if exc.code == 401:
            return login_page(namespace, exc.message)
        if exc.code != 403:  # 403: a valid token that may not list here; the page says so
            raise
    sessions = page_sessions(request)
    sessions.close(session_id(request))  # a browser logging in again leaves no session behind
    response = RedirectResponse(_page_url(request, namespace), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        sessions.open(token),
        httponly=True,
        samesite="strict",
        secure=cookie_is_secure(request),
    )
    return response


@router.post(
    "/logout",
    status_code=303,
    response_class=RedirectResponse,
    responses={
        303: {"description": "The session is ended and its cookie cleared; back to the page."},
        403: _STATUS_BODY,
    },
)
async def logout(request: Request):
    """End the page's session: its id reads nothing any more, wherever a copy of it is."""
    page_sessions(request).close(session_id(request))
    response = RedirectResponse(request.app.url_path_for("status_page"), status_code=303)
    response.delete_cookie(
        SESSION_COOKIE, httponly=True, samesite="strict", secure=cookie_is_secure(request)
    )
    return response


def _page_url(request: Request, namespace: str) -> str:
    return f"{request.app.url_path_for('status_page')}?{urlencode({'namespace': namespace})}"


async def _form(request: Request) -> dict[str, str]:
    """The fields of an urlencoded form body (the first value of each)."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/x-www-form-urlencoded":
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"content type {media_type or '(none)'!r}: send application/x-www-form-urlencoded",
        )
    body = await read_body(request, _MAX_FORM_BYTES)
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: values[0] for key, values in fields.items()}
