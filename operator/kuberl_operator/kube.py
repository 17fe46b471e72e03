"""The Kubernetes API, as the reconciler uses it: the one module that calls it (kopf's own watches
and Events aside).

A small asyncio client over aiohttp (kopf's HTTP client), with the credentials kopf logged in
with (`kopf.ConnectionInfo`: a service account in the cluster, a kubeconfig outside). The official
client is synchronous and would need a thread per call; the reconciler needs only get, list by
label, create, patch and delete.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from typing import Any
from urllib.parse import quote

import aiohttp
import kopf

Object = dict[str, Any]


class KubeError(RuntimeError):
    """The API answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/namespaces/ns/pods/name` or `/apis/ray.io/v1/namespaces/ns/rayclusters`."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace:
        parts.append(f"namespaces/{quote(namespace)}")
    parts.append(plural)
    if name:
        parts.append(quote(name))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if info.insecure:
        return False
    context = ssl.create_default_context(cafile=info.ca_path)
    if info.ca_data:
        context.load_verify_locations(cadata=base64.b64decode(info.ca_data).decode())
    certificate, key = info.certificate_path, info.private_key_path
    if info.certificate_data and info.private_key_data:  # ssl reads client keys from files only
        certificate = _temporary_file(info.certificate_data)
        key = _temporary_file(info.private_key_data)
    if certificate:
        context.load_cert_chain(certificate, key)
    return context


def _temporary_file(base64_data: str) -> str:
    with tempfile.NamedTemporaryFile("wb", prefix="kuberl-", delete=False) as file:
        file.write(base64.b64decode(base64_data))
        return file.name


class Kube:
    """One API server, one connection pool. Create it inside the event loop that will use it."""

    def __init__(self, info: kopf.ConnectionInfo, timeout_s: float = 30.0):
        self.server = info.server.rstrip("/")
        headers = {"Accept": "application/json"}
        auth = None
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        elif info.username and info.password:
            auth = aiohttp.BasicAuth(info.username, info.password)
        self._session = aiohttp.ClientSession(
            headers=headers,
            auth=auth,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            connector=aiohttp.TCPConnector(ssl=_ssl_context(info), limit=64),
        )

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Object:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        try:
            async with self._session.request(
                method, self.server + url_path, data=data, params=params, headers=headers
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    raise _error(response.status, text)
                return json.loads(text) if text else {}
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(0, "Unreachable", f"{method} {url_path}: {exc}") from exc

    async def get(self, url_path: str) -> Object | None:
        """The object, or None when it does not exist."""
        try:
            return await self.request("GET", url_path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, url_path: str, labels: dict[str, str] | None = None) -> list[Object]:
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

    async def delete(self, url_path: str) -> bool:
        """True when something was deleted (or its deletion started)."""
        try:
            await self.request("DELETE", url_path)
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


def _error(status: int, text: str) -> KubeError:
    try:
        body = json.loads(text)
        return KubeError(status, body.get("reason") or "", body.get("message") or text)
    except (ValueError, AttributeError):
        return KubeError(status, "", text[:500])
