"""What one reconcile observes of an RLJob besides its own object: whether KubeRay is installed,
the job's RayCluster and its pods (and the nodes they run on, for their cost and their taints:
nodes.py), names of children held by objects the job does not own, and, through the Ray head, the
current attempt's driver and its progress (and, until that driver is submitted to a cluster an
earlier attempt ran on, which earlier drivers there have not ended); while that driver runs, the
attempt's pods about to go (status.disruption).
This module fetches; `observe` reads what was fetched into the plain values of `status.Observed`.

Only the job's own children are observed (ownership.py): a RayCluster of the job's name that is
not the job's is only a taken name, never followed.

Every request to a Ray head (Jobs API, driver metrics) goes over ray_jobs.RayHeads' one session,
with the job's Ray auth token. Each token is derived from the settings' ray_auth_key and the job's
identity (builders.ray_auth_token), so no Secret is read back; only without a key (a local run)
are tokens read back from the job's Secret and cached. Whether KubeRay is installed is cached too,
re-read when missing; KubeRay found installed is looked for again whenever a job's RayCluster is
missing, so an uninstalled KubeRay is reported as such rather than as errors.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kuberl_contract.final_record import FinalRecord, read_final_record
from kuberl_operator import builders
from kuberl_operator.constants import (
    KUBERAY_CONFIRM_SECONDS,
    KUBERAY_RECHECK_SECONDS,
    RAY_API_VERSION,
    RAY_AUTH_TOKEN_SECRET_KEY,
    RAY_CLUSTER_LABEL,
)
from kuberl_operator.kube import Kube, path
from kuberl_operator.nodes import NodeCache
from kuberl_operator.observe import (
    head_pod,
    learner_load_from_metrics,
    observed_cluster,
    observed_head,
    pending_spot_workers,
    pods_on_nodes,
    progress_from_final_record,
    progress_from_metrics,
    scheduled_nodes,
    taken_name,
    unschedulable,
    waiting_from_metrics,
    workers,
)
from kuberl_operator.ownership import taken_names
from kuberl_operator.ray_jobs import RayHeads, RayJobsClient, RayJobsError
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob, RLJobStatus
from kuberl_operator.status import (
    TERMINAL,
    DriverState,
    LearnerLoad,
    Observed,
    ObservedDriver,
    ObservedProgress,
    PendingSpotWorkers,
    TakenName,
)
from kuberl_operator.status.disruption import pods_about_to_go

RAY_CLUSTERS = (RAY_API_VERSION, "rayclusters")
# The driver states after which it serves no metrics and its log ends with its final record.
ENDED = frozenset({DriverState.SUCCEEDED, DriverState.FAILED, DriverState.STOPPED})
# The end of an ended driver's log that holds its final record (its last line, before Ray's own
# few), and the most of it kept: lines may be long.
FINAL_RECORD_LINES = 50
MAX_FINAL_RECORD_BYTES = 1024 * 1024

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """One reconcile's observation: the plain values `compute_status` reads, and the objects the
    reconciler acts on."""

    observed: Observed
    ray_cluster: dict | None
    """The job's own RayCluster; None while it has none."""
    pods: list[dict]
    """That cluster's pods."""


