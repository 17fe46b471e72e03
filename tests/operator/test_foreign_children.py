"""The operator acts only on objects it owns: kopf running for real (handlers.py) against the
emulated Kubernetes API, with objects of other owners under the names a job's children take.

A child's name taken by an object the job does not own (its controller ownerReference is not the
job's UID) is left exactly as it was, nothing else is created, and the job fails with reason
NameConflict and a message naming the object. Children left by an earlier RLJob of the same name,
which the garbage collector is removing, are waited for instead. No Ray head runs here: the
jobs never get as far as their driver."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubeapi import RAYCLUSTER_CRD

from kuberl_operator.handlers import registry
from kuberl_operator.settings import OperatorSettings
from testkit import free_port, rljob, wait_until

NS = "/namespaces/default"
RAYCLUSTERS = f"/apis/ray.io/v1{NS}/rayclusters"
CONFIGMAPS = f"/api/v1{NS}/configmaps"
SECRETS = f"/api/v1{NS}/secrets"
PDBS = f"/apis/policy/v1{NS}/poddisruptionbudgets"
NETWORK_POLICIES = f"/apis/networking.k8s.io/v1{NS}/networkpolicies"
KEY = "k" * 64  # the operator's ray_auth_key, as the chart sets it
PATIENCE = 60


def foreign(kind: str, name: str) -> tuple[str, dict[str, Any]]:
    """(collection path, object) of another team's object of `kind` named `name`: no owner at
    all, or (the RayCluster) one that another controller owns."""
    objects = {
        "RayCluster": (
            RAYCLUSTERS,
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {
                    "name": name,
                    "labels": {"team": "serving"},
                    "ownerReferences": [
                        {
                            "apiVersion": "ray.io/v1",
                            "kind": "RayService",
                            "name": name,
                            "uid": "3f0c1a52-0000-4000-8000-000000000001",
                            "controller": True,
                        }
                    ],
                },
                "spec": {"rayVersion": "2.60.0", "headGroupSpec": {"rayStartParams": {}}},
            },
        ),
        "ConfigMap": (
            CONFIGMAPS,
            {"metadata": {"name": name}, "data": {"job.yaml": "another team's job\n"}},
        ),
        "PodDisruptionBudget": (
            PDBS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "serving"}}},
            },
        ),
        "NetworkPolicy": (
            NETWORK_POLICIES,
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": name},
                "spec": {"podSelector": {"matchLabels": {"app": "serving"}}, "ingress": []},
            },
        ),
        "Secret": (
            SECRETS,
            {"metadata": {"name": name}, "stringData": {"auth_token": "another team's token"}},
        ),
    }
    return objects[kind]


# Each child kind and the name a job called `prod` gives it.
CHILDREN = {
    "RayCluster": "prod",
    "ConfigMap": "prod-job",
    "PodDisruptionBudget": "prod-head",
    "NetworkPolicy": "prod-ray",
    "Secret": "prod-ray-auth",
}
COLLECTIONS = {kind: foreign(kind, name)[0] for kind, name in CHILDREN.items()}


def settings(tmp_path: Path, key: str | None) -> OperatorSettings:
    dead = f"http://127.0.0.1:{free_port()}"  # no Ray head: no driver is ever reached
    return OperatorSettings(
        ray_auth_key=key,
        ray_dashboard_url=dead,
        trainer_metrics_url=dead + "/metrics",
        run_dir_root=str(tmp_path / "runs"),
        job_config_dir=str(tmp_path / "etc"),
        poll_seconds=0.2,
        metrics_port=0,
    )


@pytest.fixture
def operator(kube_api, tmp_path, monkeypatch, request):
    """The operator (kopf and the reconciler, for real) with KubeRay's CRD installed; with the
    chart's key unless the test is parametrized with `key=None`."""
    key = getattr(request, "param", KEY)
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    kube_api.register_crd()
    kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    memo = kopf.Memo(settings=settings(tmp_path, key))
    with kube_api.kopf(registry, login=False, memo=memo):
        yield kube_api


def found(kube_api, path: str) -> dict[str, Any] | None:
    answer = kube_api.get(path, check=False)
    return None if answer.get("code") == 404 else answer


def status_of(kube_api, name: str) -> dict[str, Any]:
    return kube_api.get(kube_api.rljobs(name=name)).get("status") or {}


def failed_condition(kube_api, name: str) -> dict[str, Any] | None:
    status = status_of(kube_api, name)
    if status.get("phase") != "Failed":
        return None
    return next(c for c in status["conditions"] if c["type"] == "Failed")


def controller_uid(obj: dict[str, Any]) -> str | None:
    owners = obj["metadata"].get("ownerReferences") or []
    return next((o["uid"] for o in owners if o.get("controller")), None)


def children_of(kube_api, name: str) -> list[dict[str, Any]]:
    """Every object of a child's kind labelled as the job's."""
    selector = {"labelSelector": f"kuberl.io/job={name}"}
    return [o for path in COLLECTIONS.values() for o in kube_api.list(path, params=selector)]


def events_of(kube_api, name: str) -> list[tuple[str, str]]:
    return [
        (e["type"], e["reason"])
        for e in kube_api.list(f"/api/v1{NS}/events")
        if e["involvedObject"]["name"] == name
    ]


def assert_untouched(kube_api, path: str, before: dict[str, Any]) -> None:
    now = found(kube_api, f"{path}/{before['metadata']['name']}")
    assert now == before, f"{path}: {before} became {now}"


