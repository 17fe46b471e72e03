"""The chart's RBAC held against the requests the code really makes.

The operator (kopf and the reconciler, for real) and the API's kubernetes backend (a real
`kuberl serve`) run against the emulated Kubernetes API, which logs every request. Each request of
a component (told apart by its credentials) becomes the attributes kube-apiserver's RequestInfo
gives it (API group, resource, subresource, namespace, verb; or a non-resource URL), and the
component's roles, as the chart renders them and binds them to its ServiceAccount, must:
(a) allow every request, and
(b) grant nothing that no request used (each group, resource and verb, each URL), unless listed in
    UNEXERCISED with the reason the scenario cannot use it here.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

# The scenarios are the operator's and the API's own tests and fixtures, from their folders.
TESTS = Path(__file__).resolve().parents[1]
for folder in ("operator", "api"):
    if str(TESTS / folder) not in sys.path:
        sys.path.append(str(TESTS / folder))

import kopf  # noqa: E402
from apiserver import ApiServer  # noqa: E402
from chart import NAMESPACE, find, fullname_of, render  # noqa: E402
from kubeapi import RAYCLUSTER_CRD, KubeAPIClient, Logged  # noqa: E402
from test_kubernetes_backend import cluster  # noqa: E402, F401 (the API scenarios' fixture)
from test_kubernetes_backend import (  # noqa: E402
    test_authentication_and_authorization_follow_kubernetes as api_reviews_scenario,
)
from test_kubernetes_backend import (  # noqa: E402
    test_every_namespace_is_listed_only_for_a_cluster_wide_grant as api_every_namespace_scenario,
)
from test_kubernetes_backend import (  # noqa: E402
    test_status_progress_and_filters_come_from_the_rljob as api_status_scenario,
)
from test_operator import PODS, RAYCLUSTERS, KubeRay  # noqa: E402
from test_scale import (  # noqa: E402
    test_the_scale_subresource_is_written_for_callers_rbac_lets_scale as api_scale_scenario,
)

from kuberl_operator.builders import ray_auth_token  # noqa: E402
from kuberl_operator.handlers import registry  # noqa: E402
from kuberl_operator.settings import OperatorSettings  # noqa: E402
from testkit import free_port, rljob, wait_until  # noqa: E402

# The token of the kubeconfig the components run with (kubeapi.write_kubeconfig): the tests' own
# requests, and the emulated KubeRay's, carry none.
COMPONENT = "Bearer emulated"
OPERATOR_SA = f"{fullname_of()}-operator"
API_SA = f"{fullname_of()}-api"

# Grants no scenario here can use, each with why.
UNEXERCISED: dict[tuple[str, str, str], str] = {
    ("kuberl.io", "rljobs", "get"): "the admission webhook reads the RLJob whose scale subresource "
    "is written (its bounds: admission.scaled_job); the scenario runs no webhook, and "
    "tests/operator/test_admission.py makes that read against the emulated API",
}


# --- kube-apiserver's request attributes (k8s.io/apiserver/pkg/endpoints/request) ---------------


class Attributes(NamedTuple):
    """What RBAC decides on. `group` is None for a non-resource request (then `path` counts)."""

    verb: str
    group: str | None = None
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def target(self) -> str:
        """`resource[/subresource]`, or the URL of a non-resource request."""
        if self.group is None:
            return self.path
        return self.resource + (f"/{self.subresource}" if self.subresource else "")


VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch"}
VERBS["DELETE"] = "delete"
TRUE = {"1", "t", "T", "true", "TRUE", "True"}  # Go's strconv.ParseBool, as the watch flag is read


def attributes(method: str, path: str, query: dict[str, str] | None = None) -> Attributes:
    """RequestInfoFactory.NewRequestInfo: /api/VERSION/... (core group) and
    /apis/GROUP/VERSION/... are resource requests; anything shorter (discovery) is not.
    `namespaces/NS/` scopes what follows; GET without a name is list (or watch with watch=true),
    DELETE without one deletecollection."""
    parts = [part for part in path.split("/") if part]
    if len(parts) < 3 or parts[0] not in ("api", "apis") or (parts[0] == "apis" and len(parts) < 4):
        return Attributes(verb=method.lower(), path=path)
    group = parts[1] if parts[0] == "apis" else ""
    parts = parts[3:] if parts[0] == "apis" else parts[2:]
    verb, namespace = VERBS[method], ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in ("status", "finalize"):
            parts = parts[2:]
    resource, name, subresource = [*parts, "", "", ""][:3]
    if not name and verb == "get":
        verb = "watch" if (query or {}).get("watch") in TRUE else "list"
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, group, resource, subresource, namespace, name)


# --- RBAC as kube-apiserver evaluates it ---------------------------------------------------------


class Grant(NamedTuple):
    """A role's rules as one binding grants them: everywhere, or in one namespace."""

    rules: list[dict[str, Any]]
    namespace: str | None  # a RoleBinding's namespace; None for a ClusterRoleBinding


