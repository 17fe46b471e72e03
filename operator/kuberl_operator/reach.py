"""What a job may reach, against the operator's settings: pure checks, no I/O.

An RLJob becomes pods, so whoever may create an RLJob may make pods with whatever the spec asks
for. The spec alone rules out what no job may have (control-plane placement, wildcard tolerations,
system mount paths, the operator's own labels: spec/); what a job may reach beyond that is the
cluster administrator's to say, in the operator's settings:
- the Secrets a job hands its driver (spec.storage.secretRef, spec.trainer.checkpoint.
  credentialsSecret): `allowed_secrets`, empty by default, and never one of the operator's own
  Secrets (every job's `<job>-ray-auth[-<digest>]` token, the chart's `<release>-ray-auth-key` and
  `<release>-log-relay`), so a job cannot read another job's Ray token, the key tokens derive
  from, or every job's driver output;
- the image its pods run (spec.image): `allowed_image_prefixes`, plus the operator's own trainer
  images' repositories;
- its pods' priority (spec.priorityClassName): `allowed_priority_classes`, empty by default;
- its pods' identity (spec.pods.serviceAccountName): `allowed_service_accounts`, empty by default.

The operator checks these once per version of a job, where it validates the spec, and a job
outside them fails with reason InvalidSpec like any invalid spec; `kuberl render` reports the
same problems. The operator checks names, never the Secrets themselves: it holds no `get` on
Secrets.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from kuberl_operator.constants import (
    LOG_RELAY_SECRET_SUFFIX,
    RAY_AUTH_KEY_SECRET_SUFFIX,
    RAY_AUTH_SECRET_SUFFIX,
)
from kuberl_operator.settings import OperatorSettings, env_name
from kuberl_operator.spec import RLJob
from kuberl_operator.validation import Problem

# Secrets the operator makes or reads itself: no job may hand them to its driver.
OPERATOR_SECRETS = (
    f"*{RAY_AUTH_SECRET_SUFFIX}",
    f"*{RAY_AUTH_SECRET_SUFFIX}-*",  # keyed by the operator (builders.auth_secret_name)
    f"*{RAY_AUTH_KEY_SECRET_SUFFIX}",
    f"*{LOG_RELAY_SECRET_SUFFIX}",
)
ANY_IMAGE = "*"
# Where an image reference may continue after a repository prefix: a path, a tag or a digest.
REFERENCE_BOUNDARIES = ("/", ":", "@")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether `name` is one of the names or fnmatch globs (case-sensitive, as Kubernetes names
    are)."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def image_allowed(image: str, prefixes: Iterable[str]) -> bool:
    """Whether the image reference starts with one of the prefixes at a boundary of the
    reference: `ghcr.io/kuberl/trainer` allows `ghcr.io/kuberl/trainer:1` but not
    `ghcr.io/kuberl/trainer-evil:1`; a prefix ending in '/' allows everything below it."""
    for prefix in prefixes:
        if prefix == ANY_IMAGE or image == prefix:
            return True
        if image.startswith(prefix) and (
            prefix.endswith(REFERENCE_BOUNDARIES) or image[len(prefix)] in REFERENCE_BOUNDARIES
        ):
            return True
    return False


def _setting(field: str) -> str:
    return f"the operator's {field} setting ({env_name(field)})"


def _ask_to_allow(settings: OperatorSettings, field: str) -> str:
    """The end of a refusal by an allow-list of names: who can change it, and what it holds."""
    patterns = getattr(settings, field)
    listed = ", ".join(patterns) if patterns else "empty"
    return f"ask the cluster's administrator to add it to {_setting(field)}, now {listed}"


def referenced_secrets(job: RLJob) -> list[tuple[str, str]]:
    """(field path, Secret name) of every Secret the job hands its pods."""
    found = []
    storage = job.spec.storage
    if storage and storage.secret_ref:
        found.append(("spec.storage.secretRef.name", storage.secret_ref.name))
    credentials = job.spec.trainer.checkpoint.credentials_secret
    if credentials:
        found.append(("spec.trainer.checkpoint.credentialsSecret", credentials))
    return found


def secret_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    problems = []
    for path, name in referenced_secrets(job):
        if matches(name, OPERATOR_SECRETS):
            problems.append(
                Problem(
                    path,
                    f"{name} is a Secret of the operator's own (names ending in "
                    f"{RAY_AUTH_SECRET_SUFFIX} or {RAY_AUTH_SECRET_SUFFIX}-<digest> hold a job's "
                    "Ray auth token, names ending in "
                    f"{RAY_AUTH_KEY_SECRET_SUFFIX} the key they derive from, names ending in "
                    f"{LOG_RELAY_SECRET_SUFFIX} the token of the operator's log relay), which no "
                    "job may reference; put the credentials in a Secret of their own",
                )
            )
        elif not matches(name, settings.allowed_secrets):
            problems.append(
                Problem(
                    path,
                    f"the Secret {name} is not one jobs may reference; "
                    + _ask_to_allow(settings, "allowed_secrets"),
                )
            )
    return problems


def image_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    image = job.spec.image
    if image is None or image_allowed(image, settings.image_prefixes):
        return []
    return [
        Problem(
            "spec.image",
            f"{image} does not start with an allowed prefix ({', '.join(settings.image_prefixes)}"
            f"); use one of those, leave spec.image empty for the operator's trainer image, or ask "
            f"the cluster's administrator to add a prefix to "
            f"{_setting('allowed_image_prefixes')}",
        )
    ]


def priority_class_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    name = job.spec.priority_class_name
    if name is None or matches(name, settings.allowed_priority_classes):
        return []
    return [
        Problem(
            "spec.priorityClassName",
            f"the PriorityClass {name} is not one jobs may use; remove it, or "
            + _ask_to_allow(settings, "allowed_priority_classes"),
        )
    ]


def service_account_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    name = job.spec.pods.service_account_name
    if name is None or matches(name, settings.allowed_service_accounts):
        return []
    return [
        Problem(
            "spec.pods.serviceAccountName",
            f"the ServiceAccount {name} is not one jobs may run as; remove it (the pods then run "
            "as the namespace's default, with no API token), or "
            + _ask_to_allow(settings, "allowed_service_accounts"),
        )
    ]


def reach_problems(job: RLJob, settings: OperatorSettings) -> list[Problem]:
    """Everything the job asks for that the operator's settings do not allow, each naming its
    field and the setting to change; [] for a job within them."""
    return [
        *image_problems(job, settings),
        *secret_problems(job, settings),
        *priority_class_problems(job, settings),
        *service_account_problems(job, settings),
    ]
