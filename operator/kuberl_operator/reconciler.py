"""One reconcile of one RLJob: observe, `compute_status`, write the status and Events, act.

The reconciler holds no state of its own that matters for correctness: the attempt, the counters
and the backoff clock live in the RLJob's status, the Ray cluster's attempt in its label, and the
driver's submission in the Ray Jobs API under an id fixed per attempt. So an operator restarted at
any point picks up where it was, without duplicate children or submissions. Each job's Ray auth
token is derived from the settings' ray_auth_key and the job's identity (builders.ray_auth_token),
so no Secret is read back; only without a key (a local run) does the reconciler read tokens back
and cache them. (It also caches whether KubeRay is installed, re-read when missing; KubeRay found
installed is looked for again whenever a job's RayCluster is missing, so an uninstalled KubeRay is
reported as such rather than as errors.)

Every request to a Ray head (Jobs API, driver metrics) goes over ray_jobs.RayHeads' one session.

Only the job's own children are observed and acted on (ownership.py); deletions and patches carry
the UID observed, so Kubernetes refuses them for an object that took the name in between.

A job is checked once per version: its spec (validation.py), then what it may reach against the
operator's settings (policy.py); either's problems fail it with reason InvalidSpec.

Order matters once: the status is written before the action is carried out, so an attempt number
is on record before its Ray cluster exists, and a crash in between only repeats the action.
"""

from __future__ import annotations

import base64
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from kuberl_contract.final_record import FinalRecord, read_final_record
from kuberl_operator import builders
from kuberl_operator.constants import (
    API_VERSION,
    ATTEMPT_LABEL,
    JOB_LABEL,
    KIND,
    KUBERAY_CONFIRM_SECONDS,
    KUBERAY_RECHECK_SECONDS,
    PLURAL,
    RAY_API_VERSION,
    RAY_AUTH_TOKEN_SECRET_KEY,
    RAY_CLUSTER_LABEL,
)
from kuberl_operator.kube import Kube, KubeError, path
from kuberl_operator.metrics import OperatorMetrics, rollout_workers
from kuberl_operator.observe import (
    head_pod,
    observed_cluster,
    observed_head,
    pending_spot_workers,
    progress_from_final_record,
    progress_from_metrics,
    taken_name,
    unschedulable,
    waiting_from_metrics,
    workers,
)
from kuberl_operator.ownership import ensure_child, taken_names
from kuberl_operator.policy import reach_problems
from kuberl_operator.ray_jobs import RayHeads, RayJobsClient, RayJobsError
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import Phase, RLJob, RLJobStatus
from kuberl_operator.status import (
    TERMINAL,
    Action,
    CreateCluster,
    DeleteCluster,
    DeleteJob,
    DriverState,
    Nothing,
    Observed,
    ObservedDriver,
    ObservedProgress,
    Requeue,
    StatusUpdate,
    SubmitDriver,
    TakenName,
    compute_status,
)
from kuberl_operator.validation import InvalidManifest, validate_rljob

RAY_CLUSTERS = (RAY_API_VERSION, "rayclusters")
# The driver states after which it serves no metrics and its log ends with its final record.
ENDED = frozenset({DriverState.SUCCEEDED, DriverState.FAILED, DriverState.STOPPED})
# A job that waits for nothing but an edit (suspended) is still looked at now and then.
IDLE_SECONDS = 300.0
# The end of an ended driver's log that holds its final record (its last line, before Ray's own
# few), and the most of it kept: lines may be long.
FINAL_RECORD_LINES = 50
MAX_FINAL_RECORD_BYTES = 1024 * 1024

logger = logging.getLogger(__name__)


def read_job(body: Mapping[str, Any]) -> tuple[RLJob | None, tuple[str, ...]]:
    """The RLJob as the operator validates it (kmock and a cluster without the CRD's schema accept
    anything), or the problems, each naming its field."""
    meta = body.get("metadata", {})
    kept = ("name", "namespace", "uid", "labels", "annotations")  # the UID keys the token Secret
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta[key] for key in kept if key in meta},
        "spec": body.get("spec"),
    }
    try:
        return validate_rljob(document), ()
    except InvalidManifest as exc:
        return None, tuple(str(problem) for problem in exc.problems)