def rule_allows(rule: dict[str, Any], request: Attributes) -> bool:
    if request.verb not in rule["verbs"]:
        return False
    if request.group is None:
        return any(
            url == request.path or (url.endswith("*") and request.path.startswith(url[:-1]))
            for url in rule.get("nonResourceURLs") or []
        )
    names = rule.get("resourceNames")
    return (
        request.group in (rule.get("apiGroups") or [])
        and request.target in (rule.get("resources") or [])
        and (not names or request.name in names)
    )


def allowed(grants: Iterable[Grant], request: Attributes) -> bool:
    # A RoleBinding grants only namespaced requests of its namespace, and no non-resource URLs.
    return any(
        rule_allows(rule, request)
        for grant in grants
        if grant.namespace is None
        or (request.group is not None and request.namespace == grant.namespace)
        for rule in grant.rules
    )


def grants_of(objects: list[dict[str, Any]], service_account: str) -> list[Grant]:
    """What the rendered bindings give the ServiceAccount (of the release's namespace)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"].endswith("Role")}
    grants = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subject = {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE}
        if subject in binding["subjects"]:
            role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
            namespace = (
                binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else None
            )
            grants.append(Grant(role["rules"], namespace))
    return grants


def granted(grants: Iterable[Grant]) -> set[tuple[str, str, str]]:
    """Every (API group, resource or URL, verb) the grants name; group '-' for URLs."""
    triples = set()
    for grant in grants:
        for rule in grant.rules:
            for verb in rule["verbs"]:
                triples |= {("-", url, verb) for url in rule.get("nonResourceURLs") or []}
                for group in rule.get("apiGroups") or []:
                    triples |= {(group, resource, verb) for resource in rule["resources"]}
    return triples


def used(grants: list[Grant], requests: Iterable[Attributes]) -> set[tuple[str, str, str]]:
    """The granted triples some request was allowed by."""
    return {
        (group, target, verb)
        for group, target, verb in granted(grants)
        for request in requests
        if request.verb == verb
        and request.target == target
        and (request.group if request.group is not None else "-") == group
        and allowed(grants, request)
    }


def component_requests(log: list[Logged]) -> list[Attributes]:
    return [
        attributes(r.method, r.path, r.query) for r in list(log) if r.authorization == COMPONENT
    ]


def check(grants: list[Grant], requests: list[Attributes]) -> None:
    """(a) every request allowed, (b) every grant used or listed in UNEXERCISED."""
    assert grants, "no role is bound to the component's ServiceAccount"
    denied = sorted({r for r in requests if not allowed(grants, r)})
    assert not denied, "requests the chart's RBAC would refuse:\n" + "\n".join(map(str, denied))
    unused = granted(grants) - used(grants, requests) - UNEXERCISED.keys()
    assert not unused, f"granted but never used (remove them, or say why in UNEXERCISED): {unused}"


# --- The request attributes, rows worked out from kube-apiserver's RequestInfoFactory -------

ATTRIBUTE_ROWS = [
    ("GET", "/api", {}, Attributes("get", path="/api")),
    ("GET", "/apis/ray.io/v1", {}, Attributes("get", path="/apis/ray.io/v1")),
    ("GET", "/api/v1/pods", {}, Attributes("list", "", "pods")),
    (
        "GET",
        "/api/v1/namespaces/ns/pods",
        {"watch": "true"},
        Attributes("watch", "", "pods", "", "ns"),
    ),
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, Attributes("get", "", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns", {}, Attributes("get", "", "namespaces", "", "ns", "ns")),
    ("GET", "/api/v1/namespaces", {"watch": "1"}, Attributes("watch", "", "namespaces")),
    ("POST", "/api/v1/namespaces/ns/events", {}, Attributes("create", "", "events", "", "ns")),
    (
        "PATCH",
        "/apis/kuberl.io/v1alpha1/namespaces/ns/rljobs/j/status",
        {},
        Attributes("patch", "kuberl.io", "rljobs", "status", "ns", "j"),
    ),
    (
        "PUT",
        "/apis/ray.io/v1/namespaces/ns/rayclusters/c",
        {},
        Attributes("update", "ray.io", "rayclusters", "", "ns", "c"),
    ),
    (
        "DELETE",
        "/apis/ray.io/v1/namespaces/ns/rayclusters",
        {},
        Attributes("deletecollection", "ray.io", "rayclusters", "", "ns"),
    ),
    (
        "PUT",
        "/api/v1/namespaces/ns/finalize",
        {},
        Attributes("update", "", "namespaces", "finalize", "ns", "ns"),
    ),
    ("GET", "/healthz", {}, Attributes("get", path="/healthz")),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), ATTRIBUTE_ROWS)
def test_request_attributes_as_kube_apiserver_reads_them(method, path, query, expected):
    assert attributes(method, path, query) == expected


def test_rbac_matching_follows_kubernetes():
    rules = [
        {"apiGroups": ["kuberl.io"], "resources": ["rljobs"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["s"]},
        {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
    ]
    cluster_wide, in_team_a = [Grant(rules, None)], [Grant(rules, "team-a")]
    job = Attributes("get", "kuberl.io", "rljobs", "", "team-a", "j")

    assert allowed(cluster_wide, job) and allowed(in_team_a, job)
    assert not allowed(in_team_a, job._replace(namespace="team-b"))
    assert not allowed(cluster_wide, job._replace(subresource="status"))  # subresources apart
    assert not allowed(cluster_wide, job._replace(verb="list"))
    assert not allowed(cluster_wide, job._replace(group="kuberl.dev"))
    secret = Attributes("get", "", "secrets", "", "team-a", "s")
    assert allowed(cluster_wide, secret) and not allowed(cluster_wide, secret._replace(name="t"))
    assert allowed(cluster_wide, Attributes("get", path="/apis/ray.io/v1"))
    assert not allowed(cluster_wide, Attributes("get", path="/api/v1"))
    assert not allowed(in_team_a, Attributes("get", path="/apis/ray.io/v1"))  # URLs: cluster only
    assert used(cluster_wide, [job]) == {("kuberl.io", "rljobs", "get")}


# --- The chart's roles --------------------------------------------------------------------------


def rbac_objects(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (o for o in objects if o["apiVersion"] == "rbac.authorization.k8s.io/v1")


def test_no_wildcards_and_every_binding_names_a_rendered_role():
    objects = render()
    for obj in rbac_objects(objects):
        for rule in obj.get("rules", []):
            for key in ("apiGroups", "resources", "verbs", "nonResourceURLs", "resourceNames"):
                assert not any("*" in value for value in rule.get(key, [])), (obj, rule)
        if "roleRef" in obj:
            find(objects, obj["roleRef"]["kind"], obj["roleRef"]["name"])


@pytest.mark.parametrize(
    "values",
    [{}, {"operator": {"settings": {"watchNamespace": "team-a"}}}],
    ids=["every-namespace", "one-namespace"],
)
def test_no_cluster_role_reads_secrets(values):
    """A ClusterRole may be bound anywhere: none of the chart's lets anyone read a Secret (the
    operator derives each job's Ray token instead of reading it back)."""
    objects = render(values)
    cluster_roles = [o for o in objects if o["kind"] == "ClusterRole"]
    assert cluster_roles
    for role in cluster_roles:
        grant = [Grant(role["rules"], None)]
        for verb in ("get", "list", "watch"):
            for namespace in ("", "team-a", NAMESPACE):
                secrets = Attributes(verb, "", "secrets", "", namespace, "any-ray-auth")
                assert not allowed(grant, secrets), (role["metadata"]["name"], verb, namespace)
    # The operator may still create each job's token Secret.
    operator = grants_of(objects, OPERATOR_SA)
    assert allowed(operator, Attributes("create", "", "secrets", "", "team-a"))


