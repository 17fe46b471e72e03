"""The status page at `/`: a namespace's jobs with their phase, latest progress and learning curve,
for people without Grafana. Server-rendered HTML, every value escaped, no script (its Content
Security Policy forbids any), reloaded every REFRESH_SECONDS.

Authentication: a browser cannot put a bearer token on the page's `<img>` requests, so where the
server asks for tokens the page first shows a form. `POST /login` checks the token as any request
would and keeps it in an HttpOnly, SameSite=Strict session cookie. Only two read-only routes accept
that cookie in place of the `Authorization` header: this page and GET .../plot. Every other route
still needs the header, so the cookie cannot be used to change anything (no cross-site request
forgery). Kubernetes still decides what the token may read (list for the page, get for a plot).
The login and logout forms are refused (403) from another site's page, as every POST is (guard.py).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from kuberl_api.backend import Action, ApiError, Authorizer, Backend, ListQuery, bad_request
from kuberl_api.guard import read_body
from kuberl_api.schemas import Status
from kuberl_operator.spec import DNS_LABEL_PATTERN, RLJob
from kuberl_trainer.progress_row import format_return

TOKEN_COOKIE = "kuberl_token"
"""The cookie holding the token given to the page's form."""

PAGE_LIMIT = 100
"""Jobs shown on the page (the first, by name)."""

REFRESH_SECONDS = 30
PLOT_ROUTE = "job_plot"
"""The name of the route of GET .../jobs/{name}/plot, for its URL."""

