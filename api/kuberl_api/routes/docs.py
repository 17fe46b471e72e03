"""The API's documentation pages, `/docs` (Swagger UI) and `/redoc` (ReDoc), served whole by the
API itself: FastAPI's default pages load their script and stylesheet from a CDN, so they are blank
wherever the API is reached offline (an air-gapped cluster, a laptop on a train).

The scripts and stylesheet are the ones the `fastapi-offline` package ships (swagger-ui-dist 5,
Apache-2.0; ReDoc 2, MIT), served under STATIC_ROUTE. Each page gets a Content Security Policy as
strict as it can work under: scripts only from this server plus, for Swagger UI, the one inline
script that starts it (allowed by its hash, computed from the page itself).
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_ROUTE = "/docs"
REDOC_ROUTE = "/redoc"
STATIC_ROUTE = "/docs/static"
"""Where the pages' scripts, stylesheet and icon are served from."""

STATIC_FILES = StaticFiles(directory=str(files("fastapi_offline").joinpath("static")))
"""swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js and favicon.png."""

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(include_in_schema=False)


@router.get(DOCS_ROUTE)
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over this API's OpenAPI document."""
    app, root = request.app, request.scope.get("root_path", "")
    page = get_swagger_ui_html(
        openapi_url=f"{root}{app.openapi_url}",
        title=f"{app.title} - Swagger UI",
        swagger_js_url=f"{root}{STATIC_ROUTE}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{STATIC_ROUTE}/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC_ROUTE}/favicon.png",
        swagger_ui_parameters=app.swagger_ui_parameters,
    )
    # Swagger UI sets style attributes from its script (so 'unsafe-inline' styles) and draws its
    # icons from data: URLs.
    policy = (
        f"default-src 'none'; script-src 'self' {inline_script_hashes(page.body.decode())}; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    return _with_headers(page, policy)


@router.get(REDOC_ROUTE)
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over this API's OpenAPI document."""
    app, root = request.app, request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{app.openapi_url}",
        title=f"{app.title} - ReDoc",
        redoc_js_url=f"{root}{STATIC_ROUTE}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{STATIC_ROUTE}/favicon.png",
        with_google_fonts=False,  # fonts from Google would need the network too
    )
    # ReDoc writes its styles into the page (styled-components) and searches in a Web Worker it
    # makes from a blob: URL.
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; worker-src blob:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    return _with_headers(page, policy)


def inline_script_hashes(page: str) -> str:
    """The CSP sources allowing the page's inline scripts and no others: `'sha256-…'` each."""
    return " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(page)
    )


def _with_headers(page: HTMLResponse, policy: str) -> HTMLResponse:
    page.headers.update({"Content-Security-Policy": policy, **_COMMON_HEADERS})
    return page