def test_namespace_users_get_rljobs_through_the_built_in_roles():
    objects = render()
    edit = find(objects, "ClusterRole", f"{fullname_of()}-rljobs-edit")
    view = find(objects, "ClusterRole", f"{fullname_of()}-rljobs-view")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in edit["metadata"]["labels"].items() if v == "true"} >= {
        f"{aggregate}admin",
        f"{aggregate}edit",
    }
    assert view["metadata"]["labels"][f"{aggregate}view"] == "true"
    assert f"{aggregate}view" not in edit["metadata"]["labels"]

    job = Attributes("get", "kuberl.io", "rljobs", "", "team-a", "j")
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"):
        assert allowed([Grant(edit["rules"], None)], job._replace(verb=verb)), verb
    for verb in ("get", "list", "watch"):
        assert allowed([Grant(view["rules"], None)], job._replace(verb=verb)), verb
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed([Grant(view["rules"], None)], job._replace(verb=verb)), verb
    # The status is the operator's to write: users read it.
    status = job._replace(subresource="status")
    for rules in (edit["rules"], view["rules"]):
        assert allowed([Grant(rules, None)], status)
        assert not allowed([Grant(rules, None)], status._replace(verb="patch"))


def test_rbac_off_renders_none_and_components_off_get_no_roles():
    assert not list(rbac_objects(render({"rbac": {"create": False}})))
    objects = render({"operator": {"enabled": False}, "api": {"enabled": False}})
    assert not grants_of(objects, OPERATOR_SA) and not grants_of(objects, API_SA)
    assert {o["metadata"]["name"] for o in rbac_objects(objects)} == {
        f"{fullname_of()}-rljobs-edit",
        f"{fullname_of()}-rljobs-view",
    }


