"""The validating admission webhook: an RLJob is checked when it is created and when its spec is
edited, so `kubectl apply` refuses `learning_rat: 0.001` with the field and a suggestion
(`spec.trainer.hyperparameters.learning_rat: unknown field; did you mean 'learning_rate'?`)
instead of accepting a job that then fails with InvalidSpec.

It runs the checks the operator runs on every job, and only those: the spec (validation.py, what
`kuberl validate --no-env` checks) and what the job may reach under the operator's settings
(policy.py). It never makes the env, imports a module the manifest names or runs anything of the
job's: it reads the manifest as data, like the reconciler. The reconciler still checks every job
(a cluster may run without the webhook, or with failurePolicy Ignore).

An update that leaves the spec as it was (kopf's finalizer and annotations, labels, a deletion) is
always allowed: a job accepted by an older, more lenient operator must stay deletable.

kopf serves it (`kopf.WebhookServer`) over HTTPS with the certificate in `webhook_cert_dir`
(tls.crt and tls.key: cert-manager's Certificate or the chart's own Secret), re-read when the
files change. The chart installs the ValidatingWebhookConfiguration; kopf does not manage one
(`settings.admission.managed` stays unset), so the operator needs no RBAC on webhook
configurations.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

from kuberl_operator.constants import GROUP, PLURAL, VERSION
from kuberl_operator.policy import reach_problems
from kuberl_operator.reconciler import read_job
from kuberl_operator.settings import OperatorSettings

# The handler's id, which kopf's server takes from the request path: the chart's
# ValidatingWebhookConfiguration calls https://<service>:<port>/validate-rljob.
WEBHOOK_ID = "validate-rljob"
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
# An invalid object, as the API server answers for one (HTTP 422 Unprocessable Entity).
INVALID = 422


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
    return [str(problem) for problem in reach_problems(job, settings)]


def webhook_server(settings: OperatorSettings, address: str) -> kopf.WebhookServer:
    """kopf's HTTPS server on `address` and the settings' webhook_port, with the certificate
    in their webhook_cert_dir."""
    cert_dir = Path(settings.webhook_cert_dir)
    return kopf.WebhookServer(
        addr=address,
        port=settings.webhook_port,
        certfile=str(cert_dir / CERT_FILE),
        pkeyfile=str(cert_dir / KEY_FILE),
    )


def register(
    registry: kopf.OperatorRegistry, settings: OperatorSettings, address: str = "0.0.0.0"
) -> None:
    """Adds the webhook to `registry`: its server, started with the operator, and its handler.
    kopf refuses to start with admission handlers and no server, so both come together, and only
    where the settings turn the webhook on (webhook_port)."""
    operator_settings = settings  # kopf passes its own `settings` to the startup handler

    @kopf.on.startup(registry=registry)
    def serve_webhook(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = webhook_server(operator_settings, address)

    @kopf.on.validate(
        GROUP,
        VERSION,
        PLURAL,
        id=WEBHOOK_ID,
        operations=["CREATE", "UPDATE"],
        side_effects=False,
        registry=registry,
    )
    def validate_rljob(
        body: kopf.Body, old: kopf.Body | None, operation: str | None, **_: Any
    ) -> None:
        if problems := review(body, old, operation, operator_settings):
            raise kopf.AdmissionError("\n".join(problems), code=INVALID)
