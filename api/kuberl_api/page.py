"""The status page at `/`: a namespace's jobs with their phase, latest progress and learning curve,
for people without Grafana, each job linking to its details (JSON), its trainer's output and, once
exported, its policy (an ONNX download). Server-rendered HTML, every value escaped, no script (its
Content Security Policy forbids any), reloaded every REFRESH_SECONDS. It fits a window 1200 pixels
wide (plots shrink with narrower ones). A job without progress (one that failed before its first
iteration) gets no plot, and messages show no paths of the server's files, only their last part.

Authentication: a browser cannot put a bearer token on the page's `<img>` requests, so where the
server asks for tokens the page first shows a form. `POST /login` checks the token as any request
would and keeps it on the server (sessions.py); the browser gets an HttpOnly, SameSite=Strict
session cookie holding only the session's random id, `Secure` when the request came over HTTPS
(`cookie_is_secure`). `POST /logout` ends the session on the server. Only read-only routes accept
that cookie in place of the `Authorization` header: this page and the GETs it shows or links to
(a job's plot, details, logs and policy). Every other route still needs the header, so the cookie
cannot be used to change anything (no cross-site request forgery). Kubernetes still decides what
the session's token may read (list for the page, get for a job's). The login and logout forms are
refused (403) from another site's page, as every POST is (guard.py).

This module draws the page and reads the token back; the routes are in routes/page.py.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from kuberl_api.backend import JobChunk
from kuberl_api.sessions import SESSION_COOKIE, SESSION_LIFETIME_SECONDS, PageSessions
from kuberl_contract.progress_row import format_return
from kuberl_operator.spec import RLJob
from kuberl_operator.status.phases import TERMINAL

PAGE_LIMIT = 100
"""Jobs shown on the page (the first, by name)."""

REFRESH_SECONDS = 30
PLOT_WIDTH, PLOT_HEIGHT = 400, 225
"""The plots' size on the page, in CSS pixels (the PNG is drawn larger, 16:9 too, for sharpness)."""
PLOT_ROUTE = "job_plot"
"""The name of the route of GET .../jobs/{name}/plot, for its URL."""
DETAILS_ROUTE, LOGS_ROUTE, POLICY_ROUTE = "get_job", "job_logs", "job_policy"
"""The names of the routes of GET .../jobs/{name}, .../logs and .../policy, for the page's links."""

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# Links are teal rather than the browser's blue: the plots' first curve is the one blue thing on
# the page, so it stands out.
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; background: #fff; }
table { border-collapse: collapse; }
th, td { padding: 0.3em 0.7em; border-bottom: 1px solid #ddd; text-align: left; }
td { vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
small { color: #666; }
.error { color: #a00; }
code { overflow-wrap: anywhere; }
td img { max-width: 34vw; height: auto; }
a, a:visited { color: #00695c; }
"""
_SERVER_PATH = re.compile(r"(?<![\w:/.~-])/(?:[^\s/'\"]+/)+")
"""An absolute path's folders (not a URL's: those follow `:` and `/`), for `without_paths`."""


def page_sessions(request: Request) -> PageSessions:
    """The app's sessions (create_app keeps them on `app.state`)."""
    return request.app.state.sessions


def session_id(request: Request) -> str | None:
    """The id in the page's session cookie, if any."""
    return request.cookies.get(SESSION_COOKIE) or None


def session_token(request: Request) -> str | None:
    """The token of the session whose id the cookie holds, if it is live."""
    return page_sessions(request).token(session_id(request))


def request_token(request: Request) -> str | None:
    """The bearer token of the `Authorization` header, else the page's session's."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return session_token(request)


def cookie_is_secure(request: Request) -> bool:
    """Whether the session cookie is `Secure` (sent back over HTTPS only): always with
    --secure-cookies, else when the request came over HTTPS. uvicorn says so when it serves TLS
    itself, or when a proxy listed in --forwarded-allow-ips sent `X-Forwarded-Proto: https`; from
    any other address that header is ignored, so a client cannot pick the answer."""
    return request.app.state.secure_cookies or request.url.scheme == "https"


def jobs_page(
    namespace: str,
    first: JobChunk,
    route_url: Callable[[str, str], str],
    no_history_reason: str | None,
    forget_form: bool,
) -> HTMLResponse:
    """The page of the namespace's jobs (`first`, the first PAGE_LIMIT of them by name): each job's
    links and learning curve at `route_url(route, name)`, or why there are no curves
    (`no_history_reason`, the backend's); `forget_form`: a form to end the cookie's session."""
    plots = no_history_reason is None
    body = jobs_table(namespace, first.items, route_url, plots)
    if first.continue_token:
        body += f"<p><small>The first {PAGE_LIMIT} jobs are shown.</small></p>"
    if not plots:
        body += f"<p><small>Learning curves: {_e(no_history_reason or '')}.</small></p>"
    if forget_form:
        body += '<form method="post" action="/logout"><button>Forget the token</button></form>'
    return _html(_document(f"kuberl jobs in {namespace}", body, refresh=True))


def login_page(namespace: str, problem: str) -> HTMLResponse:
    """The token form (401), saying what was wrong with the token (`problem`)."""
    return _html(login_form(namespace, problem), 401)


def forbidden_page(problem: str) -> HTMLResponse:
    """A valid token that may not list the namespace's jobs (403)."""
    return _html(_document("Forbidden", f'<p class="error">{_e(problem)}</p>'), 403)


def jobs_table(
    namespace: str,
    documents: Sequence[dict[str, Any]],
    route_url: Callable[[str, str], str],
    plots: bool = True,
) -> str:
    """The page's table; `route_url(route, name)` gives the path of a job's route (its plot and
    links); `plots` false shows no plots."""
    header = "".join(
        f"<th>{column}</th>"
        for column in (
            "Job",
            "Phase",
            "Algorithm",
            "Env",
            "Iteration",
            "Timesteps",
            "Return",
            "Evaluation",
        )
    )
    header += "<th>Learning curve</th>" if plots else ""
    rows = "".join(_job_row(document, route_url, plots) for document in documents)
    if not rows:
        return _namespace_form(namespace) + f"<p>No jobs in namespace {_e(namespace)}.</p>"
    table = f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"
    return _namespace_form(namespace) + table


def login_form(namespace: str, problem: str) -> str:
    body = (
        "<p>This server needs a token to show its jobs. The server keeps it for this browser "
        f"session ({SESSION_LIFETIME_SECONDS // 3600} hours at most); the browser keeps only the "
        "session's random id, in a cookie that scripts cannot read and that is sent only to this "
        "server.</p>"
        f'<p class="error">{_e(problem)}</p>'
        '<form method="post" action="/login">'
        f'<input type="hidden" name="namespace" value="{_e(namespace)}">'
        '<label>Token <input type="password" name="token" autocomplete="current-password" '
        "required></label> <button>Show the jobs</button></form>"
    )
    return _document("kuberl: a token is needed", body)


def _job_row(document: dict[str, Any], route_url: Callable[[str, str], str], plots: bool) -> str:
    name = str((document.get("metadata") or {}).get("name", ""))
    try:
        job = RLJob.model_validate(document)
    except ValidationError:  # written by a newer version: show what is certain
        return f"<tr><td>{_e(name)}</td>" + '<td colspan="7">-</td></tr>'
    phase = job.status.phase.value if job.status.phase else "-"
    why = next(
        (c.message for c in job.status.conditions if c.type == phase and c.status == "True"), ""
    )
    why = without_paths(why)
    labels = ", ".join(f"{key}={value}" for key, value in sorted(job.metadata.labels.items()))
    trainer, progress = job.spec.trainer, job.status.progress
    links = _links(name, route_url, progress.exported_policy is not None)
    cells = [
        f"{_e(name)}"
        + (f"<br><small>{_e(labels)}</small>" if labels else "")
        + f"<br><small>{links}</small>",
        _e(phase) + (f"<br><small>{_e(why)}</small>" if why else ""),
        _e(trainer.algorithm),
        f"<code>{_e(trainer.env)}</code>",
    ]
    numbers = [f"{progress.iteration:,}", f"{progress.timesteps:,}"]
    numbers.append(format_return(progress.episode_return_mean))
    numbers.append(format_return(progress.evaluation_return_mean))
    row = "".join(f"<td>{cell}</td>" for cell in cells)
    row += "".join(f'<td class="number">{_e(number)}</td>' for number in numbers)
    if plots and progress.iteration == 0 and job.status.phase in TERMINAL:
        row += "<td><small>none: it ended before its first iteration</small></td>"
    elif plots:
        src = f"{route_url(PLOT_ROUTE, name)}?{urlencode({'format': 'png'})}"
        row += (
            f'<td><img src="{_e(src)}" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
            f'alt="{_e(f"learning curve of {name}")}"></td>'
        )
    return f'<tr id="{_e(f"job-{name}")}">{row}</tr>'


def _links(name: str, route_url: Callable[[str, str], str], exported: bool) -> str:
    """A job's details (its JSON), its trainer's output and, once exported, its policy (a
    download named after the job)."""
    links = [
        f'<a href="{_e(route_url(DETAILS_ROUTE, name))}" type="application/json">details</a>',
        f'<a href="{_e(route_url(LOGS_ROUTE, name))}" type="text/plain">logs</a>',
    ]
    if exported:
        policy = route_url(POLICY_ROUTE, name)
        links.append(f'<a href="{_e(policy)}" download="{_e(name)}.onnx">policy</a>')
    return " · ".join(links)


def without_paths(message: str) -> str:
    """`message` with each absolute path cut to its last part (`…/checkpoint-00000042`): where a
    server keeps its files is none of the page's readers' business."""
    return _SERVER_PATH.sub("…/", message)


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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
