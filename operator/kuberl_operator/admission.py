"""The validating admission webhook: an RLJob is checked when it is created and when its spec is
edited, so `kubectl apply` refuses `learning_rat: 0.001` with the field and a suggestion
(`spec.trainer.hyperparameters.learning_rat: unknown field; did you mean 'learning_rate'?`)
instead of accepting a job that then fails with InvalidSpec.

It runs the checks the operator runs on every job, and only those: the spec (validation.py, what
`kuberl validate --no-env` checks), what the job may reach under the operator's settings
(reach.py) and that a warm start names no relative path (builders/warm_start.py). It never makes
the env, imports a module the manifest names or runs anything of the job's: it reads the manifest
as data, like the reconciler. The reconciler still checks every job
(a cluster may run without the webhook, or with failurePolicy Ignore).

An update that leaves the spec as it was (kopf's finalizer and annotations, labels, a deletion) is
always allowed: a job accepted by an older, more lenient operator must stay deletable.

A create is also refused when its warmStart.job names a job that cannot start it (none of that
name, no checkpoint yet, or its checkpoints died with its pods), read like the names below.

A create is also refused when a name one of the job's children needs is held by an object of
someone else's (`metadata.name: RayCluster serve-prod exists and is not this job's: rename the
job`; ownership.py), read with the operator's own rights. When it cannot read them (Kubernetes
unreachable, a right missing) it lets the job in: the reconciler reads them again before it
creates anything and fails such a job (NameConflict), so the check at the door only says it
sooner. Children an earlier RLJob of the same name left behind do not refuse it: the garbage
collector removes them, and the reconciler waits for that.

Body size. An UPDATE's review carries the object twice (and kopf's own finalizer patch is one), so
the server reads bodies up to MAX_REVIEW_BYTES, two objects as large as the API server accepts
and the review around them, where aiohttp's default of 1 MiB would answer 413 to the update of
any job over about 512 KiB: such a job would be admitted, then never run nor be editable.

kopf serves it (`kopf.WebhookServer`) over HTTPS with the certificate in `webhook_cert_dir`
(tls.crt and tls.key: cert-manager's Certificate or the chart's own Secret), re-read when the
files change. The chart installs the ValidatingWebhookConfiguration; kopf does not manage one
(`settings.admission.managed` stays unset), so the operator needs no RBAC on webhook
configurations.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kopf

from kuberl_operator import builders
from kuberl_operator.constants import API_VERSION, GROUP, PLURAL, VERSION
from kuberl_operator.kube import Kube, KubeConfigError, KubeError, load_kube_config, path
from kuberl_operator.ownership import taken_names
from kuberl_operator.reconciler import read_job, served_job_problems
from kuberl_operator.settings import OperatorSettings

if TYPE_CHECKING:
    from aiohttp import web

# The handlers' ids, which kopf's server takes from the request path: the chart's
# ValidatingWebhookConfiguration calls https://<service>:<port>/validate-rljob, and
# /validate-rljob-scale for the scale subresource (`kubectl scale`, an HPA, KEDA).
WEBHOOK_ID = "validate-rljob"
SCALE_WEBHOOK_ID = "validate-rljob-scale"
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
# An invalid object, as the API server answers for one (HTTP 422 Unprocessable Entity); a name
# already taken, as it answers a create of an existing one (409 Conflict).
INVALID, CONFLICT = 422, 409
# The largest request body kube-apiserver accepts (its MaxRequestBodyBytes), so the largest object
# an AdmissionReview can carry.
KUBE_API_MAX_REQUEST_BYTES = 3 * 1024 * 1024
# An UPDATE's review: the object and the old object, and the review's own fields around them.
MAX_REVIEW_BYTES = 2 * KUBE_API_MAX_REQUEST_BYTES + 1024 * 1024
# The webhook answers the API server within its timeoutSeconds (10 s in the chart): names that
# cannot be read by then are left to the reconciler.
READ_TIMEOUT_S = 3.0

logger = logging.getLogger(__name__)


def review(
    body: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    operation: str | None,
    settings: OperatorSettings,
) -> list[str]:
    """Why the RLJob `body` may not be created or updated (each line a field path and what to
    do), or nothing. An update that leaves the spec as it was is never refused."""
    if operation == "UPDATE" and old is not None and old.get("spec") == body.get("spec"):
        return []
    job, problems = read_job(body)
    if job is None:
        return list(problems)
    return [str(problem) for problem in served_job_problems(job, settings)]


def scale_review(job: Mapping[str, Any], replicas: Any, settings: OperatorSettings) -> list[str]:
    """Why the RLJob `job` may not be scaled to `replicas` rollout workers (a write of its scale
    subresource, which the API server checks against no bound of ours), or nothing: the job with
    spec.rolloutWorkers.replicas set so must be valid, as an edit of it would have to be, so a
    scale outside [minReplicas, maxReplicas] is refused at the door rather than failing the job.
    A scale that changes nothing is never refused."""
    spec = job.get("spec")
    workers = spec.get("rolloutWorkers") if isinstance(spec, Mapping) else None
    workers = workers if isinstance(workers, Mapping) else {}
    scaled = {**job, "spec": {**(spec or {}), "rolloutWorkers": {**workers, "replicas": replicas}}}
    return review(scaled, job, "UPDATE", settings)


async def taken_name_problems(
    kube: Kube | None, body: Mapping[str, Any], settings: OperatorSettings
) -> list[str]:
    """For a valid RLJob `body` being created: the names its children need that someone else's
    objects hold, each on `metadata.name`; nothing when they cannot be read (`kube` None, or
    Kubernetes refusing or not answering), since the reconciler checks them again."""
    job, _ = read_job(body)
    if kube is None or job is None:
        return []
    namespace = job.metadata.namespace or "default"
    uid = body.get("metadata", {}).get("uid", "")
    refs = builders.child_refs(job, settings)
    try:
        taken = await taken_names(kube, namespace, job.name, uid, refs)
    except KubeError as exc:
        logger.warning("%s/%s: its children's names went unread: %s", namespace, job.name, exc)
        return []
    return [f"metadata.name: {name.describe()}" for name in taken if not name.leftover]


async def warm_start_problems(kube: Kube | None, body: Mapping[str, Any]) -> list[str]:
    """For a valid RLJob `body` being created: why the job its spec.trainer.warmStart.job names
    cannot start it (no such job in the namespace, no checkpoint yet, none that outlives its pods),
    read with the operator's rights; nothing when it cannot be read, since the reconciler reads
    it again before the job's first run."""
    job, _ = read_job(body)
    warm_start = job.spec.trainer.warm_start if job is not None else None
    if kube is None or job is None or warm_start is None or warm_start.job is None:
        return []
    namespace = job.metadata.namespace or "default"
    try:
        found = await kube.get(path(API_VERSION, PLURAL, namespace, warm_start.job))
    except KubeError as exc:
        logger.warning("%s/%s: its warm start's job went unread: %s", namespace, job.name, exc)
        return []
    try:
        builders.cluster_warm_start_source(job, found)
    except builders.WarmStartUnavailable as exc:
        return [str(exc)]
    return []


