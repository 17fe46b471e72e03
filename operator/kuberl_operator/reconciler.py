"""One reconcile of one RLJob: observe (job_observer.py), `compute_status`, write the status and
Events, act.

The reconciler holds no state of its own that matters for correctness: the attempt, the counters
and the backoff clock live in the RLJob's status, the Ray cluster's attempt in its label, and the
driver's submission in the Ray Jobs API under an id fixed per attempt. So an operator restarted at
any point picks up where it was, without duplicate children or submissions.

Only the job's own children are observed and acted on (ownership.py); deletions and patches carry
the UID observed, so Kubernetes refuses them for an object that took the name in between.

A job is checked once per version: its spec (validation.py), then what it may reach against the
operator's settings (reach.py); either's problems fail it with reason InvalidSpec.

Order matters twice: the status is written before the action is carried out, so an attempt number
is on record before its Ray cluster exists, and a crash in between only repeats the action; and the
Ray nodes of pods about to go are drained before the status that remembers them (status.draining)
is written, so a drain that failed is tried again, and one repeated after a crash is refused by
its fixed submission id.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf

from kuberl_contract.attempt import ATTEMPT_ENV
from kuberl_contract.drain import checkpoint_now_entrypoint, drain_entrypoint
from kuberl_operator import builders
from kuberl_operator.constants import API_VERSION, ATTEMPT_LABEL, JOB_LABEL, KIND, PLURAL
from kuberl_operator.job_observer import RAY_CLUSTERS, JobObserver
from kuberl_operator.kube import Kube, KubeError, path
from kuberl_operator.metrics import OperatorMetrics, rollout_workers
from kuberl_operator.observe import pending_rollout_pods
from kuberl_operator.ownership import ensure_child
from kuberl_operator.ray_jobs import RayJobsError
from kuberl_operator.reach import reach_problems
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import Phase, Reason, RLJob, RLJobStatus
from kuberl_operator.status import (
    TERMINAL,
    Action,
    CreateCluster,
    DeleteCluster,
    DeleteJob,
    Nothing,
    Requeue,
    StatusUpdate,
    StopDrivers,
    SubmitDriver,
    compute_status,
)
from kuberl_operator.status.disruption import drain_submission_id, draining_message
from kuberl_operator.validation import InvalidManifest, Problem, validate_rljob

# A job that waits for nothing but an edit (suspended) is still looked at now and then.
IDLE_SECONDS = 300.0

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


def served_job_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    """What a valid job may not ask of a cluster: what its settings do not let it reach, and a
    warm start from a relative path (which the head would read in a directory of its own)."""
    return [*reach_problems(job, settings), *builders.served_warm_start_problems(job)]


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
        self.observer = JobObserver(kube, settings)
        # Each job's last validation, by (uid, resourceVersion): polling an unchanged job (most of
        # them, most of the time) need not validate its spec again.
        self._jobs: dict[tuple[str, str], tuple[tuple[Any, Any], RLJob | None, tuple[str, ...]]]
        self._jobs = {}
        # Each waiting job's last WarmStartUnavailable message, by uid: said once, not each poll.
        self._warm_start_waits: dict[str, str] = {}

    async def close(self) -> None:
        await self.observer.close()
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
        self.observer.forget(namespace, name)
        self._jobs.pop((namespace, name), None)
        self.metrics.forget(namespace, name)

    async def _reconcile(self, body: Mapping[str, Any]) -> float | None:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        status = read_status(body.get("status"))
        job, problems = self._read_job(body)
        seen = await self.observer.observe(body, status, job, problems)
        update = compute_status(job.spec if job else None, seen.observed)
        if update.drains:
            assert job is not None  # pods about to go are observed only under a running driver
            update = await self._drain(job, meta.get("uid", ""), update)
        if update.status != status:
            await self.kube.merge_patch(
                path(API_VERSION, PLURAL, namespace, name, "status"), status_patch(update.status)
            )
        spot = job is not None and job.spec.rollout_workers.spot.enabled
        workers = rollout_workers(seen.pods, spot)
        budget = job.spec.budget.max_dollars if job is not None and job.spec.budget else None
        self.metrics.observed(namespace, name, status, update.status, workers, budget)
        for event in update.events:
            kopf.event(dict(body), type=event.type, reason=event.reason, message=event.message)
        for pod in update.drains:
            message = draining_message(pod)
            kopf.event(dict(body), type="Normal", reason=Reason.NODE_DRAINING, message=message)
        if update.on_demand_replicas is not None:
            assert seen.ray_cluster is not None  # decided only for a cluster observed as the job's
            operations = builders.scale_on_demand(seen.ray_cluster, update.on_demand_replicas)
            await self._patch_cluster(seen.ray_cluster, operations)
        if update.rollout_replicas is not None:
            assert seen.ray_cluster is not None  # decided only for the current attempt's cluster
            pending = [pod["metadata"]["name"] for pod in pending_rollout_pods(seen.pods)]
            operations = builders.scale_rollout(seen.ray_cluster, update.rollout_replicas, pending)
            await self._patch_cluster(seen.ray_cluster, operations)
        if update.scale_to is not None:  # as an HPA writes it: the cluster follows next poll
            workers = {"rolloutWorkers": {"replicas": update.scale_to}}
            await self.kube.merge_patch(
                path(API_VERSION, PLURAL, namespace, name), {"spec": workers}
            )
        return await self._act(update, body, job, seen.ray_cluster)

    def _read_job(self, body: Mapping[str, Any]) -> tuple[RLJob | None, tuple[str, ...]]:
        """`read_job`, then what the job may ask of a cluster (`served_job_problems`), once per
        version of the object."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        version = (meta.get("uid"), meta.get("resourceVersion"))
        cached = self._jobs.get(key)
        if cached is not None and cached[0] == version and version[1] is not None:
            return cached[1], cached[2]
        job, problems = read_job(body)
        if job is not None and (beyond := served_job_problems(job, self.settings)):
            job, problems = None, tuple(str(problem) for problem in beyond)
        self._jobs[key] = (version, job, problems)
        return job, problems

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
            case StopDrivers(attempts=attempts):
                assert job is not None
                # Looked at again each poll until they have ended: never waited for in here.
                await self._stop(job, body["metadata"].get("uid", ""), attempts)
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
        try:
            warm_start = await self._warm_start(job, read_status(body.get("status")))
        except builders.WarmStartUnavailable as exc:
            if self._warm_start_waits.get(uid) != (message := str(exc)):
                reason = Reason.WARM_START_UNAVAILABLE
                kopf.event(dict(body), type="Warning", reason=reason, message=message)
                self._warm_start_waits[uid] = message
            return
        self._warm_start_waits.pop(uid, None)
        token = await self.observer.token(namespace, job.name, uid) or secrets.token_urlsafe(32)
        children = builders.build_children(job, self.settings, attempt, token, warm_start)
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
                    self.observer.kuberay_gone()  # its CRD is gone with KubeRay
                raise
            if not ensured:
                break
        self.observer.forget(namespace, job.name)  # read back: the Secret may have existed

    async def _submit(self, job: RLJob, uid: str, attempt: int) -> None:
        client = await self.observer.job_client(job, uid)
        if client is None:
            raise RayJobsError(f"{job.name}: the Ray auth Secret is missing")
        submission = builders.submission_id(job, attempt)
        entrypoint = builders.driver_entrypoint(job, self.settings)
        metadata = {JOB_LABEL: job.name, ATTEMPT_LABEL: str(attempt)}
        # The driver records its attempt in its checkpoints and is fenced by it: a stale attempt
        # never clobbers a newer one's (kuberl_trainer.job.fencing).
        env = {ATTEMPT_ENV: str(attempt)}
        if await client.submit(submission, entrypoint, metadata, env):
            logger.info("%s: submitted the driver as %s", job.name, submission)

    async def _drain(self, job: RLJob, uid: str, update: StatusUpdate) -> StatusUpdate:
        """Drain the Ray nodes of the pods about to go (`update.drains`), one Ray job each on the
        job's head (kuberl_contract.drain; for the head's own pod, a notice that has the driver
        checkpoint at once). The update comes back with only the pods drained, those
        that could not be (the head unreachable) left out of status.draining: the next poll tries
        them again, and the fixed submission id keeps a retry from draining twice."""
        client = await self.observer.job_client(job, uid)
        drained = []
        for pod in update.drains:
            submission = drain_submission_id(update.attempt, pod.name)
            metadata = {JOB_LABEL: job.name, ATTEMPT_LABEL: str(update.attempt)}
            try:
                if client is None:
                    raise RayJobsError("the Ray auth Secret is missing")
                entrypoint = (
                    checkpoint_now_entrypoint(pod.deadline_s, pod.reason)
                    if pod.head
                    else drain_entrypoint([pod.ip], pod.deadline_s, pod.reason)
                )
                if await client.submit(submission, entrypoint, metadata):
                    logger.info("%s: draining pod %s as %s", job.name, pod.name, submission)
            except (RayJobsError, ValueError) as exc:
                logger.warning(
                    "%s: pod %s is about to go, not drained: %s", job.name, pod.name, exc
                )
                continue
            drained.append(pod)
        undrained = {pod.name for pod in update.drains} - {pod.name for pod in drained}
        draining = [name for name in update.status.draining if name not in undrained]
        status = update.status.model_copy(update={"draining": draining})
        return replace(update, status=status, drains=tuple(drained))

    async def _stop(self, job: RLJob, uid: str, attempts: tuple[int, ...]) -> None:
        """Ask the Jobs API to stop these attempts' drivers (SIGTERM, then SIGKILL after Ray's
        grace); asking again while one stops changes nothing."""
        client = await self.observer.job_client(job, uid)
        if client is None:
            raise RayJobsError(f"{job.name}: the Ray auth Secret is missing")
        for attempt in attempts:
            submission = builders.submission_id(job, attempt)
            if await client.stop(submission):
                logger.info("%s: stopping %s before the next attempt", job.name, submission)

    async def _patch_cluster(self, ray_cluster: dict, operations: list[dict]) -> None:
        """Apply a builder's JSON patch of the cluster's groups (builders.scaling), if any."""
        if operations:
            meta = ray_cluster["metadata"]
            # The `test` makes the patch fail should the name hold another cluster by now.
            same = {"op": "test", "path": "/metadata/uid", "value": meta["uid"]}
            await self.kube.json_patch(
                path(*RAY_CLUSTERS, meta["namespace"], meta["name"]), [same, *operations]
            )

    async def _warm_start(self, job: RLJob, status: RLJobStatus) -> builders.WarmStartSource | None:
        """Where the checkpoint of the job's warmStart.job is, read from that job now; None
        without one, or once the job has a checkpoint of its own (it resumes from that, and the
        other job may be gone by then). WarmStartUnavailable when that job has none to give: the
        caller creates nothing and the next poll tries again (the admission webhook refused such
        a job at the door, so that job went away or lost its checkpoint since)."""
        warm_start = job.spec.trainer.warm_start
        if warm_start is None or warm_start.job is None or status.progress.last_checkpoint:
            return None
        namespace = job.metadata.namespace or "default"
        found = await self.kube.get(path(API_VERSION, PLURAL, namespace, warm_start.job))
        return builders.cluster_warm_start_source(job, found)
