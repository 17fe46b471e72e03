"""The Kubernetes API as the kubernetes backend needs it: the one module that talks to Kubernetes.

Three things only, each with the API's own ServiceAccount: reviews (TokenReview for who a caller
is, SubjectAccessReview for what RBAC lets them do), and RLJob custom objects. Plain HTTP over
aiohttp (async, like the server; the kubernetes client library is synchronous), configured from
the pod's ServiceAccount in a cluster, or a kubeconfig, or an explicit server URL.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

from kuberl_operator.constants import GROUP, PLURAL, VERSION

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
RLJOBS_API = f"/apis/{GROUP}/{VERSION}"
TOKEN_REREAD_S = 60  # bound ServiceAccount tokens rotate; re-read the file this often


class KubeConfigError(Exception):
    """No usable way to reach Kubernetes; the message says what was tried."""


class KubeError(Exception):
    """Kubernetes answered with an error status (`code`, and its Status `message`), or 0 when it
    could not be reached."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class KubeConfig:
    """Where Kubernetes is and how the API authenticates to it."""

    server: str
    token: str | None = None
    token_file: Path | None = None
    ssl_context: ssl.SSLContext | bool | None = None  # None: aiohttp's default verification


def load_kube_config(kubeconfig: Path | None = None, server: str | None = None) -> KubeConfig:
    """A kubeconfig given explicitly (with `server` overriding its URL); else an explicit server
    URL alone (no credentials: a test server); else in-cluster (the ServiceAccount's token and
    CA); else $KUBECONFIG or ~/.kube/config."""
    if kubeconfig is not None:
        config = _kubeconfig(kubeconfig)
        return KubeConfig(
            server or config.server, config.token, config.token_file, config.ssl_context
        )
    if server:
        return KubeConfig(server=server)
    if _in_cluster():
        return _in_cluster_config()
    if _default_kubeconfig().is_file():
        return _kubeconfig(_default_kubeconfig())
    raise KubeConfigError(
        "no Kubernetes configuration: not in a cluster (no KUBERNETES_SERVICE_HOST), no "
        "kubeconfig at $KUBECONFIG or ~/.kube/config; give --kubeconfig or --kube-server"
    )


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_DIR.is_dir()


def _in_cluster_config() -> KubeConfig:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    host = f"[{host}]" if ":" in host else host
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    return KubeConfig(
        f"https://{host}:{port}", token_file=SERVICE_ACCOUNT_DIR / "token", ssl_context=context
    )


def _default_kubeconfig() -> Path:
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def _kubeconfig(path: Path) -> KubeConfig:
    """The current context's cluster and user (token or client certificate; no exec plugins)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        contexts = {c["name"]: c["context"] for c in document.get("contexts") or []}
        context = contexts[document["current-context"]]
        cluster = {c["name"]: c["cluster"] for c in document["clusters"]}[context["cluster"]]
        users = {u["name"]: u.get("user") or {} for u in document.get("users") or []}
        user = users.get(context.get("user"), {})
        server = cluster["server"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise KubeConfigError(f"{path}: not a usable kubeconfig ({exc!r})") from None
    if "exec" in user or "auth-provider" in user:
        raise KubeConfigError(
            f"{path}: the current user authenticates with a plugin; give the API a token or a "
            "client certificate"
        )
    context_ssl: ssl.SSLContext | bool | None = None
    if server.startswith("https://"):
        context_ssl = _ssl_context(cluster, user, path.parent)
    token_file = Path(user["tokenFile"]) if user.get("tokenFile") else None
    return KubeConfig(server, user.get("token"), token_file, context_ssl)


def _ssl_context(cluster: dict, user: dict, base: Path) -> ssl.SSLContext | bool:
    if cluster.get("insecure-skip-tls-verify"):
        return False
    context = ssl.create_default_context()
    if data := cluster.get("certificate-authority-data"):
        context.load_verify_locations(cadata=base64.b64decode(data).decode())
    elif authority := cluster.get("certificate-authority"):
        context.load_verify_locations(cafile=str(base / authority))
    cert = _pem_file(user, "client-certificate", base)
    key = _pem_file(user, "client-key", base)
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


def _pem_file(user: dict, field: str, base: Path) -> str | None:
    """A path to the PEM of `field` (written to a private temporary file when given as data)."""
    if data := user.get(f"{field}-data"):
        with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as file:
            os.chmod(file.name, 0o600)
            file.write(base64.b64decode(data))
        return file.name
    return str(base / user[field]) if user.get(field) else None


class KubeClient:
    """Reviews and RLJobs over HTTP, authenticated as the API's ServiceAccount."""

    def __init__(self, config: KubeConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self._token, self._token_read = config.token, 0.0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # --- reviews --------------------------------------------------------------------------------

    async def review_token(self, token: str) -> dict[str, Any]:
        """TokenReview's status: `authenticated`, `user` (username, uid, groups, extra),
        `error`."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer = await self.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
        return answer.get("status") or {}

    async def review_access(
        self, user: dict[str, Any], verb: str, namespace: str, name: str | None
    ) -> dict[str, Any]:
        """SubjectAccessReview's status (`allowed`, `reason`) for `verb` on rljobs."""
        attributes = {"namespace": namespace, "verb": verb, "group": GROUP}
        attributes |= {"version": VERSION, "resource": PLURAL}
        if name:
            attributes["name"] = name
        spec = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "resourceAttributes": attributes,
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        return (await self.request("POST", path, review)).get("status") or {}

    # --- RLJobs ---------------------------------------------------------------------------------

    @staticmethod
    def rljobs_path(namespace: str | None = None, name: str | None = None) -> str:
        path = RLJOBS_API
        if namespace is not None:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{PLURAL}"
        return path + (f"/{quote(name, safe='')}" if name else "")

    async def served(self) -> bool:
        """Whether the RLJob resource is served (its CRD installed)."""
        try:
            resources = await self.request("GET", RLJOBS_API)
        except KubeError as exc:
            if exc.code == 404:
                return False
            raise
        return any(r.get("name") == PLURAL for r in resources.get("resources") or [])

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """The decoded JSON answer, or KubeError (with Kubernetes' message, or code 0 when the
        server cannot be reached)."""
        session = self._session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._session = session
        headers = {"Accept": "application/json"}
        if token := self._current_token():
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            async with session.request(
                method,
                self.config.server.rstrip("/") + path,
                json=body,
                params=params,
                headers=headers,
                ssl=self.config.ssl_context if self.config.ssl_context is not None else True,
            ) as response:
                answer = await response.json(content_type=None)
                if response.status >= 400:
                    message = answer.get("message") if isinstance(answer, dict) else None
                    raise KubeError(response.status, message or response.reason or "error")
                return answer if isinstance(answer, dict) else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KubeError(0, f"cannot reach Kubernetes at {self.config.server}: {exc}") from exc

    def _current_token(self) -> str | None:
        if self.config.token_file is None:
            return self._token
        if time.monotonic() - self._token_read > TOKEN_REREAD_S:
            self._token = self.config.token_file.read_text().strip()
            self._token_read = time.monotonic()
        return self._token