def test_watching_one_namespace_binds_the_operator_there_only():
    objects = render({"operator": {"settings": {"watchNamespace": "team-a"}}})
    grants = grants_of(objects, OPERATOR_SA)
    job = Attributes("patch", "kuberl.io", "rljobs", "", "team-a", "j")

    assert allowed(grants, job)
    assert not allowed(grants, job._replace(namespace="team-b"))
    assert allowed(grants, Attributes("watch", "", "namespaces"))  # kopf follows namespaces
    assert not allowed(grants_of(render(), OPERATOR_SA), Attributes("watch", "", "namespaces"))


# --- The operator's requests ---------------------------------------------------------------------


def cluster_of(kube_api: KubeAPIClient, name: str) -> dict[str, Any] | None:
    """The RayCluster `name`, or None."""
    found = kube_api.get(f"{RAYCLUSTERS}/{name}", check=False)
    return None if found.get("code") == 404 else found


def job_gone(kube_api: KubeAPIClient, name: str) -> bool:
    return kube_api.get(kube_api.rljobs(name=name), check=False).get("code") == 404


def run_operator_scenario(kube_api: KubeAPIClient, tmp_path: Path, **kopf_options: Any) -> None:
    """Every Kubernetes call the operator makes, without a Ray head (the Ray Jobs API is
    unreachable, so the driver never runs: its calls go to Ray, not to Kubernetes): a finished job
    deleted after its TTL; a spot job's children created (its Ray token derived from the key the
    chart gives the operator, never read back; its pods on the emulated KubeRay's labelled nodes,
    which the operator reads for their cost); a Pending spot worker replaced by the on-demand
    group; suspend (the cluster deleted) and resume (the children again: the manifest patched in
    place); the job deleted (kopf's finalizer)."""
    dead = f"http://127.0.0.1:{free_port()}"
    settings = OperatorSettings(
        ray_auth_key="k" * 64,  # as the chart sets it, from its Secret
        ray_dashboard_url=dead,
        trainer_metrics_url=dead + "/metrics",
        run_dir_root=str(tmp_path / "runs"),
        job_config_dir=str(tmp_path / "etc"),
        poll_seconds=0.2,
        metrics_port=0,
        fallback_pending_seconds=0,
    )
    kube_api.register_crd()
    kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    # A job a previous operator saw fail, to be kept 0 s after: this one deletes it.
    kube_api.create(kube_api.rljobs(), rljob("finished", ttlSecondsAfterFinished=0))
    failed = {"phase": "Failed", "completionTime": "2025-01-01T00:00:00Z", "attempt": 1}
    kube_api.patch(kube_api.rljobs(name="finished") + "/status", {"status": failed})
    spot = {"replicas": 1, "spot": {"enabled": True, "provider": "gke"}}
    spot_pods = {"labelSelector": "ray.io/group=rollout"}
    memo = kopf.Memo(settings=settings)
    with (
        KubeRay(kube_api.url, dead, "unused", tmp_path / "etc") as kuberay,
        kube_api.kopf(registry, login=False, memo=memo, **kopf_options),
    ):
        wait_until(lambda: job_gone(kube_api, "finished"), 20, "the finished job deleted")
        kube_api.create(
            kube_api.rljobs(), rljob("spot", rolloutWorkers=spot, storage={"size": "1Gi"})
        )
        wait_until(lambda: kube_api.list(PODS, params=spot_pods), 20, "the spot worker's pod")
        claim = kube_api.get("/api/v1/namespaces/default/persistentvolumeclaims/spot-storage")
        assert claim["metadata"]["ownerReferences"][0]["kind"] == "RLJob"  # deleted with it
        policy = kube_api.get(
            "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/spot-ray"
        )
        assert policy["metadata"]["ownerReferences"][0]["kind"] == "RLJob"
        # The job's Secret holds the token derived from the key and the job: nothing to read back.
        uid = kube_api.get(kube_api.rljobs(name="spot"))["metadata"]["uid"]
        secret_name = cluster_of(kube_api, "spot")["spec"]["authOptions"]["secretName"]
        assert secret_name.startswith("spot-ray-auth-")  # keyed: no one else's can hold it
        secret = kube_api.get(f"/api/v1/namespaces/default/secrets/{secret_name}")
        stored = base64.b64decode(secret["data"]["auth_token"]).decode()
        assert stored == ray_auth_token(settings, "default", "spot", uid)

        with kuberay.lock:  # the spot worker's node never comes: its pod stays Pending
            [worker] = kube_api.list(PODS, params=spot_pods)
            pending = {"status": {"phase": "Pending", "conditions": []}}
            kube_api.patch(f"{PODS}/{worker['metadata']['name']}/status", pending)
            wait_until(
                lambda: cluster_of(kube_api, "spot")["spec"]["workerGroupSpecs"][1]["replicas"],
                20,
                "the on-demand group scaled up",
            )

        kube_api.patch(kube_api.rljobs(name="spot"), {"spec": {"suspend": True}})
        wait_until(lambda: not cluster_of(kube_api, "spot"), 20, "the RayCluster deleted")
        kube_api.patch(kube_api.rljobs(name="spot"), {"spec": {"suspend": False}})
        wait_until(
            lambda: (
                (again := cluster_of(kube_api, "spot")) and again["metadata"]["uid"] in kuberay.up
            ),
            20,
            "the RayCluster of attempt 2 up",
        )

        kube_api.delete(kube_api.rljobs(name="spot"))
        wait_until(lambda: job_gone(kube_api, "spot"), 20, "the RLJob gone")