class JobObserver:
    """Observes RLJobs with one Kubernetes client and one settings value; the one session to the
    Ray heads is `heads`."""

    def __init__(self, kube: Kube, settings: OperatorSettings):
        self.kube, self.settings = kube, settings
        self._kuberay: tuple[bool, float] = (False, -math.inf)  # (installed, when checked)
        self._tokens: dict[tuple[str, str], str] = {}
        self.heads = RayHeads()
        self.nodes = NodeCache(kube)
        self.prices = settings.price_table

    async def close(self) -> None:
        await self.heads.close()

    def forget(self, namespace: str, name: str) -> None:
        """The job's token is to be read back afresh: the job is gone, or its Secret was just
        ensured (it may have existed)."""
        self._tokens.pop((namespace, name), None)

    def kuberay_gone(self) -> None:
        """KubeRay's RayCluster CRD was found missing (a create answered 404)."""
        self._kuberay = (False, time.monotonic())

    async def observe(
        self,
        body: Mapping[str, Any],
        status: RLJobStatus,
        job: RLJob | None,
        problems: tuple[str, ...],
    ) -> Observation:
        """What the job's children say now; `job` is None when its spec is invalid (`problems`
        say why), and then only the status is observed."""
        meta = body["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        now = datetime.now(UTC)
        found: dict[str, Any] = {}
        ray_cluster, pods = None, []
        taken: list[TakenName] = []
        kuberay = await self.kuberay_available() if job else True
        if job is not None and kuberay:
            ray_cluster, taken = await self.own_cluster(namespace, name, uid)
            if ray_cluster is None and not taken:  # none yet, or KubeRay was uninstalled
                kuberay = await self.kuberay_available(trusted_for=KUBERAY_CONFIRM_SECONDS)
            if ray_cluster is not None:
                cluster_name = ray_cluster["metadata"]["name"]
                pods = await self.kube.list(
                    path("v1", "pods", namespace), {RAY_CLUSTER_LABEL: cluster_name}
                )
                nodes = await self.nodes.nodes(scheduled_nodes(pods))
                found = await self._observe_cluster(job, uid, status, ray_cluster, pods, now)
                found["pods_on_nodes"] = pods_on_nodes(pods, nodes, now)
                found["pod_names"] = frozenset(pod["metadata"]["name"] for pod in pods)
                driver = found.get("driver")  # the current attempt's, on a ready cluster
                if driver is not None and driver.state == DriverState.RUNNING:
                    # Drained only under a running driver: it is what reads Ray's drain state.
                    found["about_to_go"] = pods_about_to_go(pods, nodes, now)
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
            worker_selector=builders.worker_pods_selector(job) if job else None,
            prices=self.prices,
            **found,
        )
        return Observation(observed, ray_cluster, pods)

    async def own_cluster(
        self, namespace: str, name: str, uid: str
    ) -> tuple[dict | None, list[TakenName]]:
        """The job's RayCluster (None while it has none); one of its name that is not the job's
        is only a taken name: it is never followed nor acted on."""
        cluster_path = path(*RAY_CLUSTERS, namespace, builders.ray_cluster_name(name))
        found = await self.kube.get(cluster_path)
        if found is not None and (other := taken_name("RayCluster", found, name, uid)):
            return None, [other]
        return found, []

    async def kuberay_available(self, trusted_for: float = math.inf) -> bool:
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
        self,
        job: RLJob,
        uid: str,
        status: RLJobStatus,
        ray_cluster: dict,
        pods: list[dict],
        now: datetime,
    ) -> dict[str, Any]:
        """What the cluster says; the head, workers and driver only for the current attempt's
        cluster (a stale one is only in the way)."""
        head = head_pod(pods)
        cluster = observed_cluster(ray_cluster, head)
        pending, pending_for = pending_spot_workers(pods, now)
        found: dict[str, Any] = {
            "cluster": cluster,
            "pending_spot": PendingSpotWorkers(
                pending,
                pending_for,
                self.settings.fallback_pending_seconds,
                queued=job.queue_name is not None,
            ),
        }
        attempt = status.attempt or cluster.attempt
        if cluster.attempt != (status.cluster_attempt or attempt):
            return found  # stale: the job's attempts no longer run on it
        worker_pods = workers(ray_cluster, pods)
        found.update(
            head=observed_head(head),
            disrupted_workers=worker_pods.disrupted,
            workers_short=worker_pods.short,
            workers_live=worker_pods.live,
            stale_spec=builders.stale_spec(job, ray_cluster),
            unschedulable=unschedulable(pods),
        )
        client = await self.job_client(job, uid) if cluster.ready else None
        if client is not None:
            submission = builders.submission_id(job, attempt)
            driver = await self._driver(client, job, submission)
            if driver is not None and driver.state == DriverState.RUNNING:
                metrics = await self._metrics(job)
                found["progress"], found["driver_waiting_s"], found["learner_load"] = metrics
            elif driver is not None and driver.state in ENDED:
                record = await self._final_record(client, job, submission)
                found["progress"] = progress_from_final_record(record)
                if record is not None:  # its words, not the Jobs API's wrapping of its log
                    driver = replace(driver, message=record.message, outcome=record.outcome)
            found["driver"] = driver
            if driver is None and cluster.attempt < attempt:  # to be submitted after others
                earlier = range(cluster.attempt, attempt)
                found["earlier_drivers"] = await self._running_drivers(client, job, earlier)
        return found

    async def job_client(self, job: RLJob, uid: str) -> RayJobsClient | None:
        """The Jobs API of the job's own cluster (observed as such already)."""
        namespace = job.metadata.namespace or "default"
        if (token := await self.token(namespace, job.name, uid)) is None:
            return None
        return self.heads.jobs(_head_url(namespace, job.name, self.settings.dashboard_url), token)

    async def jobs_client(self, namespace: str, name: str, uid: str) -> RayJobsClient | None:
        """The Jobs API of the head of the job `namespace/name` with UID `uid`, with the job's
        token, for the log relay, which reads drivers' output through it. None while the token is
        not to be had (see `token`), and when the RayCluster of the job's name is another's: its
        head is not the job's, and gets neither the job's token nor its questions."""
        if (await self.own_cluster(namespace, name, uid))[1]:
            return None
        if (token := await self.token(namespace, name, uid)) is None:
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

    async def _running_drivers(
        self, client: RayJobsClient, job: RLJob, attempts: range
    ) -> tuple[int, ...]:
        """Those of `attempts` whose drivers have not ended on the cluster; all of them when the
        head cannot say, so that no attempt is submitted beside one that may still run."""
        try:
            found = await client.statuses()
        except RayJobsError as exc:
            logger.info("%s: %s", job.name, exc)
            return tuple(attempts)
        ids = {attempt: builders.submission_id(job, attempt) for attempt in attempts}
        return tuple(
            attempt
            for attempt, submission in ids.items()
            if submission in found and not found[submission].ended
        )

    async def _metrics(
        self, job: RLJob
    ) -> tuple[ObservedProgress | None, float, LearnerLoad | None]:
        """The running driver's progress, how long it has waited for its workers' nodes, and how
        its learner keeps up."""
        url = _head_url(job.metadata.namespace or "default", job.name, self.settings.metrics_url)
        try:
            text = await self.heads.driver_metrics(url)
            return (
                progress_from_metrics(text),
                waiting_from_metrics(text),
                learner_load_from_metrics(text),
            )
        except (RayJobsError, ValueError) as exc:
            logger.info("%s: no progress from %s: %s", job.name, url, exc)
            return None, 0.0, None

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

    async def token(self, namespace: str, name: str, uid: str) -> str | None:
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
