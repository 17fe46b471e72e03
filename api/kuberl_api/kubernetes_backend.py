"""The kubernetes backend: jobs are RLJob custom objects, and Kubernetes decides who may do what.

Each request's bearer token goes to a TokenReview and each action to a SubjectAccessReview on
rljobs in the URL's namespace (the verb RBAC would check, on rljobs/scale for .../scale as for
`kubectl scale`; for GET /v1/jobs, `list` with no namespace, which only a ClusterRoleBinding
grants, as for `kubectl get rljobs -A`), so a user can do through the API exactly what `kubectl`
would let them do; the API's own ServiceAccount needs only the reviews, rljobs and rljobs/scale.
A request that asks about several actions (a scrape of /metrics) reviews its token once.
The operator is the only writer of `.status`: this backend writes the spec (create, merge patch
of `spec.suspend`, and the scale subresource, so that the operator's webhook holds a scale to
the job's bounds as it holds `kubectl scale`'s) and deletes, nothing else. It calls Kubernetes
through the operator's client (kuberl_operator.kube), as the API's own ServiceAccount; a job's
logs come from its Ray head, through the operator's log relay (ray_logs).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kuberl_api.backend import (
    Action,
    ApiError,
    Cause,
    Identity,
    JobChunk,
    JobSummary,
    ListQuery,
    ProgressRow,
    already_exists,
    no_policy,
    not_found,
)
from kuberl_api.listing_cache import ListingCache
from kuberl_api.ray_logs import DriverLogs
from kuberl_api.scaling import WORKERS_FIELD
from kuberl_api.selectors import matches, parse_label_selector
from kuberl_api.submission import invalid
from kuberl_operator.builders import WarmStartUnavailable, cluster_warm_start_source
from kuberl_operator.constants import API_VERSION, GROUP, PLURAL, VERSION
from kuberl_operator.kube import Kube, KubeConfig, KubeError, path
from kuberl_operator.spec import Progress, RLJob

LISTING_TTL_SECONDS = 5.0
"""How long /metrics reuses its list of every RLJob: Prometheus replicas scraping together cost
one list (listing_cache.py says why the listing is kept and never a caller's rights)."""


def rljobs_path(namespace: str | None = None, name: str | None = None) -> str:
    """RLJobs of `namespace` (of every namespace when None), or the one called `name`."""
    return path(API_VERSION, PLURAL, namespace, name)


def scale_path(namespace: str, name: str) -> str:
    """The scale subresource of the RLJob `name` (autoscaling/v1 Scale: spec.replicas is the
    CRD's specReplicasPath, spec.rolloutWorkers.replicas)."""
    return f"{rljobs_path(namespace, name)}/scale"


async def review_token(kube: Kube, token: str) -> dict[str, Any]:
    """TokenReview's status: `authenticated`, `user` (username, uid, groups, extra), `error`."""
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    answer = await kube.request("POST", path("authentication.k8s.io/v1", "tokenreviews"), review)
    return answer.get("status") or {}


def identity_of(user: dict[str, Any]) -> Identity:
    """The Identity of a TokenReview's `status.user`."""
    return Identity(
        username=user.get("username") or "",
        uid=user.get("uid") or "",
        groups=tuple(user.get("groups") or ()),
        extra=dict(user.get("extra") or {}),
    )


async def review_access(kube: Kube, identity: Identity, action: Action) -> dict[str, Any]:
    """SubjectAccessReview's status (`allowed`, `reason`) for `identity` doing the action's verb
    on rljobs (or their subresource: `kubectl scale` needs `update` on rljobs/scale) in its
    namespace, or in every namespace when None: the review then names no namespace, which
    Kubernetes reads as all of them (only a ClusterRoleBinding allows that, never a
    RoleBinding)."""
    attributes = {"verb": action.verb, "group": GROUP, "version": VERSION, "resource": PLURAL}
    if action.subresource:
        attributes["subresource"] = action.subresource
    if action.namespace is not None:
        attributes["namespace"] = action.namespace
    if action.name:
        attributes["name"] = action.name
    spec: dict[str, Any] = {
        "user": identity.username,
        "groups": list(identity.groups),
        "resourceAttributes": attributes,
    }
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = identity.extra
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    url = path("authorization.k8s.io/v1", "subjectaccessreviews")
    return (await kube.request("POST", url, review)).get("status") or {}


class KubernetesAuthorizer:
    """A TokenReview per request (authenticate), then a SubjectAccessReview per action (check)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def authenticate(self, token: str | None) -> Identity:
        if not token:
            raise ApiError(
                401, "Unauthorized", "missing bearer token: send 'Authorization: Bearer <token>'"
            )
        try:
            review = await review_token(self.kube, token)
        except KubeError as exc:
            raise upstream_error(exc) from None
        if not review.get("authenticated"):
            error = review.get("error")
            raise ApiError(
                401, "Unauthorized", f"invalid bearer token{': ' + error if error else ''}"
            )
        return identity_of(review.get("user") or {})

    async def check(self, identity: Identity, action: Action) -> None:
        try:
            access = await review_access(self.kube, identity, action)
        except KubeError as exc:
            raise upstream_error(exc) from None
        if not access.get("allowed"):
            who = identity.username or "the caller"
            target = f'{action.resource} "{action.name}"' if action.name else action.resource
            why = f": {access['reason']}" if access.get("reason") else ""
            raise ApiError(
                403, "Forbidden", f"{who} cannot {action.verb} {target} {action.scope}{why}"
            )

    async def authorize(self, token: str | None, action: Action) -> None:
        await self.check(await self.authenticate(token), action)


class KubernetesBackend:
    name = "kubernetes"
    counts_jobs = False  # the operator counts them
    history_source = (
        "the RLJob's .status.progress (the newest iteration only: Kubernetes keeps no history; "
        "the per-iteration series are in Prometheus)"
    )
    no_history_reason = (
        "the kubernetes backend keeps only a job's newest progress (.status.progress), not a "
        "history to draw: its learning curve is on Grafana's 'kuberl / Training' dashboard "
        "(from Prometheus)"
    )

    def __init__(self, config: KubeConfig, environ: Mapping[str, str] = os.environ) -> None:
        """`environ` says where the operator's log relay is, which the logs need
        (ray_logs.DriverLogs)."""
        self.kube = Kube(config)
        self.authorizer = KubernetesAuthorizer(self.kube)
        self.drivers = DriverLogs(environ)
        self.listing: ListingCache[list[JobSummary]] = ListingCache(LISTING_TTL_SECONDS)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self.drivers.close()
        await self.kube.close()

    async def not_ready_reason(self) -> str | None:
        try:
            if not await self.kube.serves(API_VERSION, PLURAL):
                return "the RLJob CRD (rljobs.kuberl.io) is not installed"
        except KubeError as exc:
            return exc.message
        return None

    async def create(self, namespace: str, job: RLJob, document: dict[str, Any]) -> dict[str, Any]:
        await self._check_warm_start(namespace, job)
        try:
            return await self.kube.request("POST", rljobs_path(namespace), document)
        except KubeError as exc:
            if exc.status == 404:  # the namespace, or the CRD, is missing
                raise ApiError(404, "NotFound", f"Kubernetes: {exc.message}") from None
            raise _job_error(exc, namespace, job.name) from None

    async def _check_warm_start(self, namespace: str, job: RLJob) -> None:
        """A 422 naming spec.trainer.warmStart.job when the job it names cannot start `job` (none
        of that name, no checkpoint yet, none that outlives its pods), read as the caller: the
        operator's webhook checks it too, where a cluster runs one."""
        warm_start = job.spec.trainer.warm_start
        if warm_start is None or warm_start.job is None:
            return
        try:
            found = await self.kube.request("GET", rljobs_path(namespace, warm_start.job))
        except KubeError as exc:
            if exc.status != 404:
                raise _job_error(exc, namespace, warm_start.job) from None
            found = None
        try:
            cluster_warm_start_source(job, found)
        except WarmStartUnavailable as exc:
            raise invalid([exc.problem]) from None

    async def list(self, namespace: str | None, query: ListQuery) -> JobChunk:
        """Kubernetes' own list (of every namespace when `namespace` is None: one cluster-scoped
        request, with the same selector and chunks), the phase filtered here."""
        requirements = parse_label_selector(query.label_selector)
        params = {}
        if query.label_selector:
            params["labelSelector"] = query.label_selector
        if query.limit:
            params["limit"] = str(query.limit)
        if query.continue_token:
            params["continue"] = query.continue_token
        try:
            answer = await self.kube.request("GET", rljobs_path(namespace), params=params)
        except KubeError as exc:
            raise _job_error(exc, namespace, None) from None
        # Custom resources cannot be selected by status fields: the phase is filtered here, so a
        # chunk may hold fewer than `limit` jobs (as with Kubernetes' own field selectors).
        items = [
            item
            for item in answer.get("items") or []
            if matches(requirements, item.get("metadata", {}).get("labels") or {})
            and (query.phase is None or (item.get("status") or {}).get("phase") == query.phase)
        ]
        return JobChunk(items, (answer.get("metadata") or {}).get("continue") or None)

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return await self.kube.request("GET", rljobs_path(namespace, name))
        except KubeError as exc:
            raise _job_error(exc, namespace, name) from None

    async def get_json(self, namespace: str, name: str) -> str:
        return json.dumps(await self.get(namespace, name))

    async def progress(self, namespace: str, name: str) -> list[ProgressRow]:
        status = (await self.get(namespace, name)).get("status") or {}
        progress = Progress.model_validate(status.get("progress") or {})
        if not progress.iteration:
            return []
        return [
            ProgressRow(
                iteration=progress.iteration,
                timesteps=progress.timesteps,
                episode_return_mean=progress.episode_return_mean,
                samples_per_second=progress.samples_per_second,
                checkpoint=progress.last_checkpoint,
            )
        ]

    async def set_suspended(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        try:
            return await self.kube.merge_patch(
                rljobs_path(namespace, name), {"spec": {"suspend": suspend}}
            )
        except KubeError as exc:
            raise _job_error(exc, namespace, name) from None

    async def scale(self, namespace: str, name: str, workers: int) -> dict[str, Any]:
        """Writes the scale subresource, as `kubectl scale` does: the API server and the
        operator's webhook (admission.scale_review) refuse a count outside the job's bounds."""
        try:
            await self.kube.merge_patch(
                scale_path(namespace, name), {"spec": {"replicas": workers}}
            )
        except KubeError as exc:
            if exc.status in (400, 422):
                message = f"Kubernetes refused the scale: {exc.message}"
                raise ApiError(
                    422, "Invalid", message, [Cause(WORKERS_FIELD, exc.message)]
                ) from None
            raise _job_error(exc, namespace, name) from None
        return await self.get(namespace, name)

    async def delete(self, namespace: str, name: str, purge: bool = False) -> dict[str, Any]:
        if purge:
            raise ApiError(
                400,
                "BadRequest",
                "purge: the kubernetes backend keeps no files of a job; its checkpoints stay "
                "where spec.trainer.checkpoint.uri or spec.storage put them: delete them there",
            )
        job = await self.get(namespace, name)
        try:
            await self.kube.request("DELETE", rljobs_path(namespace, name))
        except KubeError as exc:
            raise _job_error(exc, namespace, name) from None
        return job

    async def policy(self, namespace: str, name: str) -> bytes:
        job = await self.get(namespace, name)
        progress = Progress.model_validate((job.get("status") or {}).get("progress") or {})
        if progress.exported_policy is None:
            raise no_policy(namespace, name)
        raise ApiError(
            501,
            "NotImplemented",
            "the kubernetes backend does not reach the jobs' storage: the exported policy is "
            f"at {progress.exported_policy} (status.progress.exportedPolicy)",
        )

    async def logs(self, namespace: str, name: str, tail_lines: int | None) -> AsyncIterator[str]:
        return await self.drivers.snapshot(await self.get(namespace, name), tail_lines)

    async def follow_logs(
        self, namespace: str, name: str, tail_lines: int | None
    ) -> AsyncIterator[str]:
        job = await self.get(namespace, name)
        self.drivers.driver(job)  # a 501 comes before the stream

        async def read_job() -> dict[str, Any]:
            return await self.get(namespace, name)

        return self.drivers.follow(job, read_job, tail_lines)

    async def summaries(self) -> list[JobSummary]:
        """Every namespace's jobs, as the API's ServiceAccount may read them, listed at most once
        per LISTING_TTL_SECONDS: /metrics shows each caller only the namespaces its own token may
        list (metrics.visible_jobs), and lists nothing for a caller without a valid one."""
        try:
            return list(await self.listing.get(self._list_summaries))
        except KubeError:
            return []  # /metrics still answers (request metrics) while Kubernetes is away

    async def _list_summaries(self) -> list[JobSummary]:
        answer = await self.kube.request("GET", rljobs_path())
        return [JobSummary.of(item) for item in answer.get("items") or []]


def _job_error(exc: KubeError, namespace: str | None, name: str | None) -> ApiError:
    if exc.status == 404 and name:
        return not_found(namespace, name)
    if exc.status == 409 and name:
        return already_exists(namespace, name)
    if exc.status in (400, 422):
        return ApiError(422, "Invalid", f"Kubernetes refused the job: {exc.message}")
    return upstream_error(exc)


def upstream_error(exc: KubeError) -> ApiError:
    """Kubernetes failing the API itself (unreachable, or its ServiceAccount lacks a right): not
    the caller's fault, so 503 when unreachable and 500 otherwise, with Kubernetes' words."""
    if exc.status == 0:
        return ApiError(503, "ServiceUnavailable", exc.message)
    return ApiError(500, "InternalError", f"Kubernetes answered {exc.status}: {exc.message}")
