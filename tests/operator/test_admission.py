"""The validating admission webhook (admission.py): the checks as a pure function, then kopf's real
webhook server over TLS on loopback, with a self-signed certificate, answering AdmissionReviews as
the API server sends them."""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import uuid
from pathlib import Path

import kmock
import kopf
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubeapi import RAYCLUSTER_CRD
from test_foreign_children import CHILDREN, foreign

from kuberl_operator import admission
from kuberl_operator.bounded import MAX_MANIFEST_BYTES
from kuberl_operator.settings import OperatorSettings
from testkit import free_port, rljob, wait_until

SETTINGS = OperatorSettings()
TYPO = "spec.trainer.hyperparameters.learning_rat: unknown field; did you mean 'learning_rate'?"


def misspelt(name: str = "typo") -> dict:
    job = rljob(name)
    job["spec"]["trainer"]["hyperparameters"]["learning_rat"] = 0.001
    return job


# --- What is refused ---------------------------------------------------------------------------


def test_a_misspelt_hyperparameter_is_refused_with_the_field_and_a_suggestion():
    assert admission.review(misspelt(), None, "CREATE", SETTINGS) == [TYPO]


def test_a_valid_job_is_allowed():
    assert admission.review(rljob("fine"), None, "CREATE", SETTINGS) == []


def test_every_problem_is_said_each_naming_its_field():
    job = misspelt()
    job["spec"]["learner"] = {"gpus": -1}

    problems = admission.review(job, None, "CREATE", SETTINGS)

    assert TYPO in problems
    assert "spec.learner.gpus: must be >= 0, got -1" in problems


def test_what_the_operator_settings_forbid_is_refused_too():
    job = rljob("secretive", storage={"secretRef": {"name": "s3-credentials"}})

    [problem] = admission.review(job, None, "CREATE", SETTINGS)

    assert problem.startswith(
        "spec.storage.secretRef.name: the Secret s3-credentials is not one jobs may reference"
    )
    allowing = OperatorSettings(allowed_secrets="s3-*")
    assert admission.review(job, None, "CREATE", allowing) == []


@pytest.mark.parametrize(
    "spec, field",
    [
        ("PPO on CartPole", "spec: must be a mapping"),
        ({"trainer": []}, "spec.trainer: must be a mapping"),
        (None, "spec: "),
    ],
)
def test_a_malformed_spec_is_refused_naming_it(spec, field):
    job = rljob("malformed")
    job["spec"] = spec

    problems = admission.review(job, None, "CREATE", SETTINGS)

    assert problems and problems[0].startswith(field), problems


def test_an_update_that_keeps_the_spec_is_allowed_even_for_an_invalid_job():
    """kopf's finalizer, a label, a deletion: a job accepted before the webhook (or by a more
    lenient version) must stay deletable."""
    old = misspelt()
    new = misspelt() | {"metadata": {"name": "typo", "finalizers": ["kuberl.io/finalizer"]}}

    assert admission.review(new, old, "UPDATE", SETTINGS) == []
    edited = misspelt()
    edited["spec"]["suspend"] = True
    assert admission.review(edited, old, "UPDATE", SETTINGS) == [TYPO]


# --- Through kopf's webhook server over TLS ----------------------------------------------------


def self_signed(directory: Path) -> Path:
    """A certificate for 127.0.0.1 and its key, as tls.crt and tls.key in `directory` (the files
    of a kubernetes.io/tls Secret); the certificate is its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / admission.CERT_FILE).write_bytes(
        certificate.public_bytes(serialization.Encoding.PEM)
    )
    (directory / admission.KEY_FILE).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return directory / admission.CERT_FILE


def admission_review(obj: object, operation: str = "CREATE", old: object = None) -> dict:
    """An AdmissionReview as the API server sends it for an RLJob."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "kuberl.io", "version": "v1alpha1", "kind": "RLJob"},
            "resource": {"group": "kuberl.io", "version": "v1alpha1", "resource": "rljobs"},
            "requestKind": {"group": "kuberl.io", "version": "v1alpha1", "kind": "RLJob"},
            "requestResource": {"group": "kuberl.io", "version": "v1alpha1", "resource": "rljobs"},
            "name": "typo",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


@pytest.fixture
def webhook(kube_api, tmp_path, monkeypatch):
    """The operator's webhook served by kopf on loopback: a function that POSTs a review to it
    over HTTPS (verifying its certificate) and returns the HTTP response. It reads the emulated
    Kubernetes API (with KubeRay's CRD) through the kubeconfig, as the operator does."""
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    ca = self_signed(tmp_path / "certs")
    settings = OperatorSettings(webhook_port=free_port(), webhook_cert_dir=str(tmp_path / "certs"))
    registry = kopf.OperatorRegistry()
    admission.register(registry, settings, address="127.0.0.1")
    kube_api.register_crd()
    url = f"https://127.0.0.1:{settings.webhook_port}/"

    def post(review: object, webhook_id: str = admission.WEBHOOK_ID) -> requests.Response:
        data = review if isinstance(review, str) else json.dumps(review)
        headers = {"Content-Type": "application/json"}
        return requests.post(
            url + webhook_id, data=data, headers=headers, verify=str(ca), timeout=10
        )

    def serving() -> bool:
        try:
            return post(admission_review(rljob("probe"))).status_code == 200
        except requests.ConnectionError:
            return False

    with kube_api.kopf(registry):
        wait_until(serving, 60, "the webhook server")
        yield post


