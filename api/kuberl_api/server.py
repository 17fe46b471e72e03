"""`kuberl serve`: the API with its backend and authorizer chosen from the command line, on uvicorn.

The one rule enforced here: without tokens (local backend) nobody is authenticated, so the API
then refuses any address but loopback, where only this machine's users can reach it (and serves
only loopback Host headers there, which keeps DNS-rebinding pages out: guard.py).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from kuberl_api.auth import NoAuth, StaticTokens, load_tokens
from kuberl_api.backend import Authorizer, Backend
from kuberl_api.guard import is_loopback

log = logging.getLogger("kuberl_api")

DEFAULT_PORT = 8080


class ServeError(Exception):
    """The server cannot start as configured; the message says why and what to change."""


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "kuberl" / "api"


def default_max_running() -> int:
    """Half the cores: a trainer keeps about one core busy, and the API needs some too."""
    return max(1, (os.cpu_count() or 2) // 2)


def local_setup(
    host: str, data_dir: Path, token_file: Path | None, max_running: int
) -> tuple[Backend, Authorizer]:
    from kuberl_api.local import LocalBackend

    try:
        tokens = load_tokens(token_file)
    except (OSError, ValueError) as exc:
        raise ServeError(f"--token-file: {exc}") from None
    if tokens:
        authorizer: Authorizer = StaticTokens(tokens)
    elif is_loopback(host):
        log.warning(
            "no tokens configured (--token-file or KUBERL_API_TOKEN): anyone on this machine "
            "can use the API on %s",
            host,
        )
        authorizer = NoAuth()
    else:
        raise ServeError(
            f"refusing to serve on {host} without authentication: give --token-file or set "
            "KUBERL_API_TOKEN, or serve on 127.0.0.1"
        )
    if max_running < 0:
        raise ServeError(f"--max-running: must be >= 0, got {max_running}")
    return LocalBackend(data_dir, max_running), authorizer


def kubernetes_setup(
    kubeconfig: Path | None, kube_server: str | None
) -> tuple[Backend, Authorizer]:
    from kuberl_api.kubernetes_backend import KubernetesBackend
    from kuberl_operator.kube import KubeConfigError, load_kube_config

    try:
        backend = KubernetesBackend(load_kube_config(kubeconfig=kubeconfig, server=kube_server))
    except KubeConfigError as exc:
        raise ServeError(str(exc)) from None
    return backend, backend.authorizer


def start_banner(backend: str, host: str, port: int) -> str:
    """The line saying where the API serves: `kuberl API (local backend) on http://...`."""
    address = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"kuberl API ({backend} backend) on http://{address}:{port} (Ctrl+C stops it)"


def serve(backend: Backend, authorizer: Authorizer, host: str, port: int) -> None:
    """Runs until interrupted (SIGINT/SIGTERM end it gracefully)."""
    import uvicorn

    from kuberl_api.app import create_app

    app = create_app(backend, authorizer, loopback_hosts_only=isinstance(authorizer, NoAuth))
    # News, not a warning: printed as uvicorn prints where it runs (its own line is silenced).
    print(start_banner(backend.name, host, port), file=sys.stderr, flush=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop="auto",
        http="auto",
        timeout_graceful_shutdown=5,
    )
