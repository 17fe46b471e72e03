"""`kuberl serve`: the REST API, on this machine (local backend) or in front of Kubernetes."""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kuberl_cli.client import DEFAULT_PORT
from kuberl_cli.extras import missing_extra


class BackendName(StrEnum):
    local = "local"
    kubernetes = "kubernetes"


def serve(
    backend: Annotated[
        BackendName, typer.Option(help="local: trainer processes here; kubernetes: RLJobs.")
    ] = BackendName.local,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = DEFAULT_PORT,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Local backend: jobs database, manifests, run directories and logs "
            "[default: ~/.local/share/kuberl/api]."
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="Local backend: accepted bearer tokens, one per line (also KUBERL_API_TOKEN)."
        ),
    ] = None,
    max_running: Annotated[
        int | None,
        typer.Option(
            help="Local backend: trainers running at once; more jobs wait Pending "
            "[default: half the cores].",
            min=0,
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Kubernetes backend: kubeconfig file [default: in-cluster config, "
            "else KUBECONFIG or ~/.kube/config]."
        ),
    ] = None,
    kube_server: Annotated[
        str | None, typer.Option(help="Kubernetes backend: API server URL (overrides the config).")
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Proxies (IP addresses or networks, comma-separated; * for any) whose "
            "X-Forwarded-Proto and X-Forwarded-For are believed [default: 127.0.0.1,::1].",
            envvar="KUBERL_FORWARDED_ALLOW_IPS",
            show_default=False,
        ),
    ] = None,
    secure_cookies: Annotated[
        bool,
        typer.Option(
            "--secure-cookies",
            help="Mark the status page's session cookie Secure on every request (every browser "
            "reaches the API over HTTPS).",
            envvar="KUBERL_SECURE_COOKIES",
        ),
    ] = False,
) -> None:
    """Serve the REST API: submit, list, follow, suspend, resume and delete jobs over HTTP."""
    raise typer.Exit(
        serve_command(
            backend.value,
            host,
            port,
            data_dir,
            token_file,
            max_running,
            kubeconfig,
            kube_server,
            forwarded_allow_ips,
            secure_cookies,
        )
    )


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
    if (missing := missing_extra("api", "serve")) is not None:
        print(missing, file=sys.stderr)
        return 1
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
    if (problem := listen_problem(host, port)) is not None:
        print(f"kuberl serve: {problem}", file=sys.stderr)
        return 1
    server.serve(chosen, authorizer, host, port, proxies, secure_cookies, follow_limits)
    return 0


def listen_problem(host: str, port: int) -> str | None:
    """Why the API cannot listen on host:port (in one line, naming the port), or None: tried by
    binding as uvicorn will, so that a port in use is said before the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use by another program: pass --port"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None