def test_the_webhook_refuses_a_typo_over_tls_with_the_field_and_a_suggestion(webhook):
    review = admission_review(misspelt())

    answer = webhook(review)

    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is False
    assert response["status"] == {"message": TYPO, "code": 422}


def test_the_webhook_allows_a_valid_job_and_a_metadata_only_update(webhook):
    assert webhook(admission_review(rljob("fine"))).json()["response"]["allowed"] is True
    finalized = misspelt() | {"metadata": {"name": "typo", "finalizers": ["kuberl.io/finalizer"]}}
    update = admission_review(finalized, "UPDATE", old=misspelt())
    assert webhook(update).json()["response"]["allowed"] is True


def test_the_webhook_refuses_a_malformed_object_and_keeps_serving(webhook):
    not_a_job = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    refused = webhook(admission_review(not_a_job)).json()["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith("kind: this is a ConfigMap, not an RLJob")

    no_spec = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "metadata": {"name": "x"}}
    refused = webhook(admission_review(no_spec)).json()["response"]
    assert refused["allowed"] is False and refused["status"]["message"].startswith("spec:")

    # A body that is no AdmissionReview at all is a bad request, not a verdict, and no crash.
    assert webhook("{not json").status_code == 400
    assert webhook(admission_review(rljob("fine"))).json()["response"]["allowed"] is True


# --- Large jobs: an UPDATE carries the object twice ----------------------------------------------


def job_of_size(name: str, size: int) -> dict:
    """A valid job whose JSON is `size` bytes, most of them in its envConfig."""
    job = rljob(name)
    job["spec"]["trainer"]["envConfig"] = {"padding": ""}
    job["spec"]["trainer"]["envConfig"]["padding"] = "x" * (size - len(json.dumps(job)))
    assert len(json.dumps(job)) == size
    return job


@pytest.mark.parametrize(
    "size",
    [MAX_MANIFEST_BYTES, admission.KUBE_API_MAX_REQUEST_BYTES],
    ids=["the-manifest-bound", "the-api-servers-request-limit"],
)
def test_a_metadata_only_update_of_a_large_job_is_answered_and_allowed(webhook, size):
    """kopf's finalizer is such an update: refusing it would leave the job never run and never
    editable."""
    old = job_of_size("large", size)
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["kuberl.io/finalizer"]

    answer = webhook(admission_review(new, "UPDATE", old=old))

    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True


def test_a_job_at_the_manifest_bound_is_allowed_on_create(webhook):
    answer = webhook(admission_review(job_of_size("large", MAX_MANIFEST_BYTES)))

    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True


def test_a_review_beyond_the_body_limit_is_refused_413(webhook):
    padding = admission.MAX_REVIEW_BYTES + 1 - len(json.dumps(admission_review(rljob("x"))))
    review = admission_review(rljob("x") | {"padding": "x" * padding})
    assert len(json.dumps(review)) > admission.MAX_REVIEW_BYTES

    assert webhook(review).status_code == 413
    assert webhook(admission_review(rljob("fine"))).json()["response"]["allowed"] is True


# --- Scaling -------------------------------------------------------------------------------------

ELASTIC = {"replicas": 4, "minReplicas": 1, "maxReplicas": 8}
BEYOND = (
    "spec.rolloutWorkers.maxReplicas: 8 is less than replicas (9); scale within [minReplicas, "
    "maxReplicas], or raise maxReplicas"
)


def test_a_scale_within_the_bounds_is_allowed_and_one_beyond_them_refused():
    job = rljob("walker", rolloutWorkers=ELASTIC)
    assert admission.scale_review(job, 6, SETTINGS) == []
    assert admission.scale_review(job, 9, SETTINGS) == [BEYOND]
    assert admission.scale_review(job, 4, SETTINGS) == []  # unchanged
    fixed = rljob("fixed", rolloutWorkers={"replicas": 4})  # its bounds move with it
    assert admission.scale_review(fixed, 9, SETTINGS) == []


def scale_review(name: str, replicas: int) -> dict:
    """An AdmissionReview of a write of the RLJob's scale subresource (`kubectl scale`)."""
    scale = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas},
    }
    review = admission_review(scale, "UPDATE", old=scale | {"spec": {"replicas": 4}})
    autoscaling = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    review["request"] |= {"name": name, "subResource": "scale", "kind": autoscaling}
    review["request"]["requestKind"] = autoscaling
    return review


