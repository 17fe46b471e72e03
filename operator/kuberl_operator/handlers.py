"""The kopf handlers: thin. Each RLJob gets a daemon that reconciles it (reconciler.py) in a loop,
at once when it appears or its spec is edited, then as often as its state asks (a few seconds while
it is active, the backoff while it waits to restart, not at all once it is finished).

Why a daemon per job rather than create/update handlers: most of what a job reacts to is not an
edit of the job (the head becoming ready, the driver finishing, a worker preempted, a backoff
running out), and kopf's change handlers would record their progress in the job itself. The
daemon holds no state that matters (the status does): kopf restarts it with the operator.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf

from kuberl_operator import log_relay
from kuberl_operator.constants import GROUP, PLURAL, VERSION
from kuberl_operator.kube import Kube, KubeConfigError, KubeError, load_kube_config
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.ray_jobs import RayJobsError
from kuberl_operator.reconciler import Reconciler
from kuberl_operator.settings import OperatorSettings

registry = kopf.OperatorRegistry()
FINALIZER = f"{GROUP}/finalizer"
# After a failed reconcile (the API or a Ray head unreachable), the next try comes after this.
RETRY_SECONDS = 5.0

logger = logging.getLogger(__name__)


def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod, its service account; elsewhere, the kubeconfig (as kubectl reads it)."""
    return kopf.login_with_service_account(settings=settings, **kwargs) or (
        kopf.login_with_kubeconfig(settings=settings, **kwargs)
    )


@kopf.on.login(registry=registry)
def on_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return login(**kwargs)


@kopf.on.startup(registry=registry)
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # What kopf records goes into annotations under kuberl.io/: the status is the operator's.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # kopf's own log lines become Events only as warnings
    operator_settings = memo.get("settings") or OperatorSettings.from_env(os.environ)
    try:  # the reconciler's client reads the same places as `login`, and re-reads rotated tokens
        kube = Kube(load_kube_config())
    except KubeConfigError as exc:
        raise kopf.PermanentError(str(exc)) from None
    metrics = OperatorMetrics()
    if operator_settings.metrics_port:
        memo.stop_metrics = metrics.serve(operator_settings.metrics_port)
    memo.reconciler = Reconciler(kube, operator_settings, metrics)
    if operator_settings.log_relay_port:  # the API reads drivers' output through it
        token = operator_settings.log_relay_token
        try:
            memo.log_relay = await log_relay.serve(
                operator_settings.log_relay_port,
                token.get_secret_value() if token else None,
                memo.reconciler.observer.jobs_client,
            )
        except ValueError as exc:
            raise kopf.PermanentError(str(exc)) from None


@kopf.on.cleanup(registry=registry)
async def stop(memo: kopf.Memo, **_: Any) -> None:
    if "reconciler" in memo:
        await memo.reconciler.close()
    if "stop_metrics" in memo:
        memo.stop_metrics()
    if "log_relay" in memo:
        await memo.log_relay.cleanup()


@kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=10)
async def reconcile(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any):
    """Reconcile the job until it needs nothing more (kopf passes the live body)."""
    memo.wake = asyncio.Event()
    while not stopped:
        memo.wake.clear()
        try:
            delay = await memo.reconciler.reconcile(body)
        except (KubeError, RayJobsError) as exc:
            logger.warning("%s/%s: %s", body.metadata.namespace, body.metadata.name, exc)
            delay = RETRY_SECONDS
        if delay is None:
            return
        await _sleep_until_woken(memo.wake, stopped, delay)


async def _sleep_until_woken(wake: asyncio.Event, stopped: kopf.DaemonStopped, seconds: float):
    waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


@kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
async def wake(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """An edit of the spec (a new generation) is reconciled at once, not at the next poll; the
    operator's own status writes do not wake the daemon. (Async: kopf runs sync handlers in a
    thread pool, which every event would then go through.)"""
    if type == "DELETED":
        memo.reconciler.forget(body.metadata.namespace, body.metadata.name)
        return
    status = body.get("status") or {}
    if "wake" in memo and body.metadata.get("generation") != status.get("observedGeneration"):
        memo.wake.set()
