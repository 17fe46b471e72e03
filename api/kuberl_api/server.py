"""`kuberl serve`: the API with its backend and authorizer chosen from the command line, on uvicorn.

The one rule enforced here: without tokens (local backend) nobody is authenticated, so the API
then refuses any address but loopback, where only this machine's users can reach it (and serves
only loopback Host headers there, which keeps DNS-rebinding pages out: guard.py).

Behind a proxy that ends TLS, uvicorn takes the request's scheme (and client address) from the
proxy's `X-Forwarded-Proto` (and `X-Forwarded-For`) only when the proxy's address is listed in
--forwarded-allow-ips (`trusted_proxies`); from anyone else the headers are ignored. The scheme
decides whether the status page's session cookie is `Secure`, as --secure-cookies does always
(page.cookie_is_secure).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from kuberl_api.auth import NoAuth, StaticTokens, load_tokens
from kuberl_api.backend import Authorizer, Backend
from kuberl_api.guard import is_loopback
from kuberl_api.log_follows import FollowLimits

log = logging.getLogger("kuberl_api")

DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"
"""The proxies believed by default, as by uvicorn's: one on this machine (or a sidecar in this
pod), whose address nobody elsewhere can send from."""


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


def trusted_proxies(text: str) -> list[str]:
    """--forwarded-allow-ips as uvicorn takes it: comma-separated IP addresses and networks
    (`10.0.0.0/8`), `*` for any address, nothing for none. uvicorn would keep an entry that is
    neither as a name no peer ever has, silently trusting nobody; here it is an error."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if "*" in entries:
        return ["*"]
    for entry in entries:
        try:
            if "/" in entry:
                ipaddress.ip_network(entry)
            else:
                ipaddress.ip_address(entry)
        except ValueError:
            raise ServeError(
                f"--forwarded-allow-ips: {entry!r} is not an IP address or network (such as "
                "10.0.0.0/8, without host bits), nor *: list the addresses of the proxies in "
                "front of the API, separated by commas"
            ) from None
    return entries


def follow_limits_from_environ(environ: Mapping[str, str]) -> FollowLimits:
    """The log follow limits the environment sets (log_follows.FollowLimits), or ServeError
    naming the variable whose value is refused."""
    try:
        return FollowLimits.from_environ(environ)
    except ValueError as exc:
        raise ServeError(str(exc)) from None


def start_banner(backend: str, host: str, port: int) -> str:
    """The line saying where the API serves: `kuberl API (local backend) on http://...`."""
    address = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"kuberl API ({backend} backend) on http://{address}:{port} (Ctrl+C stops it)"


def serve(
    backend: Backend,
    authorizer: Authorizer,
    host: str,
    port: int,
    forwarded_allow_ips: list[str],
    secure_cookies: bool = False,
    follow_limits: FollowLimits | None = None,
) -> None:
    """Runs until interrupted (SIGINT/SIGTERM end it gracefully). `forwarded_allow_ips`: the
    proxies whose forwarded headers are believed (`trusted_proxies`); `secure_cookies`: the
    session cookie is always `Secure`; `follow_limits`: the log follows open at once
    (`follow_limits_from_environ`)."""
    import uvicorn

    from kuberl_api.app import create_app

    app = create_app(
        backend,
        authorizer,
        loopback_hosts_only=isinstance(authorizer, NoAuth),
        secure_cookies=secure_cookies,
        follow_limits=follow_limits,
    )
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
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
    )
