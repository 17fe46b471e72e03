"""`kuberl serve`: the REST API, on this machine (local backend) or in front of Kubernetes."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def serve_command(
    backend: str,
    host: str,
    port: int,
    data_dir: Path | None,
    token_file: Path | None,
    max_running: int | None,
    kubeconfig: Path | None,
    kube_server: str | None,
    forwarded_allow_ips: str | None,
    secure_cookies: bool,
) -> int:
    """Serves until interrupted; 0 after a graceful stop, 1 when the configuration is refused."""
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.WARNING)
    from kuberl_api import server

    try:
        if forwarded_allow_ips is None:
            forwarded_allow_ips = server.DEFAULT_FORWARDED_ALLOW_IPS
        proxies = server.trusted_proxies(forwarded_allow_ips)
        follow_limits = server.follow_limits_from_environ(os.environ)
        if backend == "local":
            chosen, authorizer = server.local_setup(
                host,
                data_dir or server.default_data_dir(),
                token_file,
                server.default_max_running() if max_running is None else max_running,
            )
        else:
            if token_file is not None:
                raise server.ServeError(
                    "--token-file: the kubernetes backend checks tokens with a TokenReview; "
                    "it applies to the local backend only"
                )
            chosen, authorizer = server.kubernetes_setup(kubeconfig, kube_server)
    except server.ServeError as exc:
        print(f"kuberl serve: {exc}", file=sys.stderr)
        return 1
    server.serve(chosen, authorizer, host, port, proxies, secure_cookies, follow_limits)
    return 0