async def refuse_at_creation(
    kube: Kube | None, body: Mapping[str, Any], settings: OperatorSettings
) -> None:
    """kopf.AdmissionError when the valid RLJob `body` may not be created as things are: its
    children's names held by others (409), or its warmStart.job unable to start it (422)."""
    if taken := await taken_name_problems(kube, body, settings):
        raise kopf.AdmissionError("\n".join(taken), code=CONFLICT)
    if unavailable := await warm_start_problems(kube, body):
        raise kopf.AdmissionError("\n".join(unavailable), code=INVALID)


async def scaled_job(kube: Kube | None, scale: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The RLJob whose Scale `scale` is being written (the Scale carries no bounds), read with the
    operator's rights; None when it cannot be read."""
    meta = scale.get("metadata", {})
    if kube is None:
        return None
    try:
        return await kube.get(path(API_VERSION, PLURAL, meta.get("namespace"), meta.get("name")))
    except KubeError as exc:
        logger.warning("%s: its bounds went unread: %s", meta.get("name"), exc)
        return None


class WebhookServer(kopf.WebhookServer):
    """kopf's HTTPS server, reading bodies up to MAX_REVIEW_BYTES. kopf builds its aiohttp
    application with the default limit and no way to set it; each request is handed on as a copy
    that may be read that far, before anything was read."""

    async def _serve(self, fn: Any, request: web.Request) -> web.Response:
        return await super()._serve(fn, request.clone(client_max_size=MAX_REVIEW_BYTES))


def webhook_server(settings: OperatorSettings, address: str) -> kopf.WebhookServer:
    """kopf's HTTPS server on `address` and the settings' webhook_port, with the certificate
    in their webhook_cert_dir."""
    cert_dir = Path(settings.webhook_cert_dir)
    return WebhookServer(
        addr=address,
        port=settings.webhook_port,
        certfile=str(cert_dir / CERT_FILE),
        pkeyfile=str(cert_dir / KEY_FILE),
    )


def register(
    registry: kopf.OperatorRegistry, settings: OperatorSettings, address: str = "0.0.0.0"
) -> None:
    """Adds the webhook to `registry`: its server, started with the operator, its Kubernetes
    client (the operator's credentials), and its handler. kopf refuses to start with admission
    handlers and no server, so both come together, and only where the settings turn the webhook
    on (webhook_port)."""
    operator_settings = settings  # kopf passes its own `settings` to the startup handler

    @kopf.on.startup(registry=registry)
    def serve_webhook(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.admission.server = webhook_server(operator_settings, address)
        try:
            memo.admission_kube = Kube(load_kube_config(), timeout_s=READ_TIMEOUT_S)
        except KubeConfigError as exc:
            logger.warning("the webhook reads no names of children: %s", exc)

    @kopf.on.cleanup(registry=registry)
    async def close_webhook_client(memo: kopf.Memo, **_: Any) -> None:
        if "admission_kube" in memo:
            await memo.admission_kube.close()

    @kopf.on.validate(
        GROUP,
        VERSION,
        PLURAL,
        id=WEBHOOK_ID,
        operations=["CREATE", "UPDATE"],
        side_effects=False,
        registry=registry,
    )
    async def validate_rljob(
        body: kopf.Body, old: kopf.Body | None, operation: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        if problems := review(body, old, operation, operator_settings):
            raise kopf.AdmissionError("\n".join(problems), code=INVALID)
        if operation == "CREATE":
            await refuse_at_creation(memo.get("admission_kube"), body, operator_settings)

    @kopf.on.validate(
        GROUP,
        VERSION,
        PLURAL,
        id=SCALE_WEBHOOK_ID,
        subresource="scale",
        operations=["UPDATE"],
        side_effects=False,
        registry=registry,
    )
    async def validate_rljob_scale(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        job = await scaled_job(memo.get("admission_kube"), body)
        if job is None:  # unread: the reconciler checks the scaled job anyway
            return
        replicas = (body.get("spec") or {}).get("replicas")
        if problems := scale_review(job, replicas, operator_settings):
            raise kopf.AdmissionError("\n".join(problems), code=INVALID)
