"""Who is who and who may do what on the emulated Kubernetes API (tests/kubeapi.py): its
TokenReview and SubjectAccessReview endpoints, answered from the tables below, and counts of what
the API asked it. (A module of its own: `conftest` names clash between test directories.)"""

from __future__ import annotations

from typing import Any

import kmock

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ALL_RLJOBS = "/apis/kuberl.io/v1alpha1/rljobs"
"""The cluster-scoped list of every namespace's RLJobs."""

TOKENS = {
    "alice-token": {"username": "alice", "uid": "1", "groups": ["system:authenticated"]},
    "bob-token": {"username": "bob", "uid": "2", "groups": ["system:authenticated"]},
    "carol-token": {"username": "carol", "uid": "3", "groups": ["system:authenticated"]},
    "dave-token": {"username": "dave", "uid": "4", "groups": ["system:authenticated"]},
}
# RBAC as the emulated cluster's reviews answer it: alice may do anything with rljobs in team-a,
# bob may only read them there, carol may only read them in team-b (RoleBindings); dave may read
# them everywhere (a ClusterRoleBinding: namespace "", which also grants in each namespace).
ALLOWED = {
    ("alice", "team-a"): {"create", "get", "list", "patch", "delete"},
    ("bob", "team-a"): {"get", "list"},
    ("carol", "team-b"): {"get", "list"},
    ("dave", ""): {"get", "list"},
}
# Their scale subresource (rljobs/scale), as the chart's edit and view roles grant it: alice may
# scale them in team-a, bob may only read their scale there.
ALLOWED_ON_SCALE = {
    ("alice", "team-a"): {"get", "update", "patch"},
    ("bob", "team-a"): {"get"},
}


def rbac_allows(user: str, verb: str, namespace: str | None, subresource: str = "") -> bool:
    """As RBAC decides: a review without a namespace (every namespace) is allowed only by a
    cluster-wide grant; one in a namespace by a grant there or a cluster-wide one. A grant on
    rljobs grants nothing on their subresources."""
    grants = {"": ALLOWED, "scale": ALLOWED_ON_SCALE}.get(subresource, {})
    where = {"", namespace or ""}
    return any(verb in grants.get((user, scope), ()) for scope in where)


def answer_reviews(kube_api: Any) -> list[dict[str, Any]]:
    """Makes `kube_api` answer TokenReviews from TOKENS and SubjectAccessReviews from ALLOWED;
    returns the list where each SubjectAccessReview's user and resourceAttributes are recorded."""
    reviews: list[dict[str, Any]] = []

    def token_review(request):
        user = TOKENS.get(request.data["spec"]["token"])
        status = {"authenticated": True, "user": user} if user else {"authenticated": False}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}

    def access_review(request):
        spec = request.data["spec"]
        attributes = spec["resourceAttributes"]
        reviews.append({"user": spec["user"], **attributes})
        allowed = (
            attributes["group"] == "kuberl.io"
            and attributes["resource"] == "rljobs"
            and rbac_allows(
                spec["user"],
                attributes["verb"],
                attributes.get("namespace"),
                attributes.get("subresource", ""),
            )
        )
        status = {"allowed": allowed, **({} if allowed else {"reason": "no RBAC rule allows it"})}
        return {"kind": "SubjectAccessReview", "status": status}

    async def react():
        api = kube_api.api
        api[kmock.action.CREATE, kmock.resource("authentication.k8s.io", "v1", "tokenreviews")] << (
            token_review
        )
        (
            api[
                kmock.action.CREATE,
                kmock.resource("authorization.k8s.io", "v1", "subjectaccessreviews"),
            ]
            << access_review
        )

    kube_api.call(react)
    return reviews


def requests_to(kube_api: Any, method: str, path: str, since: int = 0) -> int:
    """How many `method` requests for `path` the emulated API received after its first `since`
    requests."""
    log = list(kube_api.api.log)[since:]
    return sum(1 for logged in log if logged.method == method and logged.path == path)