@pytest.mark.parametrize(
    "kind, operator",
    [(kind, KEY) for kind in CHILDREN if kind != "Secret"] + [("Secret", None)],
    ids=[kind for kind in CHILDREN if kind != "Secret"] + ["Secret-without-a-key"],
    indirect=["operator"],
)
def test_a_foreign_object_under_a_childs_name_fails_the_job_and_is_left_alone(kind, operator):
    kube_api = operator
    collection, obj = foreign(kind, CHILDREN[kind])
    before = kube_api.create(collection, obj)

    kube_api.create(kube_api.rljobs(), rljob("prod"))

    condition = wait_until(lambda: failed_condition(kube_api, "prod"), PATIENCE, "prod Failed")
    assert condition["reason"] == "NameConflict"
    assert condition["message"] == (
        f"{kind} {CHILDREN[kind]} exists and is not this job's: rename the job"
    )
    assert_untouched(kube_api, collection, before)
    assert children_of(kube_api, "prod") == []  # nothing created around it
    wait_until(
        lambda: ("Warning", "NameConflict") in events_of(kube_api, "prod"),
        30,
        "the NameConflict Event",
    )


def test_every_foreign_name_is_said_and_none_is_touched(operator):
    kube_api = operator
    taken = {kind: kube_api.create(*foreign(kind, CHILDREN[kind])) for kind in CHILDREN}

    kube_api.create(kube_api.rljobs(), rljob("prod"))

    condition = wait_until(lambda: failed_condition(kube_api, "prod"), PATIENCE, "prod Failed")
    assert condition["reason"] == "NameConflict"
    for kind in ("RayCluster", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget"):
        assert f"{kind} {CHILDREN[kind]} exists and is not this job's" in condition["message"]
    for kind, before in taken.items():
        assert_untouched(kube_api, COLLECTIONS[kind], before)


def test_with_a_key_a_secret_under_the_plain_name_is_neither_used_nor_touched(operator):
    """The operator may not read Secrets, so it names the job's token Secret with a digest only
    its key gives: another team's `<job>-ray-auth` is not the job's, and never mounted."""
    kube_api = operator
    before = kube_api.create(*foreign("Secret", "prod-ray-auth"))

    job = kube_api.create(kube_api.rljobs(), rljob("prod"))

    cluster = wait_until(lambda: found(kube_api, f"{RAYCLUSTERS}/prod"), PATIENCE, "the cluster")
    secret_name = cluster["spec"]["authOptions"]["secretName"]
    assert secret_name != "prod-ray-auth" and secret_name.startswith("prod-ray-auth-")
    secret = found(kube_api, f"{SECRETS}/{secret_name}")
    assert controller_uid(secret) == job["metadata"]["uid"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    token = next(e for e in head["env"] if e["name"] == "RAY_AUTH_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["name"] == secret_name
    assert_untouched(kube_api, SECRETS, before)
    assert status_of(kube_api, "prod")["phase"] == "Provisioning"


def test_every_child_is_the_jobs_and_a_recreated_job_waits_for_the_old_ones_to_go(operator):
    """Every child is created with a controller ownerReference to the job's UID. A job deleted and
    created again under its name finds its predecessor's children until the garbage collector has
    removed them: they are not another team's, so the new job waits for them, then starts."""
    kube_api = operator
    first = kube_api.create(kube_api.rljobs(), rljob("prod"))
    wait_until(lambda: found(kube_api, f"{PDBS}/prod-head"), PATIENCE, "the first children")
    children = children_of(kube_api, "prod")
    assert sorted(o["kind"] for o in children) == sorted(CHILDREN)
    for child in children:
        assert controller_uid(child) == first["metadata"]["uid"], child["metadata"]["name"]

    # The predecessor's ConfigMap outlives it (the garbage collector has not come by yet).
    leftover = copy.deepcopy(found(kube_api, f"{CONFIGMAPS}/prod-job"))
    kube_api.delete(kube_api.rljobs(name="prod"))
    wait_until(lambda: not children_of(kube_api, "prod"), PATIENCE, "the children collected")
    for field in ("uid", "resourceVersion", "creationTimestamp"):
        del leftover["metadata"][field]
    leftover = kube_api.create(CONFIGMAPS, leftover)
    gets = len(kube_api.api.log)

    second = kube_api.create(kube_api.rljobs(), rljob("prod"))

    def looked_twice() -> bool:
        reads = [r for r in kube_api.api.log[gets:] if r.method == "GET"]
        return sum(r.path == f"{CONFIGMAPS}/prod-job" for r in reads) >= 2

    wait_until(looked_twice, PATIENCE, "the operator looking at the leftover twice")
    assert found(kube_api, f"{RAYCLUSTERS}/prod") is None
    assert status_of(kube_api, "prod").get("phase") != "Failed"
    assert_untouched(kube_api, CONFIGMAPS, leftover)

    kube_api.delete(f"{CONFIGMAPS}/prod-job")  # the garbage collector's turn
    cluster = wait_until(lambda: found(kube_api, f"{RAYCLUSTERS}/prod"), PATIENCE, "the cluster")
    assert controller_uid(cluster) == second["metadata"]["uid"]
    assert controller_uid(found(kube_api, f"{CONFIGMAPS}/prod-job")) == second["metadata"]["uid"]
