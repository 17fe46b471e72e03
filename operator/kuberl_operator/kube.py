"""The Kubernetes API as kuberl calls it: one client for the operator's reconciler and the API's
kubernetes backend (kopf's own watches and Events aside).

One config loader (`load_kube_config`: the pod's ServiceAccount, a kubeconfig, or a bare server
URL), one request function that turns every failure into one `KubeError`, and the few verbs both
callers need: get, list by label, create, merge and JSON patch, delete, and discovery.

Why our own client: it is small (aiohttp, already kopf's HTTP client, and no other dependency), and
the maintained async ones do not fit better: kubernetes_asyncio is a generated client of ~1,700
modules, and kr8s brings httpx and seven more packages beside kopf's aiohttp. Neither would remove
the error mapping or the paths that the callers need. This module must not import kopf: the API's
install does not include it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

Object = dict[str, Any]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Bound ServiceAccount tokens rotate (the kubelet rewrites the file well before expiry): a token
# file is read again when the copy in hand is older than this.
TOKEN_REREAD_S = 60.0


class KubeConfigError(ValueError):
    """No usable way to reach Kubernetes; the message names the file and field, and the fix."""


class KubeError(RuntimeError):
    """Kubernetes answered with an error `status` (with its Status `reason` and `message`), or
    could not be reached or gave no usable answer: status 0."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to authenticate to it (kubectl's meaning of each field)."""

    server: str
    """The API server's base URL, e.g. `https://10.96.0.1:443`."""
    token: str | None = field(default=None, repr=False)  # secrets stay out of logs
    """A bearer token."""
    token_file: Path | None = None
    """A file holding the bearer token, read again as it rotates; wins over `token`."""
    ca_pem: bytes | None = None
    """The certificate authorities trusted for the server (PEM); None: the system's."""
    client_certificate_pem: bytes | None = None
    """A client certificate (PEM) to authenticate with, with `client_key_pem`."""
    client_key_pem: bytes | None = field(default=None, repr=False)
    """The client certificate's private key (PEM)."""
    insecure: bool = False
    """Skip verifying the server's certificate (kubeconfig's `insecure-skip-tls-verify`)."""

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What aiohttp takes as `ssl`: False to skip verification, else a context trusting
        `ca_pem` only (or the system's authorities) and presenting the client certificate."""
        if self.insecure:
            return False
        try:
            cadata = self.ca_pem.decode() if self.ca_pem else None
            context = ssl.create_default_context(cadata=cadata)
        except (ssl.SSLError, ValueError) as exc:
            raise KubeConfigError(f"the certificate authority is not PEM: {exc}") from None
        if self.client_certificate_pem and self.client_key_pem:
            # ssl reads client keys from files only: a private directory, removed once read.
            with tempfile.TemporaryDirectory(prefix="kuberl-") as directory:
                certificate, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
                certificate.write_bytes(self.client_certificate_pem)
                key.write_bytes(self.client_key_pem)
                try:
                    context.load_cert_chain(certificate, key)
                except ssl.SSLError as exc:
                    raise KubeConfigError(
                        f"the client certificate and key are not a PEM pair: {exc}"
                    ) from None
        return context


def load_kube_config(kubeconfig: Path | None = None, server: str | None = None) -> KubeConfig:
    """A kubeconfig given explicitly (with `server` overriding its URL); else an explicit server
    URL alone (no credentials: a test server); else in-cluster (the ServiceAccount's token and
    CA); else the first file of $KUBECONFIG, or ~/.kube/config."""
    if kubeconfig is not None:
        config = read_kubeconfig(kubeconfig)
        return replace(config, server=server) if server else config
    if server:
        return KubeConfig(server=server)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").is_file():
        return in_cluster_config()
    default = _default_kubeconfig()
    if default.is_file():
        return read_kubeconfig(default)
    raise KubeConfigError(
        "no Kubernetes configuration: not in a cluster (no KUBERNETES_SERVICE_HOST and "
        f"ServiceAccount token), and no kubeconfig at {default} ($KUBECONFIG, else "
        "~/.kube/config); give a kubeconfig or a server URL"
    )


def in_cluster_config(directory: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    """The pod's ServiceAccount: the API server from the environment Kubernetes sets, the token
    file (re-read as it rotates) and the cluster's CA from `directory`."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return KubeConfig(
        f"https://{host}:{port or 443}",
        token_file=directory / "token",
        ca_pem=_read(directory / "ca.crt", "the ServiceAccount's CA"),
    )


def _default_kubeconfig() -> Path:
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def read_kubeconfig(path: Path) -> KubeConfig:
    """The current context's cluster and user: a token, a token file or a client certificate;
    relative paths are relative to the kubeconfig's folder, as kubectl reads them."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"{path}: cannot read the kubeconfig: {exc}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"{path}: not a kubeconfig (expected a mapping at the top)")
    current = document.get("current-context")
    if not current:
        raise KubeConfigError(
            f"{path}: no current-context; choose one with `kubectl config use-context NAME`"
        )
    context = _entry(path, document, "contexts", "context", current)
    cluster_name = context.get("cluster")
    cluster = _entry(path, document, "clusters", "cluster", cluster_name)
    user_name = context.get("user")
    user = _entry(path, document, "users", "user", user_name) if user_name else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeConfigError(f"{path}: cluster {cluster_name!r} has no server URL")
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise KubeConfigError(
                f"{path}: user {user_name!r} authenticates with an {plugin} plugin, which kuberl "
                "does not run; give it a token, a tokenFile or a client certificate (e.g. a "
                "ServiceAccount token from `kubectl create token NAME`)"
            )
    if "username" in user or "password" in user:
        raise KubeConfigError(
            f"{path}: user {user_name!r} uses basic authentication, which Kubernetes removed "
            "in 1.19; give it a token or a client certificate"
        )
    base, at_user = path.parent, f"{path}: users[{user_name!r}]"
    token_file = base / user["tokenFile"] if user.get("tokenFile") else None
    if token_file is not None and not token_file.is_file():
        raise KubeConfigError(f"{at_user}.tokenFile: no file at {token_file}")
    certificate = _pem(at_user, user, "client-certificate", base)
    key = _pem(at_user, user, "client-key", base)
    if bool(certificate) != bool(key):
        raise KubeConfigError(
            f"{at_user}: a client certificate needs both client-certificate and client-key"
        )
    config = KubeConfig(
        server,
        token=user.get("token") or None,
        token_file=token_file,
        ca_pem=_pem(f"{path}: clusters[{cluster_name!r}]", cluster, "certificate-authority", base),
        client_certificate_pem=certificate,
        client_key_pem=key,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )
    if server.startswith("https://"):
        try:  # refused here, naming the file, rather than at the first request
            config.ssl_context()
        except KubeConfigError as exc:
            raise KubeConfigError(f"{path}: {exc}") from None
    return config


def _entry(path: Path, document: dict, section: str, key: str, name: Any) -> dict:
    """The `key` mapping of the entry called `name` in the kubeconfig's list `section`."""
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            return value if isinstance(value, dict) else {}
    raise KubeConfigError(f"{path}: {section} has no entry named {name!r}")


def _pem(where: str, entry: dict, key: str, base: Path) -> bytes | None:
    """`key`-data (base64) or `key` (a file), as PEM bytes."""
    if data := entry.get(f"{key}-data"):
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, TypeError, ValueError) as exc:
            raise KubeConfigError(f"{where}.{key}-data: not base64 ({exc})") from None
    if file := entry.get(key):
        return _read(base / file, f"{where}.{key}")
    return None


def _read(file: Path, what: str) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise KubeConfigError(f"{what}: cannot read {file}: {exc.strerror}") from None


def path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/namespaces/ns/pods/name` or `/apis/ray.io/v1/namespaces/ns/rayclusters`."""
    parts = ["/api/v1" if api_version == "v1" else f"/apis/{api_version}"]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """One API server, one connection pool (opened on first use, in the event loop that uses it:
    the client may be made before that loop runs)."""

    def __init__(
        self,
        config: KubeConfig,
        timeout_s: float = 30.0,
        token_reread_s: float = TOKEN_REREAD_S,
    ):
        self.config, self.server = config, config.server.rstrip("/")
        self._timeout, self._token_reread_s = aiohttp.ClientTimeout(total=timeout_s), token_reread_s
        self._ssl = config.ssl_context() if config.server.startswith("https://") else True
        self._session: aiohttp.ClientSession | None = None
        self._token, self._token_read = config.token, -float("inf")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Object:
        """The decoded JSON answer; KubeError with Kubernetes' Status (reason, message) on an
        error status, or status 0 when the server cannot be reached or answers no JSON."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=64),
            )
        headers = {"Accept": "application/json"}
        if token := self._current_token():
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body)
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            async with self._session.request(
                method, self.server + url_path, data=data, params=params, headers=headers
            ) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__  # a timeout's message is empty
            raise KubeError(
                0,
                "Unreachable",
                f"cannot reach Kubernetes at {self.server}: {method} {url_path}: {why}",
            ) from exc
        if response.status >= 400:
            raise _error(response.status, response.reason or "", text)
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise KubeError(
                0,
                "Unreachable",
                f"{self.server} is not Kubernetes: {method} {url_path} answered "
                f"{response.status} with {text[:200]!r}, not a JSON object",
            )
        return answer

    def _current_token(self) -> str | None:
        file = self.config.token_file
        if file is not None and time.monotonic() - self._token_read >= self._token_reread_s:
            try:
                self._token = file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise KubeError(
                    0, "Unauthorized", f"cannot read the token file {file}: {exc}"
                ) from None
            self._token_read = time.monotonic()
        return self._token

    async def get(self, url_path: str) -> Object | None:
        """The object, or None when it does not exist."""
        try:
            return await self.request("GET", url_path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, url_path: str, labels: dict[str, str] | None = None) -> list[Object]:
        """The items, those with all of `labels` when given (a label selector)."""
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else None
        )
        return (await self.request("GET", url_path, params=params)).get("items") or []

    async def create(self, url_path: str, obj: Object) -> Object | None:
        """The created object, or None when one of that name exists already."""
        try:
            return await self.request("POST", url_path, obj)
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise

    async def merge_patch(self, url_path: str, patch: Object) -> Object:
        return await self.request(
            "PATCH", url_path, patch, content_type="application/merge-patch+json"
        )

    async def json_patch(self, url_path: str, operations: list[Object]) -> Object:
        return await self.request(
            "PATCH", url_path, operations, content_type="application/json-patch+json"
        )

    async def delete(self, url_path: str, uid: str | None = None) -> bool:
        """True when something was deleted (or its deletion started). With `uid`, only the object
        of that UID: Kubernetes refuses the deletion (409) when the name now holds another."""
        options = None
        if uid is not None:
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.request("DELETE", url_path, options)
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    async def serves(self, api_version: str, plural: str) -> bool:
        """Whether the API serves a resource (discovery): False when its CRD is not installed."""
        found = await self.get(path(api_version, "").rstrip("/"))
        return found is not None and any(
            r.get("name") == plural for r in found.get("resources", [])
        )


def _error(status: int, phrase: str, text: str) -> KubeError:
    """A Kubernetes Status body's reason and message; else the HTTP reason and the body."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return KubeError(status, body.get("reason") or phrase, body["message"])
    return KubeError(status, phrase, text[:500] or phrase)
