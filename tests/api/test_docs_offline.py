"""The documentation pages (/docs, /redoc) work without the internet: everything they load comes
from the API itself, over real HTTP, and a real headless Chromium draws them under their Content
Security Policy."""

import re
import shutil
import subprocess
from urllib.parse import urljoin, urlsplit

import pytest
from apiserver import ApiClient

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
"""The media type each kind of asset must be served with (browsers refuse a script or a
stylesheet of another type under `X-Content-Type-Options: nosniff`)."""


def referenced_urls(page: str) -> list[str]:
    """Every script, stylesheet and icon a page loads."""
    return re.findall(r'<script[^>]* src="([^"]+)"', page) + re.findall(
        r'<link[^>]* href="([^"]+)"', page
    )


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_load_everything_from_the_api_itself(open_queue_api, path):
    client = ApiClient(open_queue_api.url)
    page = client.request("GET", path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    urls = referenced_urls(page.text)
    assert any(url.endswith(".js") for url in urls), page.text
    for url in urls:
        absolute = urljoin(client.url + path, url)
        assert urlsplit(absolute).netloc == urlsplit(client.url).netloc, f"{url} is off-server"
        asset = client.request("GET", urlsplit(absolute).path)
        assert asset.status_code == 200, url
        expected = CONTENT_TYPES[url[url.rindex(".") :]]
        assert asset.headers["content-type"].split(";")[0] == expected, url
        assert len(asset.content) > 1000 or expected == "image/png", url
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-eval" not in policy
    # The OpenAPI document the page reads is this server's, and does not list the page.
    document = client.request("GET", "/openapi.json").json()
    assert path not in document["paths"]


def chromium_dom(url: str, tmp_path, name: str) -> tuple[str, str]:
    """The DOM Chromium built for `url` once its scripts ran and its fetches ended, and its
    console messages (CSP violations among them)."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"]
    command += ["--no-first-run", "--disable-background-networking", "--disable-component-update"]
    command += ["--disable-sync", f"--user-data-dir={tmp_path / name}"]
    # Virtual time runs until the page is idle (the OpenAPI fetch included), up to the budget.
    command += ["--enable-logging=stderr", "--v=0", "--virtual-time-budget=30000"]
    command += ["--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chromium_draws_the_docs_under_their_policy(open_queue_api, tmp_path):
    if not shutil.which(CHROMIUM):
        pytest.skip("the docs' browser test needs Chromium: apt-get install chromium")
    dom, console = chromium_dom(f"{open_queue_api.url}/docs", tmp_path, "swagger")
    assert 'data-path="/v1/namespaces/{namespace}/jobs"' in dom, console[-2000:]
    assert "Content Security Policy" not in console, console[-2000:]

    dom, console = chromium_dom(f"{open_queue_api.url}/redoc", tmp_path, "redoc")
    assert "/v1/namespaces/{namespace}/jobs/{name}/suspend" in dom, console[-2000:]
    # ReDoc's only refused load is its logo from its CDN: offline it fails anyway.
    refused = [line for line in console.splitlines() if "Content Security Policy" in line]
    assert all("logo" in line and "img-src" in line for line in refused), refused
