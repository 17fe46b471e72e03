"""The emulated Kubernetes API (kubeapi.py) over real HTTP, and kopf running on it."""

import json
import threading

import pytest
import requests

from testkit import rljob, wait_until

# The emulator validates no spec: a one-field one, which the kopf field handler below watches.
RLJOB = rljob("job") | {"spec": {"algorithm": "ppo"}}


@pytest.fixture
def crd(kube_api):
    kube_api.register_crd()
    return kube_api


def test_core_discovery(kube_api):
    assert kube_api.get("/api")["versions"] == ["v1"]
    core = kube_api.get("/api/v1")
    assert core["groupVersion"] == "v1"
    assert {"name": "namespaces", "namespaced": False} in [
        {"name": r["name"], "namespaced": r["namespaced"]} for r in core["resources"]
    ]
    assert [ns["metadata"]["name"] for ns in kube_api.list("/api/v1/namespaces")] == ["default"]
    assert kube_api.get("/api/v1/namespaces/default")["kind"] == "Namespace"


def test_crd_registration_serves_the_resource(kube_api):
    assert kube_api.get("/apis/kuberl.io/v1alpha1", check=False)["code"] == 404
    assert kube_api.register_crd()["kind"] == "CustomResourceDefinition"
    assert kube_api.last.status_code == 201
    groups = kube_api.get("/apis")["groups"]
    assert "kuberl.io/v1alpha1" in [v["groupVersion"] for g in groups for v in g["versions"]]
    resources = {r["name"]: r for r in kube_api.get("/apis/kuberl.io/v1alpha1")["resources"]}
    assert resources["rljobs"]["kind"] == "RLJob"
    assert resources["rljobs"]["namespaced"] is True
    assert "rljobs/status" in resources
    assert kube_api.list(kube_api.rljobs()) == []


def test_create_get_and_conflicts(crd):
    created = crd.create(crd.rljobs(), RLJOB)
    assert crd.last.status_code == 201
    meta = created["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"]
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    assert crd.get(crd.rljobs(name="job")) == created
    crd.create(crd.rljobs(), RLJOB, check=False)
    assert crd.last.status_code == 409 and crd.last.json()["reason"] == "AlreadyExists"
    crd.get(crd.rljobs(name="other"), check=False)
    assert crd.last.status_code == 404
    crd.patch(crd.rljobs(name="other"), {"spec": {}}, check=False)
    assert crd.last.status_code == 404
    crd.delete(crd.rljobs(name="other"), check=False)
    assert crd.last.status_code == 404


def test_patches_bump_resource_version_and_generation_on_spec_only(crd):
    path = crd.rljobs(name="job")
    rv0 = int(crd.create(crd.rljobs(), RLJOB)["metadata"]["resourceVersion"])
    labelled = crd.patch(path, {"metadata": {"labels": {"a": "b"}}})
    assert int(labelled["metadata"]["resourceVersion"]) > rv0
    assert labelled["metadata"]["generation"] == 1
    respec = crd.patch(path, {"spec": {"algorithm": "grpo"}})
    assert respec["metadata"]["generation"] == 2
    assert respec["metadata"]["labels"] == {"a": "b"}
    same = crd.patch(path, {"spec": {"algorithm": "grpo"}})
    assert same["metadata"]["resourceVersion"] == respec["metadata"]["resourceVersion"]
    unlabelled = crd.patch(path, {"metadata": {"labels": {"a": None}}})
    assert unlabelled["metadata"]["labels"] == {}
    # JSON patch with kopf's optimistic-concurrency test op; merge patch with a stale version.
    rv = unlabelled["metadata"]["resourceVersion"]
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
    added = crd.patch(
        path, [test, {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}], "json"
    )
    assert added["metadata"]["finalizers"] == ["f"]
    crd.patch(path, [test, {"op": "remove", "path": "/metadata/finalizers"}], "json", check=False)
    assert crd.last.status_code == 422
    crd.patch(path, {"metadata": {"resourceVersion": rv}, "spec": {}}, check=False)
    assert crd.last.status_code == 409


