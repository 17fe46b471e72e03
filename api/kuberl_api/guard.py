"""What the API refuses before a route runs: requests that a web page could have forged.

A page on any site can make the browser send a POST or a DELETE to the API (a form, or `fetch` in
`no-cors` mode needs no CORS preflight), and a DNS-rebinding page can even make the API's address
its own origin. So, in front of every route:

- Without tokens (the local backend on loopback, where nobody is authenticated) only loopback Host
  headers are served: `localhost`, `127.0.0.1`, `[::1]` or another loopback IP, with any port.
  Anything else gets 421 Misdirected Request: a rebinding page sends its own name as the Host.
  With tokens every Host is served: the bearer token is what a page cannot forge.
- A state-changing request (POST, PUT, PATCH, DELETE) from a browser context of another site gets
  403: `Sec-Fetch-Site: cross-site` or `same-site`, or an `Origin` that is not the server's own
  (`null` included: sandboxed frames, local files). Clients that are not browsers (the CLI, curl)
  send neither header.

Routes add what only they know: a job submission and a scale need a JSON or YAML Content-Type
(submission.py), suspend, resume and delete take no body and refuse the media types a page sends
without asking (`no_body`), and a body is read up to a limit only (`read_body`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from fastapi import Request
from starlette.datastructures import Headers

from kuberl_api.backend import ApiError
from kuberl_api.errors import error_response

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_SITE_FETCHES = frozenset({"cross-site", "same-site"})
"""`Sec-Fetch-Site` values of a request another site's page made (same-site: another port or
subdomain, which is another site's code all the same)."""


class RequestGuard:
    """Plain ASGI middleware refusing what `refusal` refuses, with the API's `Status` answer."""

    def __init__(self, app: Any, loopback_hosts_only: bool) -> None:
        self.app, self.loopback_hosts_only = app, loopback_hosts_only

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            error = refusal(scope["method"], Headers(scope=scope), self.loopback_hosts_only)
            if error is not None:
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def refusal(method: str, headers: Headers, loopback_hosts_only: bool) -> ApiError | None:
    """Why a request is refused before any route sees it, or None."""
    host = headers.get("host", "")
    if loopback_hosts_only and not is_loopback(host_name(host)):
        return ApiError(
            421,
            "MisdirectedRequest",
            f"Host {host or '(none)'!r} is not served: without tokens this server answers only "
            f"requests to a loopback name (localhost, 127.0.0.1, [::1]); use one, or configure "
            "tokens (--token-file or KUBERL_API_TOKEN) to serve other names",
        )
    if method in STATE_CHANGING and (header := cross_site_header(headers)):
        return ApiError(
            403,
            "Forbidden",
            f"refused a {method} from another site's page ({header}): changes are taken only "
            "from this server's own pages and from clients that are not browsers (kuberl, curl)",
        )
    return None


def cross_site_header(headers: Headers) -> str | None:
    """The header showing that another site's page sent the request, as `Name: value`, or None.

    The Origin is compared with the Host by host and port only: behind a proxy that ends TLS the
    API sees http where the browser says https, and no other site can serve the same host and
    port."""
    fetch_site = headers.get("sec-fetch-site", "").strip().lower()
    if fetch_site in CROSS_SITE_FETCHES:
        return f"Sec-Fetch-Site: {fetch_site}"
    origin = headers.get("origin")
    if origin is None:
        return None
    scheme, separator, authority = origin.strip().lower().partition("://")
    own = headers.get("host", "").strip().lower()
    if not (separator and scheme in ("http", "https") and own and authority == own):
        return f"Origin: {origin}"
    return None


def host_name(host: str) -> str:
    """The name of a Host header without its port: `[::1]:8080` gives `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


SIMPLE_MEDIA_TYPES = frozenset(
    {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
)
"""The media types a page may send to another site without a CORS preflight: a form's, or
`fetch` in `no-cors` mode. Any other type (application/json) makes the browser ask first."""


def no_body(request: Request) -> None:
    """A dependency of the routes that take no body: a body of a type a page could send without
    asking is refused (415). Clients that send `Content-Type: application/json` out of habit, with
    an empty body, are served."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() in SIMPLE_MEDIA_TYPES:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"Content-Type {content_type!r}: this request takes no body; send it without one",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused with 413 as soon as it is known to exceed `limit` bytes: by its
    Content-Length before anything is read, or while a chunked one is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(f"Content-Length {declared}", limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large("the body", limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(what: str, limit: int) -> ApiError:
    return ApiError(
        413,
        "RequestEntityTooLarge",
        f"{what} is over the limit of {limit} bytes: send a smaller body",
    )
