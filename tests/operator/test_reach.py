"""What a job may reach against the operator's settings (reach.py): each refusal names the field
and the setting to change, and the operator fails such a job as it fails an invalid spec."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.reach import image_allowed, reach_problems
from kuberl_operator.reconciler import Reconciler
from kuberl_operator.settings import OperatorSettings, image_repository
from kuberl_operator.spec import ConditionType, Phase, Reason, RLJob, RLJobStatus
from kuberl_operator.status import Observed, compute_status
from kuberl_operator.validation import validate_rljob
from testkit import edited, rljob

MINIMAL: dict[str, Any] = rljob("walker", namespace="team-rl", minimal=True)
DEFAULTS = OperatorSettings()


def job_with(**changes: Any) -> RLJob:
    return validate_rljob(edited(MINIMAL, **changes))


def problems(job: RLJob, settings: OperatorSettings = DEFAULTS) -> list[str]:
    return [str(problem) for problem in reach_problems(job, settings)]


STORAGE_SECRET = {"spec.storage": {"secretRef": {"name": "s3-credentials"}}}
CHECKPOINT_SECRET = {"spec.trainer.checkpoint": {"credentialsSecret": "ckpt-minio"}}


def test_a_job_that_asks_for_nothing_is_within_any_settings():
    assert problems(job_with()) == []


# --- Secrets -------------------------------------------------------------------------------------


def test_by_default_no_job_may_reference_a_secret():
    [problem] = problems(job_with(**STORAGE_SECRET))

    assert problem.startswith("spec.storage.secretRef.name: the Secret s3-credentials is not one")
    assert "allowed_secrets setting (KUBERL_ALLOWED_SECRETS), now empty" in problem
    [problem] = problems(job_with(**CHECKPOINT_SECRET))
    assert problem.startswith("spec.trainer.checkpoint.credentialsSecret: the Secret ckpt-minio")


def test_secrets_the_settings_allow_by_name_or_glob_are_fine():
    settings = OperatorSettings(allowed_secrets=("s3-credentials", "ckpt-*"))

    assert problems(job_with(**STORAGE_SECRET, **CHECKPOINT_SECRET), settings) == []
    [problem] = problems(job_with(**{"spec.storage.secretRef.name": "prod-db"}), settings)
    assert "now s3-credentials, ckpt-*" in problem


@pytest.mark.parametrize("name", ["other-job-ray-auth", "kuberl-ray-auth-key", "kuberl-log-relay"])
def test_the_operators_own_secrets_are_never_allowed(name):
    everything = OperatorSettings(allowed_secrets=("*",))
    job = job_with(**{"spec.trainer.checkpoint": {"credentialsSecret": name}})

    [problem] = problems(job, everything)
    assert problem.startswith(
        f"spec.trainer.checkpoint.credentialsSecret: {name} is a Secret of the operator's own"
    )


# --- Images --------------------------------------------------------------------------------------


def test_the_operators_trainer_images_need_no_setting():
    assert problems(job_with(**{"spec.image": "ghcr.io/kuberl/trainer:0.2.0"})) == []
    assert problems(job_with(**{"spec.image": "ghcr.io/kuberl/trainer@sha256:" + "a" * 64})) == []


def test_an_image_outside_the_prefixes_is_refused_naming_the_setting():
    [problem] = problems(job_with(**{"spec.image": "docker.io/attacker/miner:latest"}))

    assert problem.startswith(
        "spec.image: docker.io/attacker/miner:latest does not start with an allowed prefix "
        "(ghcr.io/kuberl/trainer)"
    )
    assert "allowed_image_prefixes setting (KUBERL_ALLOWED_IMAGE_PREFIXES)" in problem


@pytest.mark.parametrize(
    ("image", "prefixes", "allowed"),
    [
        ("ghcr.io/kuberl/trainer:1", ["ghcr.io/kuberl/trainer"], True),
        ("ghcr.io/kuberl/trainer", ["ghcr.io/kuberl/trainer"], True),
        ("ghcr.io/kuberl/trainer-evil:1", ["ghcr.io/kuberl/trainer"], False),
        ("ghcr.io/kuberl/trainerx", ["ghcr.io/kuberl/trainer"], False),
        ("registry.example.com/rl/ppo:2", ["registry.example.com/rl/"], True),
        ("registry.example.com/rl/team/ppo:2", ["registry.example.com/rl"], True),
        ("registry.example.com/rlx/ppo:2", ["registry.example.com/rl"], False),
        ("anything:1", ["*"], True),
        ("anything:1", [], False),
    ],
)
def test_image_prefixes_match_at_a_boundary_of_the_reference(image, prefixes, allowed):
    assert image_allowed(image, prefixes) is allowed


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("ghcr.io/kuberl/trainer:0.1.0-cuda", "ghcr.io/kuberl/trainer"),
        ("registry:5000/rl/trainer", "registry:5000/rl/trainer"),
        ("registry:5000/rl/trainer:2@sha256:abc", "registry:5000/rl/trainer"),
    ],
)
def test_the_trainer_images_repository_drops_tag_and_digest(image, repository):
    assert image_repository(image) == repository


def test_allowed_prefixes_add_to_the_trainer_images():
    settings = OperatorSettings(
        trainer_gpu_image="registry.example.com/gpu/trainer:1",
        allowed_image_prefixes=("registry.example.com/rl/",),
    )

    assert settings.image_prefixes == (
        "ghcr.io/kuberl/trainer",
        "registry.example.com/gpu/trainer",
        "registry.example.com/rl/",
    )
    assert problems(job_with(**{"spec.image": "registry.example.com/rl/ppo:3"}), settings) == []


# --- Priority classes and service accounts -------------------------------------------------------


def test_by_default_no_job_may_set_a_priority_class():
    [problem] = problems(job_with(**{"spec.priorityClassName": "system-node-critical"}))

    assert problem.startswith(
        "spec.priorityClassName: the PriorityClass system-node-critical is not one jobs may use"
    )
    assert "allowed_priority_classes setting (KUBERL_ALLOWED_PRIORITY_CLASSES)" in problem
    settings = OperatorSettings(allowed_priority_classes=("training-*",))
    assert problems(job_with(**{"spec.priorityClassName": "training-high"}), settings) == []


def test_a_service_account_not_allowed_is_refused():
    job = job_with(**{"spec.pods": {"serviceAccountName": "cluster-admin-sa"}})

    [problem] = problems(job)
    assert problem.startswith(
        "spec.pods.serviceAccountName: the ServiceAccount cluster-admin-sa is not one jobs may "
        "run as"
    )
    assert "allowed_service_accounts setting (KUBERL_ALLOWED_SERVICE_ACCOUNTS)" in problem
    assert problems(job, OperatorSettings(allowed_service_accounts=("cluster-admin-sa",))) == []


def test_every_problem_is_reported_at_once():
    job = job_with(
        **STORAGE_SECRET,
        **{"spec.image": "evil.example.com/x:1", "spec.priorityClassName": "high"},
    )

    assert [problem.split(":")[0] for problem in problems(job)] == [
        "spec.image",
        "spec.storage.secretRef.name",
        "spec.priorityClassName",
    ]


def test_settings_read_the_allow_lists_as_comma_lists():
    settings = OperatorSettings.from_env(
        {
            "KUBERL_ALLOWED_SECRETS": "s3-credentials, ckpt-*",
            "KUBERL_ALLOWED_IMAGE_PREFIXES": "registry.example.com/rl/",
            "KUBERL_ALLOWED_PRIORITY_CLASSES": "",
        }
    )

    assert settings.allowed_secrets == ("s3-credentials", "ckpt-*")
    assert settings.allowed_image_prefixes == ("registry.example.com/rl/",)
    assert settings.allowed_priority_classes == ()


# --- Where the operator checks -------------------------------------------------------------------


def body(version: str, **changes: Any) -> dict[str, Any]:
    document = edited(MINIMAL, **changes)
    document["metadata"] |= {"uid": "u-1", "resourceVersion": version}
    return document


def test_the_reconciler_fails_a_job_beyond_its_settings_like_an_invalid_spec():
    reconciler = Reconciler(kube=None, settings=DEFAULTS, metrics=OperatorMetrics())  # type: ignore[arg-type]

    job, found = reconciler._read_job(body("7", **STORAGE_SECRET))
    assert job is None
    assert found[0].startswith("spec.storage.secretRef.name: the Secret s3-credentials")
    observed = Observed(
        status=RLJobStatus(), generation=1, now=datetime.now(UTC), spec_problems=found
    )
    update = compute_status(None, observed)
    assert update.phase == Phase.FAILED
    failed = next(c for c in update.status.conditions if c.type == ConditionType.FAILED)
    assert failed.reason == Reason.INVALID_SPEC and "KUBERL_ALLOWED_SECRETS" in failed.message
    # The job edited to leave the Secret out is read again, and is fine.
    job, found = reconciler._read_job(body("8"))
    assert job is not None and found == ()