def test_status_subresource_isolation(crd):
    path = crd.rljobs(name="job")
    created = crd.create(crd.rljobs(), {**RLJOB, "status": {"phase": "Forged"}})
    assert "status" not in created
    main = crd.patch(path, {"spec": {"algorithm": "x"}, "status": {"phase": "Ignored"}})
    assert "status" not in main and main["spec"] == {"algorithm": "x"}
    status = crd.patch(path + "/status", {"spec": {"algorithm": "y"}, "status": {"phase": "Ok"}})
    assert status["status"] == {"phase": "Ok"} and status["spec"] == {"algorithm": "x"}
    assert status["metadata"]["generation"] == main["metadata"]["generation"]
    assert crd.get(path + "/status")["status"] == {"phase": "Ok"}


def test_the_scale_subresource_reads_and_writes_through_the_crds_paths(crd):
    """As `kubectl scale rljob/job --replicas=6` and an HPA use it."""
    path = crd.rljobs(name="job")
    crd.create(crd.rljobs(), rljob("job", rolloutWorkers={"replicas": 2}))
    selector = "kuberl.io/job=job,ray.io/node-type=worker"
    crd.patch(path + "/status", {"status": {"replicas": 1, "selector": selector}})
    scale = crd.get(path + "/scale")
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": selector}
    crd.patch(path + "/scale", {"spec": {"replicas": 6}})
    job = crd.get(path)
    assert job["spec"]["rolloutWorkers"]["replicas"] == 6 and job["metadata"]["generation"] == 2
    crd.patch(path + "/scale", [{"op": "replace", "path": "/spec/replicas", "value": 3}], "json")
    assert crd.get(path + "/scale")["spec"] == {"replicas": 3}
    crd.patch(path + "/scale", {"spec": {"replicas": -1}}, check=False)
    assert crd.last.status_code == 422
    assert crd.get(path)["spec"]["rolloutWorkers"]["replicas"] == 3


