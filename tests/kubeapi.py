"""A Kubernetes API emulation good enough to run kopf for real: kmock 0.8, with its gaps filled.

`KubeAPI` keeps kmock's scaffold (HTTP server, request parsing into group/version/plural/
namespace/name/subresource/action, discovery built from `self.resources`, Kubernetes-shaped
error bodies, and the reaction DSL so a test can still intercept any request:
`api[kmock.action.CREATE, kmock.resource("kuberl.io", "v1alpha1", "rljobs")] << 500`). It replaces
kmock's object store (`KubernetesEmulator`), whose semantics cannot be fixed from outside, with a
small one below, served as kmock fallback reactions. What it fixes (see DESIGN.md §7) and why:

- Core discovery: kmock reports `/api/v1` as groupVersion `/v1` (clients then misroute core kinds)
  -> `_serve_version` rewrites it to `v1`; `v1/namespaces` is a registered, cluster-scoped resource
  with a `default` namespace.
- `/api/v1/namespaces[/NAME]` crashes kmock's path parser (it reads `namespaces` as the namespace
  prefix) -> `_parse_path` wraps `kmock._internal.parsing.parse_path` for exactly those paths.
- `metadata.resourceVersion` is absent in kmock (kopf's finalizer JSON patch `test`s it and retries
  forever) -> one global counter, bumped on every write; lists report it too. A no-op write keeps
  it (no event), as kube-apiserver does; a stale `resourceVersion` in a merge patch/PUT is a 409.
- `uid`, `creationTimestamp`, `generation` (1, then +1 on each `spec` change) are set on create.
- Watches replay every object as ADDED regardless of `?resourceVersion=` (kopf reprocesses stale
  copies) -> an event history: `?resourceVersion=N` (N > 0) streams only events newer than N;
  without it (or 0), the current objects as ADDED, then live events. `timeoutSeconds` ends it.
- Watches stream as `application/octet-stream` (kubectl refuses) -> `application/json` lines.
- POST answers 200 (the kubernetes client treats only 201 as created) -> 201; duplicate -> 409
  AlreadyExists; unknown object -> 404 NotFound; unknown resource -> 404.
- No status-subresource isolation -> for resources with a `status` subresource, writes to the main
  resource ignore `status` and writes to `/status` change only `status` (creation drops status).
- Patches were dict merges only -> RFC 7386 merge patch (`null` deletes; also used for strategic
  merge patch: lists are replaced), RFC 6902 JSON patch (a failed `test` op is 422, which kopf
  expects on a stale resourceVersion), and PUT replaces.
- DELETE with finalizers: sets `deletionTimestamp` (MODIFIED) while finalizers remain; the object
  is removed (DELETED) when a write leaves it with no finalizers.
- UIDs as preconditions: a DELETE whose DeleteOptions' `preconditions.uid` is not the object's is a
  409, and a write that would change `metadata.uid` is a 422 (the field is immutable).
- The scale subresource of a custom resource whose CRD declares one (`kubectl scale`, an HPA):
  GET `/scale` answers an autoscaling/v1 Scale read through the CRD's specReplicasPath,
  statusReplicasPath and labelSelectorPath; a merge or JSON patch, or a PUT, of it writes
  spec.replicas back through specReplicasPath (a spec change: the generation moves).
- A POSTed CustomResourceDefinition registers its served versions (kind, plural, singular,
  shortNames, scope, status and scale subresources), so `/apis/<group>/<version>` lists the
  resource; a deleted one unregisters them and deletes their objects, as uninstalling an operator
  does.

- Label selectors on lists (`labelSelector`: equality, inequality, existence, in/notin) and the
  garbage collector (background cascading deletion along ownerReferences) are emulated; built-in
  kinds the operator touches (pods, secrets, configmaps, events, poddisruptionbudgets,
  networkpolicies, and the cluster-scoped nodes) are registered, and a Secret's stringData is
  stored as base64 data.

Not emulated (don't rely on it): field selectors, server-side apply, admission and schema
validation, watch bookmarks and 410 Gone.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import copy
import datetime
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jsonpatch
import kmock
import requests
import yaml
from kmock._internal import parsing
from kmock._internal.dsl import Filter, Priority
from kmock._internal.rendering import ReactionMismatchError

CRDS = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = kmock.resource("", "v1", "namespaces")
NODES = kmock.resource("", "v1", "nodes")  # cluster-scoped: the operator reads them for cost
EVENTS = kmock.resource("", "v1", "events")  # kopf posts its handlers' outcomes as events
# Built-in kinds the operator creates or watches: (group, version, plural, kind, subresources).
BUILT_IN = [
    ("", "v1", "pods", "Pod", ("status",)),
    ("", "v1", "secrets", "Secret", ()),
    ("", "v1", "configmaps", "ConfigMap", ()),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", ("status",)),
    ("", "v1", "events", "Event", ()),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", ("status",)),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", ()),
]
SECRETS = kmock.resource("", "v1", "secrets")
_NAMESPACES_PATH = re.compile(r"/api/v1/namespaces(?:/([^/]+))?/?")
_original_parse_path = parsing.parse_path


def _parse_path(path: str) -> parsing.ParsedPath:
    if match := _NAMESPACES_PATH.fullmatch(path):
        return parsing.ParsedPath("", "v1", "namespaces", None, match.group(1), None)
    return _original_parse_path(path)


parsing.parse_path = _parse_path  # kmock's Request._parse looks it up in the module on each call


def _revision(entry: tuple) -> int:
    return entry[0]


def _names(resource: kmock.resource) -> tuple[str, str, str]:
    """What kmock compares resources by (group, version, plural), as a hashable key."""
    return (resource.group, resource.version, resource.plural)


def _at(obj: dict, json_path: str) -> Any:
    """The value at a simple JSON path (`.spec.rolloutWorkers.replicas`); None where it is not."""
    for key in json_path.removeprefix(".").split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=status, reason=reason, message=message, details={})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge recursively, `None` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Logged(NamedTuple):
    """A request as it arrived (`KubeAPI.log`): for tests of who called what."""

    method: str  # upper case, as on the wire
    path: str
    query: dict[str, str]
    authorization: str | None  # the Authorization header: tells the callers apart


class KubeAPI(kmock.KubernetesScaffold):
    """kmock's Kubernetes scaffold with an object store that behaves as kopf expects."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.objects: dict[tuple, dict] = {}  # (resource, namespace, name) -> object
        # The same objects by resource, so a list does not scan every other kind's (store()).
        self.by_resource: dict[tuple[str, str, str], dict[tuple, dict]] = {}
        self.history: list[tuple[int, kmock.resource, dict]] = []  # (rv, resource, watch event)
        self.revision = 0
        self.watches = 0  # how many watch streams have started (for tests to wait on)
        self.log: list[Logged] = []  # every request, in order of arrival
        self._changed = asyncio.Condition()
        # (group, version, plural) -> the scale subresource's paths, as its CRD declares them
        self.scale_paths: dict[tuple[str, str, str], dict[str, str]] = {}
        self.resources[CRDS] = kmock.ResourceInfo(
            kind="CustomResourceDefinition", singular="customresourcedefinition", namespaced=False
        )
        self.resources[NAMESPACES] = kmock.ResourceInfo(
            kind="Namespace", singular="namespace", namespaced=False
        )
        self.resources[NODES] = kmock.ResourceInfo(kind="Node", singular="node", namespaced=False)
        for verbs in (kmock.action.LIST, kmock.action.FETCH, kmock.action.DELETE):
            self.fallback[verbs] << getattr(self, f"_{verbs.value.lower()}")
        self.fallback[kmock.action.CREATE] << 201 << self._create
        self.fallback[kmock.action.UPDATE] << self._update
        self.fallback["put"] << self._update
        json_lines = {"Content-Type": "application/json"}
        self.fallback[kmock.action.WATCH] << json_lines << self._watch
        for group, version, plural, kind, subresources in BUILT_IN:
            self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
                kind=kind, singular=kind.lower(), namespaced=True, subresources=subresources
            )
        self.store(NAMESPACES, {"metadata": {"name": "default"}})

    # Dispatch: kmock's, without its cost.
    async def _handle(self, request: kmock.Request) -> Any:
        """kmock 0.8's `RawHandler._handle`, but asking `_sees` whether a reaction's view sees
        the request. kmock asks `request in view`, which re-filters every request recorded so
        far, so each request costs more than the last (a thousand jobs' worth of kopf traffic
        takes seconds per request); `_sees` gives the same answer from this request alone."""
        url, headers = request.url, request.headers
        self.log.append(
            Logged(request.method.value, url.path, dict(url.query), headers.get("Authorization"))
        )
        # Order as kmock does: priorities padded to one length, highest first, stable.
        priorities = [tuple(-p for p in payload.priorities) for payload in self._payloads]
        length = max((len(p) for p in priorities), default=0)
        padded = [p + (0,) * (length - len(p)) for p in priorities]
        order = sorted(range(len(padded)), key=padded.__getitem__)
        for payload in [self._payloads[i] for i in order]:
            if self._sees(payload._source, request) and not payload._disabled.is_set():
                try:
                    return await payload(request)
                except ReactionMismatchError:  # either mismatch or depletion
                    payload._disabled.set()
                except NotImplementedError:  # matched, but nothing to respond with
                    pass
        raise NotImplementedError(
            "Undefined server behaviour: no reaction matching the request is defined. "
            "Consider adding a catch-all fallback reaction: `kmock.fallback << 404`."
        )

    def _sees(self, view: Any, request: kmock.Request) -> bool:
        """Whether `view` sees the request just recorded: along a chain of plain filters and
        priorities up to this root, every filter's criteria must hold (which is what iterating
        the chain checks). Other views (slices, groups, exclusions, streams) depend on earlier
        requests too: kmock decides those."""
        node = view
        while node is not self:
            if type(node) is Filter:
                if not node.criteria(request):
                    return False
            elif type(node) is not Priority:
                return request in view
            node = node._source
        return True

    # Discovery: kmock says groupVersion "/v1" for the core group.
    async def _serve_version(self, request: kmock.Request) -> dict:
        result = await super()._serve_version(request)
        result["groupVersion"] = result["groupVersion"].lstrip("/")
        return result

    # The store: every write goes through `store()` or `remove()`.
    def info(self, resource: kmock.resource) -> kmock.ResourceInfo:
        wanted = _names(resource)  # kmock's resource == does the same, but slowly
        for known in self.resources:
            if _names(known) == wanted:
                return self.resources[known]
        raise _error(404, "NotFound", f"the server could not find the resource {resource}")

    def _key(self, request: kmock.Request, name: str | None = None) -> tuple:
        namespace = request.namespace if self.info(request.resource).namespaced else None
        return (request.resource, namespace, name or request.name)

    def _get(self, request: kmock.Request) -> dict:
        key = self._key(request)
        if key not in self.objects:
            raise _error(404, "NotFound", f'{key[0].plural} "{request.name}" not found')
        return self.objects[key]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def store(
        self, resource: kmock.resource, obj: dict, old: dict | None = None, deleting: bool = False
    ) -> dict:
        """Save a new object, or a change of `old` (server-owned metadata comes from `old`),
        bumping resourceVersion; removes an object being deleted once it has no finalizers."""
        meta = obj.setdefault("metadata", {})
        obj.setdefault("apiVersion", f"{resource.group}/{resource.version}".lstrip("/"))
        obj.setdefault("kind", self.resources[resource].kind)
        if old is None:
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            meta.pop("deletionTimestamp", None)
        else:
            meta.update(
                {f: old["metadata"][f] for f in ("name", "namespace") if f in old["metadata"]}
            )
            for field in ("uid", "creationTimestamp", "generation", "resourceVersion"):
                meta[field] = old["metadata"][field]
            meta.pop("deletionTimestamp", None)
            if deleting or "deletionTimestamp" in old["metadata"]:
                meta["deletionTimestamp"] = old["metadata"].get("deletionTimestamp", _now())
            if obj == old:
                return obj  # no-op writes change nothing, as in kube-apiserver
            if obj.get("spec") != old.get("spec"):
                meta["generation"] += 1
        self.revision += 1
        meta["resourceVersion"] = str(self.revision)
        key = (resource, meta.get("namespace"), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.objects.pop(key, None)
            self.by_resource.get(_names(resource), {}).pop(key, None)
            event = {"type": "DELETED", "object": obj}
            self.history.append((self.revision, resource, event))
            self._collect_garbage(meta["uid"])
            if resource == CRDS:
                self._unregister(obj)
            return obj
        else:
            self.objects[key] = obj
            self.by_resource.setdefault(_names(resource), {})[key] = obj
            event = {"type": "MODIFIED" if old else "ADDED", "object": obj}
        self.history.append((self.revision, resource, event))
        if resource == CRDS and event["type"] != "DELETED":
            self._register(obj)
        return obj

    def _collect_garbage(self, owner_uid: str) -> None:
        """Kubernetes' garbage collector, in background mode: the dependents of a removed object
        (an ownerReference to its uid) are deleted in turn, each honouring its own finalizers."""
        for (resource, _, _), obj in list(self.objects.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            owned = any(ref.get("uid") == owner_uid for ref in owners)
            if owned and not obj["metadata"].get("deletionTimestamp"):
                self.store(resource, copy.deepcopy(obj), old=obj, deleting=True)

    def _register(self, crd: dict) -> None:
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if version.get("served", True):
                self.resources[kmock.resource(spec["group"], version["name"], names["plural"])] = (
                    kmock.ResourceInfo(
                        kind=names["kind"],
                        singular=names.get("singular", names["kind"].lower()),
                        shortnames=names.get("shortNames", []),
                        categories=names.get("categories", []),
                        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                        subresources=version.get("subresources", {}).keys(),
                        verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
                    )
                )
                scale = version.get("subresources", {}).get("scale")
                if scale:
                    key = (spec["group"], version["name"], names["plural"])
                    self.scale_paths[key] = scale

    def _unregister(self, crd: dict) -> None:
        """A CRD is gone: its objects are deleted (each honouring its finalizers) and its
        resources no longer served."""
        spec = crd["spec"]
        for version in spec["versions"]:
            gone = _names(kmock.resource(spec["group"], version["name"], spec["names"]["plural"]))
            for (resource, _, _), obj in list(self.by_resource.get(gone, {}).items()):
                if not obj["metadata"].get("deletionTimestamp"):
                    self.store(resource, copy.deepcopy(obj), old=obj, deleting=True)
            for known in [known for known in self.resources if _names(known) == gone]:
                del self.resources[known]

    # Fallback reactions (kmock calls them when no test-defined reaction matched).
    async def _list(self, request: kmock.Request) -> dict:
        self.info(request.resource)
        selector = parse_label_selector(request.params.get("labelSelector") or "")
        items = [
            obj
            for (_, namespace, _), obj in self.by_resource.get(_names(request.resource), {}).items()
            if request.namespace in (None, namespace)
            and selector(obj["metadata"].get("labels") or {})
        ]
        return {"metadata": {"resourceVersion": str(self.revision)}, "items": items}

    async def _fetch(self, request: kmock.Request) -> dict:
        obj = self._get(request)
        if request.subresource == "scale" and _names(request.resource) in self.scale_paths:
            return self._scale_of(request.resource, obj)
        if request.subresource not in (None, "status"):
            raise _error(404, "NotFound", f"no subresource {request.subresource}")
        return obj

    async def _create(self, request: kmock.Request) -> dict:
        obj = copy.deepcopy(request.data)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if self.info(request.resource).namespaced:
            meta["namespace"] = request.namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        key = self._key(request, meta["name"])
        if key[1] != request.namespace and request.namespace is not None:
            raise _error(400, "BadRequest", "the namespace of the object does not match the URL")
        if key in self.objects:
            raise _error(409, "AlreadyExists", f'{key[0].plural} "{key[2]}" already exists')
        if "status" in self.info(request.resource).subresources:
            obj.pop("status", None)
        if request.resource == SECRETS and "stringData" in obj:  # as kube-apiserver stores it
            encoded = {
                k: base64.b64encode(v.encode()).decode() for k, v in obj["stringData"].items()
            }
            obj["data"] = {**obj.get("data", {}), **encoded}
            del obj["stringData"]
        obj = self.store(request.resource, obj)
        await self._notify()
        return obj

    def _scale_of(self, resource: kmock.resource, obj: dict) -> dict:
        """The autoscaling/v1 Scale of `obj`, read through its CRD's scale paths."""
        paths = self.scale_paths[_names(resource)]
        meta = obj["metadata"]
        status = {"replicas": _at(obj, paths["statusReplicasPath"]) or 0}
        if "labelSelectorPath" in paths and _at(obj, paths["labelSelectorPath"]) is not None:
            status["selector"] = _at(obj, paths["labelSelectorPath"])
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion")},
            "spec": {"replicas": _at(obj, paths["specReplicasPath"]) or 0},
            "status": status,
        }

    async def _update(self, request: kmock.Request) -> dict:
        if request.subresource == "scale" and _names(request.resource) in self.scale_paths:
            return await self._update_scale(request)
        old = self._get(request)
        kind = request.headers.get("Content-Type", "").split(";")[0]
        expected = None  # a resourceVersion precondition (JSON patches use a `test` op instead)
        if request.method == kmock.method.PUT:
            new = request.data
            expected = new.get("metadata", {}).get("resourceVersion")
        elif kind == "application/json-patch+json":
            try:
                new = jsonpatch.apply_patch(old, request.data)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise _error(422, "Invalid", str(e)) from e  # kopf expects 422 on a failed test
        elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            expected = (request.data.get("metadata") or {}).get("resourceVersion")
            new = merge_patch(old, request.data)
        else:
            raise _error(415, "UnsupportedMediaType", f"unsupported patch type {kind!r}")
        if expected and expected != old["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified; apply to the latest")
        uid = (new.get("metadata") or {}).get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise _error(
                422, "Invalid", f"metadata.uid: Invalid value: {uid!r}: field is immutable"
            )
        if request.subresource == "status":
            new = {**old, "status": new.get("status")}
        elif "status" in self.info(request.resource).subresources:
            new = {**new, "status": old.get("status")}
        new = copy.deepcopy({key: value for key, value in new.items() if value is not None})
        obj = self.store(request.resource, new, old=old)
        await self._notify()
        return obj

    async def _update_scale(self, request: kmock.Request) -> dict:
        """A write of the scale subresource: spec.replicas lands at the CRD's specReplicasPath."""
        old = self._get(request)
        scale = self._scale_of(request.resource, old)
        kind = request.headers.get("Content-Type", "").split(";")[0]
        if request.method == kmock.method.PUT:
            new_scale = request.data
        elif kind == "application/json-patch+json":
            new_scale = jsonpatch.apply_patch(scale, request.data)
        else:
            new_scale = merge_patch(scale, request.data)
        replicas = (new_scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise _error(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
        new = copy.deepcopy(old)
        *parents, leaf = self.scale_paths[_names(request.resource)]["specReplicasPath"].split(".")[
            1:
        ]
        node = new
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = replicas
        obj = self.store(request.resource, new, old=old)
        await self._notify()
        return self._scale_of(request.resource, obj)

    async def _delete(self, request: kmock.Request) -> dict:
        old = self._get(request)
        options = request.data if isinstance(request.data, dict) else {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise _error(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {old['metadata']['uid']}",
            )
        if old["metadata"].get("deletionTimestamp"):
            return old  # already being deleted: waits for its finalizers
        obj = self.store(request.resource, copy.deepcopy(old), old=old, deleting=True)
        await self._notify()
        return obj

    async def _watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        info = self.info(request.resource)
        namespace = request.namespace if info.namespaced else None

        def wanted(resource: kmock.resource, obj: dict) -> bool:
            meta = obj["metadata"]
            return (
                resource == request.resource
                and namespace in (None, meta.get("namespace"))
                and request.name in (None, meta["name"])
            )

        yield b""  # sends the headers now, even if no event comes
        since = int(request.params.get("resourceVersion") or 0)
        if not since:
            since = self.revision
            for (resource, _, _), obj in list(self.objects.items()):
                if wanted(resource, obj):
                    yield {"type": "ADDED", "object": obj}
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        self.watches += 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while True:
                    new = self.history[bisect.bisect_right(self.history, since, key=_revision) :]
                    for revision, resource, event in new:
                        since = revision
                        if wanted(resource, event["object"]):
                            yield event
                    async with self._changed:
                        if self.history and self.history[-1][0] > since:
                            continue
                        await self._changed.wait()


_REQUIREMENT = re.compile(
    r"\s*(?P<neg>!)?(?P<key>[\w./-]+)\s*"
    r"(?:(?P<op>==|!=|=|\s+in\s+|\s+notin\s+)\s*(?P<value>\([^)]*\)|[\w./-]*))?\s*"
)


def parse_label_selector(text: str) -> Any:
    """A predicate over labels for a `labelSelector` query: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
    `k in (a,b)`, `k notin (a,b)`, comma-separated (all must hold). Bad syntax is a 400."""
    requirements = []
    for part in re.split(r",(?![^(]*\))", text) if text.strip() else []:
        match = _REQUIREMENT.fullmatch(part)
        if not match:
            raise _error(400, "BadRequest", f"unable to parse requirement: {part!r}")
        key, op, value = match["key"], (match["op"] or "").strip(), match["value"] or ""
        values = {v.strip() for v in value.strip("()").split(",")}
        if match["neg"]:
            requirements.append(lambda labels, k=key: k not in labels)
        elif not op:
            requirements.append(lambda labels, k=key: k in labels)
        elif op in ("=", "=="):
            requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif op == "in":
            requirements.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
        else:  # notin
            requirements.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
    return lambda labels: all(requirement(labels) for requirement in requirements)


# --- For tests: the emulation on a loopback port, and plain-HTTP helpers -----------------------

CRD_PATH = Path(__file__).parents[1] / "deploy" / "crds" / "kuberl.io_rljobs.yaml"
# KubeRay's RayCluster CRD as far as the operator looks at it (its names, in discovery): without it
# every job waits for KubeRay. (The real one, for schema checks, is not copied in.)
RAYCLUSTER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "rayclusters.ray.io"},
    "spec": {
        "group": "ray.io",
        "scope": "Namespaced",
        "names": {"kind": "RayCluster", "plural": "rayclusters", "singular": "raycluster"},
        "versions": [
            {"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}
        ],
    },
}
RLJOBS = "/apis/kuberl.io/v1alpha1/namespaces/{namespace}/rljobs"


def write_kubeconfig(url: str, path: Path) -> Path:
    """What `kubectl config` would write for the emulation at `url` (a token it does not check)."""
    context = {"cluster": "emulated", "user": "tester", "namespace": "default"}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "emulated"}}],
        "contexts": [{"name": "emulated", "context": context}],
        "current-context": "emulated",
    }
    path.write_text(yaml.safe_dump(config))
    return path


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
    def kopf(self, registry: Any, login: bool = True, **options: Any) -> Iterator[threading.Thread]:
        """Runs kopf for real (`kopf.operator`, standalone, in namespace "default" unless
        `options` say otherwise) in a thread of its own, with `registry`'s handlers and (unless
        `login` is False: the registry logs in itself) a login handler for this server; waits
        until it is ready, stops it on exit."""
        import kopf

        if login and getattr(registry, "_kube_api_url", None) != self.url:
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

    def kubeconfig(self, path: Path) -> Path:
        """Writes a kubeconfig for this server and returns its path."""
        return write_kubeconfig(self.url, path)

    @staticmethod
    def rljobs(namespace: str = "default", name: str = "") -> str:
        return RLJOBS.format(namespace=namespace) + (f"/{name}" if name else "")


@contextlib.contextmanager
def running_kube_api() -> Iterator[KubeAPIClient]:
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