def read_status(raw: Mapping[str, Any] | None) -> RLJobStatus:
    """The status the operator wrote last; fields it does not know (another writer's) are
    ignored rather than lost counts."""
    known = {field.alias or name for name, field in RLJobStatus.model_fields.items()}
    return RLJobStatus.model_validate({k: v for k, v in (raw or {}).items() if k in known})


def status_patch(status: RLJobStatus) -> dict[str, Any]:
    """A merge patch that makes the stored status equal `status` (None values delete keys)."""
    return {"status": status.model_dump(mode="json", by_alias=True)}


class Reconciler:
    """Reconciles RLJobs with one Kubernetes client, one settings value and one metrics registry."""

    def __init__(self, kube: Kube, settings: OperatorSettings, metrics: OperatorMetrics):
        self.kube, self.settings, self.metrics = kube, settings, metrics
        self._kuberay: tuple[bool, float] = (False, -math.inf)  # (installed, when checked)
        self._tokens: dict[tuple[str, str], str] = {}
        # Each job's last validation, by (uid, resourceVersion): polling an unchanged job (most of
        # them, most of the time) need not validate its spec again.
        self._jobs: dict[tuple[str, str], tuple[tuple[Any, Any], RLJob | None, tuple[str, ...]]]
        self._jobs = {}
        self.heads = RayHeads()

    async def close(self) -> None:
        await self.heads.close()
        await self.kube.close()

    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        """Reconcile once; the seconds until the job should be looked at again, or None when
        there is nothing left to do for it (finished, no TTL)."""
        started = time.perf_counter()
        try:
            return await self._reconcile(body)
        except (KubeError, RayJobsError):
            self.metrics.reconcile_errors.labels(namespace=body["metadata"]["namespace"]).inc()
            raise
        finally:
            self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    def forget(self, namespace: str, name: str) -> None:
        """The RLJob is gone."""
        self._tokens.pop((namespace, name), None)
        self._jobs.pop((namespace, name), None)
        self.metrics.forget(namespace, name)

    # --- Observe ---------------------------------------------------------------------------------

    async def _reconcile(self, body: Mapping[str, Any]) -> float | None:
        meta = body["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        status = read_status(body.get("status"))
        job, problems = self._read_job(body)
        now = datetime.now(UTC)
        found: dict[str, Any] = {}
        ray_cluster = pods = None
        taken: list[TakenName] = []
        kuberay = await self._kuberay_available() if job else True
        if job is not None and kuberay:
            ray_cluster, taken = await self._own_cluster(namespace, name, uid)
            if ray_cluster is None and not taken:  # none yet, or KubeRay was uninstalled
                kuberay = await self._kuberay_available(trusted_for=KUBERAY_CONFIRM_SECONDS)
            if ray_cluster is not None:
                cluster_name = ray_cluster["metadata"]["name"]
                pods = await self.kube.list(
                    path("v1", "pods", namespace), {RAY_CLUSTER_LABEL: cluster_name}
                )
                found = await self._observe_cluster(job, uid, status, ray_cluster, pods)
            elif kuberay and status.phase not in TERMINAL:  # its children would be created next
                refs = builders.child_refs(job, self.settings)
                others = [ref for ref in refs if ref.kind != "RayCluster"]
                taken += await taken_names(self.kube, namespace, name, uid, others)
        observed = Observed(
            status=status,
            generation=int(meta.get("generation") or 1),
            now=now,
            kuberay_available=kuberay,
            spec_problems=problems,
            taken_names=tuple(taken),
            **found,
        )
        update = compute_status(job.spec if job else None, observed)
        if update.status != status:
            await self.kube.merge_patch(
                path(API_VERSION, PLURAL, namespace, name, "status"), status_patch(update.status)
            )
        spot = job is not None and job.spec.rollout_workers.spot.enabled
        workers = rollout_workers(pods or [], spot)
        self.metrics.observed(namespace, name, status, update.status, workers)
        for event in update.events:
            kopf.event(dict(body), type=event.type, reason=event.reason, message=event.message)
        if job is not None and ray_cluster is not None and update.phase not in TERMINAL:
            await self._fall_back_to_on_demand(job, ray_cluster, pods or [], now)
        return await self._act(update, body, job, ray_cluster)

    def _read_job(self, body: Mapping[str, Any]) -> tuple[RLJob | None, tuple[str, ...]]:
        """`read_job`, then what the job may reach (`reach_problems`), once per version of the
        object."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        version = (meta.get("uid"), meta.get("resourceVersion"))
        cached = self._jobs.get(key)
        if cached is not None and cached[0] == version and version[1] is not None:
            return cached[1], cached[2]
        job, problems = read_job(body)
        if job is not None and (beyond := reach_problems(job, self.settings)):
            job, problems = None, tuple(str(problem) for problem in beyond)
        self._jobs[key] = (version, job, problems)
        return job, problems

    async def _own_cluster(
        self, namespace: str, name: str, uid: str
    ) -> tuple[dict | None, list[TakenName]]:
        """The job's RayCluster (None while it has none); one of its name that is not the job's
        is only a taken name: it is never followed nor acted on."""
        cluster_path = path(*RAY_CLUSTERS, namespace, builders.ray_cluster_name(name))
        found = await self.kube.get(cluster_path)
        if found is not None and (other := taken_name("RayCluster", found, name, uid)):
            return None, [other]
        return found, []

    async def _kuberay_available(self, trusted_for: float = math.inf) -> bool:
        """Whether KubeRay's RayCluster CRD is served (API discovery). A found CRD is believed for
        `trusted_for` seconds, a missing one for half of KUBERAY_RECHECK_SECONDS."""
        installed, checked = self._kuberay
        age = time.monotonic() - checked
        if age < (trusted_for if installed else KUBERAY_RECHECK_SECONDS / 2):
            return installed
        installed = await self.kube.serves(*RAY_CLUSTERS)
        self._kuberay = (installed, time.monotonic())
        return installed

    async def _observe_cluster(
        self, job: RLJob, uid: str, status: RLJobStatus, ray_cluster: dict, pods: list[dict]
    ) -> dict[str, Any]:
        """What the cluster says; the head, workers and driver only for the current attempt's
        cluster (a stale one is only in the way)."""
        head = head_pod(pods)
        cluster = observed_cluster(ray_cluster, head)
        found: dict[str, Any] = {"cluster": cluster}
        attempt = status.attempt or cluster.attempt
        if cluster.attempt != attempt:
            return found
        disrupted, short = workers(ray_cluster, pods)
        found.update(
            head=observed_head(head),
            disrupted_workers=disrupted,
            workers_short=short,
            stale_spec=builders.stale_spec(job, ray_cluster),
            unschedulable=unschedulable(pods),
        )
        client = await self._jobs_client(job, uid) if cluster.ready else None
        if client is not None:
            submission = builders.submission_id(job, attempt)
            driver = await self._driver(client, job, submission)
            if driver is not None and driver.state == DriverState.RUNNING:
                found["progress"], found["driver_waiting_s"] = await self._metrics(job)
            elif driver is not None and driver.state in ENDED:
                record = await self._final_record(client, job, submission)
                found["progress"] = progress_from_final_record(record)
                if record is not None:  # its words, not the Jobs API's wrapping of its log
                    driver = replace(driver, message=record.message, outcome=record.outcome)
            found["driver"] = driver
        return found

    async def _jobs_client(self, job: RLJob, uid: str) -> RayJobsClient | None:
        """The Jobs API of the job's own cluster (observed as such already)."""
        namespace = job.metadata.namespace or "default"
        if (token := await self._token(namespace, job.name, uid)) is None:
            return None
        return self.heads.jobs(_head_url(namespace, job.name, self.settings.dashboard_url), token)

    async def jobs_client(self, namespace: str, name: str, uid: str) -> RayJobsClient | None:
        """The Jobs API of the head of the job `namespace/name` with UID `uid`, with the job's
        token, for the log relay, which reads drivers' output through it. None while the token is
        not to be had (see `_token`), and when the RayCluster of the job's name is another's: its
        head is not the job's, and gets neither the job's token nor its questions."""
        if (await self._own_cluster(namespace, name, uid))[1]:
            return None
        if (token := await self._token(namespace, name, uid)) is None:
            return None
        return self.heads.jobs(_head_url(namespace, name, self.settings.dashboard_url), token)

    async def _driver(
        self, client: RayJobsClient, job: RLJob, submission: str
    ) -> ObservedDriver | None:
        try:
            found = await client.status(submission)
        except RayJobsError as exc:
            logger.info("%s: %s", job.name, exc)  # the head is coming up or going away
            return None
        if found is None:
            return None
        return ObservedDriver(DriverState(found.status), found.message, found.exit_code)

    async def _metrics(self, job: RLJob) -> tuple[ObservedProgress | None, float]:
        """The running driver's progress and how long it has waited for its workers' nodes."""
        url = _head_url(job.metadata.namespace or "default", job.name, self.settings.metrics_url)
        try:
            text = await self.heads.driver_metrics(url)
            return progress_from_metrics(text), waiting_from_metrics(text)
        except (RayJobsError, ValueError) as exc:
            logger.info("%s: no progress from %s: %s", job.name, url, exc)
            return None, 0.0

    async def _final_record(
        self, client: RayJobsClient, job: RLJob, submission: str
    ) -> FinalRecord | None:
        """An ended driver serves no metrics: how it ended, and where training stood, is in the
        final record that ends its log (`ended_drivers_record`)."""
        try:
            return await ended_drivers_record(client, submission)
        except RayJobsError as exc:
            logger.info("%s: %s", job.name, exc)
            return None

    async def _token(self, namespace: str, name: str, uid: str) -> str | None:
        """The job's Ray auth token: derived when the settings hold a key; else read back from
        the job's Secret (None while it is missing, or when the Secret of that name is not the
        job's: someone else's token is never used)."""
        key = (namespace, name)
        derived = builders.ray_auth_token(self.settings, *key, uid)
        if derived is not None:
            return derived
        if key not in self._tokens:
            secret = await self.kube.get(
                path("v1", "secrets", namespace, builders.child_names_of(name).auth_secret)
            )
            if secret is None or taken_name("Secret", secret, name, uid):
                return None
            data = secret.get("data") or {}
            if RAY_AUTH_TOKEN_SECRET_KEY not in data:
                return None
            self._tokens[key] = base64.b64decode(data[RAY_AUTH_TOKEN_SECRET_KEY]).decode()
        return self._tokens[key]

    # --- Act -------------------------------------------------------------------------------------

    async def _act(
        self,
        update: StatusUpdate,
        body: Mapping[str, Any],
        job: RLJob | None,
        ray_cluster: dict | None,
    ) -> float | None:
        """Carry out the decision; `ray_cluster` is the job's own (None when it has none)."""
        action: Action = update.action
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        poll = self.settings.poll_seconds
        match action:
            case CreateCluster(attempt=attempt):
                assert job is not None
                await self._create_children(body, job, attempt)
                return poll
            case SubmitDriver(attempt=attempt):
                assert job is not None
                await self._submit(job, body["metadata"].get("uid", ""), attempt)
                return poll
            case DeleteCluster():
                assert ray_cluster is not None  # decided only for a cluster observed as the job's
                meta = ray_cluster["metadata"]
                cluster_path = path(*RAY_CLUSTERS, namespace, meta["name"])
                await self.kube.delete(cluster_path, uid=meta["uid"])
                return poll
            case DeleteJob():
                uid = body["metadata"].get("uid")
                await self.kube.delete(path(API_VERSION, PLURAL, namespace, name), uid=uid)
                return None
            case Requeue(after_seconds=seconds):
                return max(seconds, 0.5)
            case Nothing():
                if update.phase in TERMINAL:
                    return None
                return IDLE_SECONDS if update.phase == Phase.SUSPENDED else poll
        raise AssertionError(f"unknown action {action!r}")

    async def _create_children(self, body: Mapping[str, Any], job: RLJob, attempt: int) -> None:
        """Create what the attempt runs on, each unless it exists; the job's manifest and the
        head's disruption budget are updated in place, so the attempt runs the spec as it is now.
        A name held by an object the job does not own stops it there (ownership.ensure_child)."""
        namespace, uid = job.metadata.namespace or "default", body["metadata"].get("uid", "")
        token = await self._token(namespace, job.name, uid) or secrets.token_urlsafe(32)
        children = builders.build_children(job, self.settings, attempt, token)
        owner = {"apiVersion": API_VERSION, "kind": KIND, "metadata": body["metadata"]}
        kopf.append_owner_reference(children, owner=owner)
        refs = {ref.kind: ref for ref in builders.child_refs(job, self.settings)}
        for child in children:
            try:
                ensured = await ensure_child(
                    self.kube, refs[child["kind"]], child, namespace, job.name, uid
                )
            except KubeError as exc:
                if exc.status == 404 and child["kind"] == "RayCluster":
                    self._kuberay = (False, time.monotonic())  # its CRD is gone with KubeRay
                raise
            if not ensured:
                break
        self._tokens.pop((namespace, job.name), None)  # read back: the Secret may have existed

    async def _submit(self, job: RLJob, uid: str, attempt: int) -> None:
        client = await self._jobs_client(job, uid)
        if client is None:
            raise RayJobsError(f"{job.name}: the Ray auth Secret is missing")
        submission = builders.submission_id(job, attempt)
        entrypoint = builders.driver_entrypoint(job, self.settings)
        metadata = {JOB_LABEL: job.name, ATTEMPT_LABEL: str(attempt)}
        if await client.submit(submission, entrypoint, metadata):
            logger.info("%s: submitted the driver as %s", job.name, submission)

    async def _fall_back_to_on_demand(
        self, job: RLJob, ray_cluster: dict, pods: list[dict], now: datetime
    ) -> None:
        pending, pending_for = pending_spot_workers(pods, now)
        replicas = builders.fallback_replicas(job, pending, pending_for, self.settings)
        operations = builders.scale_on_demand(ray_cluster, replicas)
        if operations:
            meta = ray_cluster["metadata"]
            # The `test` makes the patch fail should the name hold another cluster by now.
            same = {"op": "test", "path": "/metadata/uid", "value": meta["uid"]}
            await self.kube.json_patch(
                path(*RAY_CLUSTERS, job.metadata.namespace or "default", meta["name"]),
                [same, *operations],
            )


def _head_url(namespace: str, name: str, url: Callable[[str, str, str], str]) -> str:
    """A URL (`url`: a settings template) on the head Service of the job `namespace/name`, the
    one its RayCluster names."""
    names = builders.child_names_of(name)
    return url(names.head_service, names.ray_cluster, namespace)


async def ended_drivers_record(client: RayJobsClient, submission: str) -> FinalRecord | None:
    """The final record at the end of an ended driver's log, None without one. Only the log's
    last FINAL_RECORD_LINES lines are read, cut on the driver's node, and at most
    MAX_FINAL_RECORD_BYTES of them kept: a driver that wrote gigabytes costs the operator
    kilobytes. Raises RayJobsError when the head cannot say."""
    status = await client.status(submission)
    if status is None or status.node_id is None:
        return None
    end = b""
    async for piece in client.log_file(submission, status.node_id, FINAL_RECORD_LINES):
        end = (end + piece)[-MAX_FINAL_RECORD_BYTES:]
    return read_final_record(end.decode(errors="replace"))