def watch(kube_api, path: str, count: int, **params) -> list[dict]:
    """The first `count` events of a watch (as (type, name, resourceVersion))."""
    params = {"watch": "true", "timeoutSeconds": "5", **params}
    with requests.get(kube_api.url + path, params=params, stream=True, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        events = []
        for line in response.iter_lines():
            if line:
                event = json.loads(line)
                meta = event["object"]["metadata"]
                events.append((event["type"], meta["name"], meta["resourceVersion"]))
                if len(events) == count:
                    break
    return events


def test_watch_resumes_from_a_resource_version(crd):
    first = crd.create(crd.rljobs(), RLJOB)
    listed = crd.get(crd.rljobs())["metadata"]["resourceVersion"]
    second = crd.create(crd.rljobs(), {**RLJOB, "metadata": {"name": "second"}})
    crd.patch(crd.rljobs(name="job"), {"spec": {"algorithm": "grpo"}})
    rv2 = second["metadata"]["resourceVersion"]
    assert watch(crd, crd.rljobs(), 2, resourceVersion=listed) == [
        ("ADDED", "second", rv2),
        ("MODIFIED", "job", str(int(rv2) + 1)),
    ]
    # Without a resourceVersion: the current objects as ADDED, then live events.
    events, watches = [], crd.api.watches
    thread = threading.Thread(target=lambda: events.extend(watch(crd, crd.rljobs(), 3)))
    thread.start()
    wait_until(lambda: crd.api.watches > watches, what="a watch")
    crd.delete(crd.rljobs(name="job"))
    thread.join(10)
    assert [(kind, name) for kind, name, _ in events] == [
        ("ADDED", "job"),
        ("ADDED", "second"),
        ("DELETED", "job"),
    ]
    assert first["metadata"]["uid"]


def test_delete_with_finalizers(crd):
    path = crd.rljobs(name="job")
    crd.create(crd.rljobs(), {**RLJOB, "metadata": {"name": "job", "finalizers": ["a", "b"]}})
    deleting = crd.delete(path)
    assert deleting["metadata"]["deletionTimestamp"]
    assert (
        crd.get(path)["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    )
    crd.patch(path, {"metadata": {"finalizers": ["b"]}})
    assert crd.get(path)["metadata"]["finalizers"] == ["b"]
    crd.patch(path, {"metadata": {"finalizers": None}})
    crd.get(path, check=False)
    assert crd.last.status_code == 404
    crd.create(crd.rljobs(), RLJOB)  # the name is free again
    crd.delete(path)
    assert crd.list(crd.rljobs()) == []


def rljob_registry(calls: dict[str, int]):
    """A private kopf registry with a create handler and a field handler that count their runs."""
    import kopf

    registry = kopf.OperatorRegistry()

    @kopf.on.create("kuberl.io", "v1alpha1", "rljobs", id="created", registry=registry)
    def created(**_):
        calls["create"] = calls.get("create", 0) + 1
        return {"seen": True}

    @kopf.on.field(
        "kuberl.io", "v1alpha1", "rljobs", field="spec.algorithm", id="algorithm", registry=registry
    )
    def algorithm(new, **_):
        calls["field"] = calls.get("field", 0) + 1
        return {"algorithm": new}

    @kopf.on.delete("kuberl.io", "v1alpha1", "rljobs", registry=registry)  # needs a finalizer
    def deleted(**_):
        calls["delete"] = calls.get("delete", 0) + 1

    return registry


def test_kopf_runs_handlers_and_finalizes(crd):
    calls: dict[str, int] = {}
    registry = rljob_registry(calls)
    path = crd.rljobs(name="job")
    with crd.kopf(registry):
        crd.create(crd.rljobs(), RLJOB)
        job = wait_until(
            lambda: (obj := crd.get(path)).get("status", {}).get("created") and obj,
            what="the create handler's result in status",
        )
        assert job["status"]["created"] == {"seen": True}
        assert job["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        wait_until(lambda: calls.get("field"), what="the field handler")

    # A restarted operator does not create it again, but sees a spec change.
    with crd.kopf(registry):
        crd.patch(path, {"spec": {"algorithm": "grpo"}})
        wait_until(
            lambda: crd.get(path)["status"]["algorithm/spec.algorithm"] == {"algorithm": "grpo"},
            what="the field handler's result after a restart",
        )
        assert calls["create"] == 1
        crd.delete(path)
        wait_until(lambda: crd.get(path, check=False).get("code") == 404, what="finalization")
    assert calls == {"create": 1, "field": 2, "delete": 1}


PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": []}}


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("", ["a", "b", "c"]),
        ("ray.io/cluster=x", ["a", "b"]),
        ("ray.io/cluster==x,ray.io/node-type=head", ["a"]),
        ("ray.io/node-type!=head", ["b", "c"]),
        ("ray.io/node-type", ["a", "b"]),
        ("!ray.io/node-type", ["c"]),
        ("ray.io/cluster in (x, y)", ["a", "b", "c"]),
        ("ray.io/cluster notin (x)", ["c"]),
    ],
)
def test_label_selectors(kube_api, selector, names):
    kube_api.create(PODS, pod("a", **{"ray.io/cluster": "x", "ray.io/node-type": "head"}))
    kube_api.create(PODS, pod("b", **{"ray.io/cluster": "x", "ray.io/node-type": "worker"}))
    kube_api.create(PODS, pod("c", **{"ray.io/cluster": "y"}))
    items = kube_api.list(PODS, params={"labelSelector": selector})
    assert sorted(i["metadata"]["name"] for i in items) == names


def test_a_bad_label_selector_is_a_400(kube_api):
    kube_api.get(PODS, params={"labelSelector": "a=(b"}, check=False)
    assert kube_api.last.status_code == 400


def test_secrets_store_string_data_as_base64(kube_api):
    path = "/api/v1/namespaces/default/secrets"
    secret = kube_api.create(path, {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    assert secret["data"] == {"token": "YWJj"} and "stringData" not in secret


def test_garbage_collection_follows_owner_references(crd):
    owner = crd.create(crd.rljobs(), RLJOB)
    ref = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "name": "job"}
    child = pod("child") | {
        "metadata": {"name": "child", "ownerReferences": [ref | {"uid": owner["metadata"]["uid"]}]}
    }
    crd.create(PODS, child)
    crd.create(PODS, pod("stranger"))
    crd.delete(crd.rljobs(name="job"))
    assert [p["metadata"]["name"] for p in crd.list(PODS)] == ["stranger"]


def test_a_deleted_crd_takes_its_resource_and_objects_with_it(crd):
    owner = crd.create(crd.rljobs(), RLJOB)
    ref = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "name": "job"}
    child = pod("child") | {
        "metadata": {"name": "child", "ownerReferences": [ref | {"uid": owner["metadata"]["uid"]}]}
    }
    crd.create(PODS, child)

    crd.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rljobs.kuberl.io")

    assert crd.get("/apis/kuberl.io/v1alpha1", check=False)["code"] == 404
    assert crd.get(crd.rljobs(name="job"), check=False)["code"] == 404
    assert crd.list(PODS) == []  # collected with its owner