_MAX_FORM_BYTES = 16 * 1024
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; background: #fff; }
table { border-collapse: collapse; }
th, td { padding: 0.3em 0.7em; border-bottom: 1px solid #ddd; text-align: left; }
td { vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
small { color: #666; }
.error { color: #a00; }
"""
_HTML_TEXT = {"text/html": {"schema": {"type": "string"}}}

NamespaceQuery = Annotated[
    str,
    Query(description="The jobs' namespace.", max_length=63, pattern=DNS_LABEL_PATTERN),
]


def cookie_token(request: Request) -> str | None:
    """The token the page's form stored, if any."""
    return request.cookies.get(TOKEN_COOKIE) or None


def request_token(request: Request) -> str | None:
    """The bearer token of the `Authorization` header, else the page's cookie."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return cookie_token(request)


def page_routes(backend: Backend, authorizer: Authorizer) -> APIRouter:
    """`GET /` (the page), `POST /login` and `POST /logout` (the token's cookie)."""
    router = APIRouter(tags=["page"])
    status_body = {"model": Status}

    @router.get(
        "/",
        response_class=HTMLResponse,
        responses={
            200: {"content": _HTML_TEXT},
            401: {"content": _HTML_TEXT, "description": "The token form."},
            403: {"content": _HTML_TEXT},
            **{code: status_body for code in (400, 500, 503)},
        },
    )
    async def status_page(request: Request, namespace: NamespaceQuery = "default"):
        """The namespace's jobs as an HTML page: phase, iteration, timesteps, return and the
        learning curve of each (the first PAGE_LIMIT jobs by name)."""
        try:
            await authorizer.authorize(request_token(request), Action("list", namespace))
        except ApiError as exc:
            if exc.code == 401:
                return _html(login_form(namespace, exc.message), 401)
            if exc.code == 403:
                return _html(_document("Forbidden", f'<p class="error">{_e(exc.message)}</p>'), 403)
            raise
        page = await backend.list(namespace, ListQuery(limit=PAGE_LIMIT))
        plots = backend.no_history_reason is None

        def plot_url(name: str) -> str:
            path = request.app.url_path_for(PLOT_ROUTE, namespace=namespace, name=name)
            return f"{path}?{urlencode({'format': 'png'})}"

        body = jobs_table(namespace, page.items, plot_url if plots else None)
        if page.continue_token:
            body += f"<p><small>The first {PAGE_LIMIT} jobs are shown.</small></p>"
        if not plots:
            body += f"<p><small>Learning curves: {_e(backend.no_history_reason or '')}.</small></p>"
        if cookie_token(request):
            body += '<form method="post" action="/logout"><button>Forget the token</button></form>'
        return _html(_document(f"kuberl jobs in {namespace}", body, refresh=True))

    @router.post(
        "/login",
        status_code=303,
        response_class=RedirectResponse,
        responses={
            303: {"description": "The token is kept in a cookie; on to the page."},
            401: {"content": _HTML_TEXT, "description": "The form again: the token is invalid."},
            **{code: status_body for code in (400, 403, 413, 415, 500, 503)},
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
    async def login(request: Request):
        """Check the form's token and keep it in an HttpOnly session cookie for the page."""
        fields = await _form(request)
        namespace = fields.get("namespace") or "default"
        if len(namespace) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, namespace):
            raise bad_request("namespace", f"{namespace!r} is not a namespace name")
        token = fields.get("token", "").strip()
        try:
            await authorizer.authorize(token or None, Action("list", namespace))
        except ApiError as exc:
            if exc.code == 401:
                return _html(login_form(namespace, exc.message), 401)
            if exc.code != 403:  # 403: a valid token that may not list here; the page says so
                raise
        response = RedirectResponse(_page_url(request, namespace), status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.post(
        "/logout",
        status_code=303,
        response_class=RedirectResponse,
        responses={
            303: {"description": "The cookie is cleared; back to the page."},
            403: status_body,
        },
    )
    async def logout(request: Request):
        """Forget the page's token."""
        response = RedirectResponse(request.app.url_path_for("status_page"), status_code=303)
        response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict")
        return response

    return router


def jobs_table(namespace: str, documents: Sequence[dict[str, Any]], plot_url: Any) -> str:
    """The page's table; `plot_url(name)` gives each job's plot, or None shows no plots."""
    header = "".join(
        f"<th>{column}</th>"
        for column in ("Job", "Phase", "Algorithm", "Env", "Iteration", "Timesteps", "Return")
    )
    header += "<th>Learning curve</th>" if plot_url else ""
    rows = "".join(_job_row(document, plot_url) for document in documents)
    if not rows:
        return _namespace_form(namespace) + f"<p>No jobs in namespace {_e(namespace)}.</p>"
    table = f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"
    return _namespace_form(namespace) + table


def login_form(namespace: str, problem: str) -> str:
    body = (
        "<p>This server needs a token to show its jobs. It is kept for this browser session in a "
        "cookie that scripts cannot read, and is sent only to this server.</p>"
        f'<p class="error">{_e(problem)}</p>'
        '<form method="post" action="/login">'
        f'<input type="hidden" name="namespace" value="{_e(namespace)}">'
        '<label>Token <input type="password" name="token" autocomplete="current-password" '
        "required></label> <button>Show the jobs</button></form>"
    )
    return _document("kuberl: a token is needed", body)


def _job_row(document: dict[str, Any], plot_url: Any) -> str:
    name = str((document.get("metadata") or {}).get("name", ""))
    try:
        job = RLJob.model_validate(document)
    except ValidationError:  # written by a newer version: show what is certain
        return f"<tr><td>{_e(name)}</td>" + '<td colspan="6">-</td></tr>'
    phase = job.status.phase.value if job.status.phase else "-"
    why = next(
        (c.message for c in job.status.conditions if c.type == phase and c.status == "True"), ""
    )
    labels = ", ".join(f"{key}={value}" for key, value in sorted(job.metadata.labels.items()))
    trainer, progress = job.spec.trainer, job.status.progress
    cells = [
        f"{_e(name)}" + (f"<br><small>{_e(labels)}</small>" if labels else ""),
        _e(phase) + (f"<br><small>{_e(why)}</small>" if why else ""),
        _e(trainer.algorithm),
        f"<code>{_e(trainer.env)}</code>",
    ]
    numbers = [f"{progress.iteration:,}", f"{progress.timesteps:,}"]
    numbers.append(format_return(progress.episode_return_mean))
    row = "".join(f"<td>{cell}</td>" for cell in cells)
    row += "".join(f'<td class="number">{_e(number)}</td>' for number in numbers)
    if plot_url:
        row += (
            f'<td><img src="{_e(plot_url(name))}" width="480" height="270" '
            f'alt="{_e(f"learning curve of {name}")}"></td>'
        )
    return f'<tr id="{_e(f"job-{name}")}">{row}</tr>'


def _namespace_form(namespace: str) -> str:
    return (
        '<form method="get" action="/"><label>Namespace '
        f'<input name="namespace" value="{_e(namespace)}"></label> <button>Show</button></form>'
    )


def _document(title: str, body: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title>{meta}<style>{_STYLE}</style></head>"
        f"<body><h1>{_e(title)}</h1>{body}</body></html>"
    )


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers=_HEADERS)


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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
