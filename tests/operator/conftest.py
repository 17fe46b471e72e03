"""Fixtures for operator tests: `kube_api`, a Kubernetes API emulation on a loopback port."""

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import requests
import yaml
from kubeapi import KubeAPI

CRD_PATH = Path(__file__).parents[2] / "deploy" / "crds" / "kuberl.io_rljobs.yaml"
RLJOBS = "/apis/kuberl.io/v1alpha1/namespaces/{namespace}/rljobs"


class KubeAPIClient:
    """A running `KubeAPI` and plain-HTTP helpers for tests.

    `url` is the base URL; `api` is the `KubeAPI` handler (its store, `resources`, kmock's
    reaction DSL and recorded `requests`), living on the event loop `loop` of a server thread:
    touch it only through `call(coroutine_fn)` or over HTTP. Helpers take an API path such as
    `"/apis/kuberl.io/v1alpha1/namespaces/default/rljobs"` (`rljobs()` builds it) and return the
    decoded JSON, raising `requests.HTTPError` on an error status unless `check=False`.
    """

    def __init__(self, api: KubeAPI, url: str, loop: asyncio.AbstractEventLoop) -> None:
        self.api, self.url, self.loop = api, url, loop
        self.http = requests.Session()

    def call(self, fn: Any, *args: Any) -> Any:
        """Runs `await fn(*args)` on the server's loop (for touching `api` state safely)."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop).result(timeout=10)

    def request(self, method: str, path: str, check: bool = True, **kwargs: Any) -> Any:
        response = self.http.request(method, self.url + path, timeout=10, **kwargs)
        if check:
            response.raise_for_status()
        self.last = response
        return response.json()

    def create(self, path: str, obj: dict, **kwargs: Any) -> Any:
        return self.request("POST", path, json=obj, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def list(self, path: str, **kwargs: Any) -> list[dict]:
        return self.request("GET", path, **kwargs)["items"]

    def patch(self, path: str, patch: Any, kind: str = "merge", **kwargs: Any) -> Any:
        """`kind`: "merge" (RFC 7386) or "json" (RFC 6902)."""
        headers = {"Content-Type": f"application/{kind}-patch+json"}
        return self.request("PATCH", path, data=json.dumps(patch), headers=headers, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def register_crd(self, path: Path = CRD_PATH) -> dict:
        """Applies a CRD manifest (deploy/crds' RLJob CRD by default) as `kubectl apply` would."""
        crd = yaml.safe_load(path.read_text())
        return self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

    @contextlib.contextmanager
    def kopf(self, registry: Any, **options: Any) -> Iterator[threading.Thread]:
        """Runs kopf for real (`kopf.operator`, standalone, in namespace "default" unless
        `options` say otherwise) in a thread of its own, with `registry`'s handlers and a login
        handler for this server; waits until it is ready, stops it on exit."""
        import kopf

        if getattr(registry, "_kube_api_url", None) != self.url:
            registry._kube_api_url = self.url

            @kopf.on.login(registry=registry)
            def login(**_: Any) -> kopf.ConnectionInfo:
                return kopf.ConnectionInfo(server=self.url, default_namespace="default")

        ready, stop = threading.Event(), threading.Event()
        options = {"standalone": True, "namespaces": ["default"], **options}
        run = kopf.operator(registry=registry, ready_flag=ready, stop_flag=stop, **options)
        thread = threading.Thread(target=asyncio.run, args=(run,), name="kopf", daemon=True)
        thread.start()
        try:
            assert ready.wait(10), "kopf did not start"
            yield thread
        finally:
            stop.set()
            thread.join(10)
            assert not thread.is_alive(), "kopf did not stop"

    @staticmethod
    def rljobs(namespace: str = "default", name: str = "") -> str:
        return RLJOBS.format(namespace=namespace) + (f"/{name}" if name else "")


@pytest.fixture
def kube_api() -> Iterator[KubeAPIClient]:
    """A fresh emulated Kubernetes API on a free 127.0.0.1 port, served from its own thread (so
    synchronous tests and kopf, on loops of their own, can both talk to it)."""
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready, stop = threading.Event(), asyncio.Event()

    async def serve() -> None:
        async with KubeAPI() as api, kmock.Server(api, host="127.0.0.1") as server:
            started.update(api=api, url=str(server.url).rstrip("/"))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the emulated Kubernetes API did not start"
    client = KubeAPIClient(started["api"], started["url"], loop)
    try:
        yield client
    finally:
        client.http.close()
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