@pytest.mark.parametrize(
    ("values", "kopf_options"),
    [
        ({}, {"clusterwide": True, "namespaces": []}),
        ({"operator": {"settings": {"watchNamespace": "default"}}}, {"namespaces": ["default"]}),
    ],
    ids=["every-namespace", "one-namespace"],
)
def test_the_operators_roles_are_exactly_its_requests(
    values, kopf_options, kube_api, tmp_path, monkeypatch
):
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    run_operator_scenario(kube_api, tmp_path, **kopf_options)

    check(grants_of(render(values), OPERATOR_SA), component_requests(kube_api.api.log))


# --- The API's requests --------------------------------------------------------------------------


@pytest.fixture
def api_as_service_account(cluster, tmp_path):  # noqa: F811
    """`kuberl serve` with the kubeconfig's credentials, so its requests are told apart."""
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig")
    with ApiServer(
        tmp_path / "unused", "--backend", "kubernetes", "--kubeconfig", kubeconfig
    ) as api:
        yield api


def test_the_apis_role_is_exactly_its_requests(api_as_service_account, cluster):  # noqa: F811
    api_reviews_scenario(api_as_service_account, cluster)
    api_status_scenario(api_as_service_account, cluster)
    # GET /v1/jobs: a cluster-scoped list of rljobs, which the API's ClusterRoleBinding allows.
    api_every_namespace_scenario(api_as_service_account, cluster)
    api_scale_scenario(api_as_service_account, cluster)  # a patch of rljobs/scale

    check(grants_of(render(), API_SA), component_requests(cluster.api.log))