def test_the_webhook_refuses_kubectl_scale_beyond_max_replicas(webhook, kube_api):
    kube_api.create(kube_api.rljobs(), rljob("walker", rolloutWorkers=ELASTIC))
    scale = admission.SCALE_WEBHOOK_ID

    refused = webhook(scale_review("walker", 9), scale).json()["response"]
    allowed = webhook(scale_review("walker", 6), scale).json()["response"]

    assert refused["allowed"] is False and refused["status"] == {"message": BEYOND, "code": 422}
    assert allowed["allowed"] is True
    # a job it cannot read is left to the reconciler, which checks every job anyway
    assert webhook(scale_review("unknown", 9), scale).json()["response"]["allowed"] is True


# --- Names another object already has -----------------------------------------------------------


@pytest.mark.parametrize("kind", [kind for kind in CHILDREN if kind != "Secret"])
def test_a_job_named_after_another_teams_object_is_refused_naming_it(webhook, kube_api, kind):
    kube_api.create(*foreign(kind, CHILDREN[kind]))

    refused = webhook(admission_review(rljob("prod", namespace="default"))).json()["response"]

    assert refused["allowed"] is False
    assert refused["status"] == {
        "message": f"metadata.name: {kind} {CHILDREN[kind]} exists and is not this job's: "
        "rename the job",
        "code": 409,
    }
    assert webhook(admission_review(rljob("other", namespace="default"))).json()["response"][
        "allowed"
    ]


def test_children_an_earlier_job_of_the_name_left_do_not_refuse_it(webhook, kube_api):
    """Deleted and created again: the garbage collector removes the old job's children soon."""
    collection, leftover = foreign("ConfigMap", "prod-job")
    owner = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "name": "prod"}
    leftover["metadata"]["ownerReferences"] = [owner | {"uid": "old-uid", "controller": True}]
    kube_api.create(collection, leftover)

    review = admission_review(rljob("prod", namespace="default"))

    assert webhook(review).json()["response"]["allowed"] is True


def test_a_webhook_that_cannot_read_the_names_does_not_block_creation(webhook, kube_api):
    """The reconciler checks every name anyway: Kubernetes down (or no right to read) must not
    stop jobs at the door."""
    kube_api.create(*foreign("RayCluster", "prod"))

    async def forbid_reading_clusters() -> None:
        clusters = kmock.resource("ray.io", "v1", "rayclusters")
        kube_api.api[kmock.action.FETCH, clusters] << 403

    kube_api.call(forbid_reading_clusters)

    answer = webhook(admission_review(rljob("prod", namespace="default")))

    assert answer.json()["response"]["allowed"] is True


# --- Warm starts ---------------------------------------------------------------------------------


def test_a_warm_start_from_a_relative_path_is_refused_with_the_ways_out():
    job = rljob(
        "student", trainer={**rljob("t")["spec"]["trainer"], "warmStart": {"checkpoint": "runs/t"}}
    )

    [problem] = admission.review(job, None, "CREATE", SETTINGS)

    assert problem.startswith("spec.trainer.warmStart.checkpoint: 'runs/t' is a relative path")
    assert "absolute path the server can read" in problem and "warmStart.job" in problem


def warm_student(name: str = "student") -> dict:
    trainer = {**rljob("t")["spec"]["trainer"], "warmStart": {"job": "teacher"}}
    return rljob(name, namespace="default", trainer=trainer)


def test_the_webhook_refuses_a_warm_start_from_a_job_that_is_not_there_or_has_no_checkpoint(
    webhook, kube_api
):
    missing = webhook(admission_review(warm_student())).json()["response"]
    assert missing["allowed"] is False
    assert missing["status"] == {
        "message": "spec.trainer.warmStart.job: there is no job 'teacher' in this namespace: "
        "name an existing job, or set warmStart.checkpoint",
        "code": 422,
    }

    teacher = rljob("teacher", namespace="default", storage={"size": "1Gi"})
    kube_api.create(kube_api.rljobs(), teacher)
    fresh = webhook(admission_review(warm_student())).json()["response"]
    assert fresh["allowed"] is False
    assert "job 'teacher' has saved no checkpoint yet" in fresh["status"]["message"]


def test_the_webhook_allows_a_warm_start_from_a_job_with_a_checkpoint_on_its_claim(
    webhook, kube_api
):
    teacher = rljob("teacher", namespace="default", storage={"size": "1Gi"})
    kube_api.create(kube_api.rljobs(), teacher)
    checkpoint = {"progress": {"lastCheckpoint": "/kuberl/checkpoints/teacher/c/000010"}}
    kube_api.patch(kube_api.rljobs(name="teacher") + "/status", {"status": checkpoint})

    assert webhook(admission_review(warm_student())).json()["response"]["allowed"] is True
