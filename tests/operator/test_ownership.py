"""Whose a child is, as pure functions and decisions: the children's names and where they live
(builders.child_refs), the Ray auth Secret's keyed name, whether an object under a child's name is
the job's (observe.taken_name), what the decider makes of names taken, and the Kubernetes client's
preconditions (against the emulated API). The operator running for real against objects of other
owners is in test_foreign_children.py, the webhook's refusal in test_admission.py."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import pytest
from kubeapi import RAYCLUSTER_CRD

from kuberl_operator.builders import (
    auth_secret_name,
    build_children,
    child_names,
    child_refs,
    job_uid,
)
from kuberl_operator.kube import Kube, KubeError, load_kube_config, path
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.observe import taken_name
from kuberl_operator.ownership import ensure_child
from kuberl_operator.reach import reach_problems
from kuberl_operator.reconciler import Reconciler, read_job
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import Phase, Reason, RLJobSpec, RLJobStatus
from kuberl_operator.status import (
    CreateCluster,
    Nothing,
    Observed,
    ObservedCluster,
    Requeue,
    TakenName,
    compute_status,
)
from testkit import rljob

KEY = "k" * 64
UID = "0b0e5d9c-5b0e-4f4e-9d0e-000000000001"
KEYED = OperatorSettings(ray_auth_key=KEY)
KEYLESS = OperatorSettings()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def created_job(name: str = "prod", uid: str = UID, namespace: str = "team-a"):
    """The RLJob as the reconciler reads it from Kubernetes (with its UID)."""
    body = rljob(name, namespace=namespace)
    body["metadata"]["uid"] = uid
    job, problems = read_job(body)
    assert job is not None, problems
    return job


def owned_by(uid: str, kind: str = "RLJob", name: str = "prod", controller: bool = True) -> dict:
    api_version = "kuberl.io/v1alpha1" if kind == "RLJob" else "apps/v1"
    reference = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    return {
        "metadata": {
            "name": "prod-job",
            "ownerReferences": [reference | {"controller": controller}],
        }
    }


# --- The children and their names ----------------------------------------------------------------


@pytest.mark.parametrize("settings", [KEYED, KEYLESS], ids=["keyed", "keyless"])
def test_child_refs_are_the_children_built_in_their_order(settings):
    job = created_job()
    built = build_children(job, settings, attempt=1, token="t")

    refs = child_refs(job, settings)

    assert [(r.kind, r.api_version, r.name) for r in refs] == [
        (o["kind"], o["apiVersion"], o["metadata"]["name"]) for o in built
    ]
    assert refs[-1].kind == "RayCluster"  # created last: a taken name stops the rest before it
    assert [r.kind for r in refs if r.keyed] == (["Secret"] if settings is KEYED else [])


def test_the_uid_of_a_created_job_is_read():
    assert job_uid(created_job(uid=UID)) == UID
    assert job_uid(read_job(rljob("prod"))[0]) is None


def test_with_a_key_the_token_secret_is_named_with_a_digest_nobody_else_can_make():
    job = created_job()
    name = auth_secret_name(job, KEYED)

    assert re.fullmatch(r"prod-ray-auth-[a-z2-7]{10}", name), name
    assert auth_secret_name(created_job(), KEYED) == name  # the operator finds it again
    others = {
        auth_secret_name(job, OperatorSettings(ray_auth_key="x" * 64)),  # another key
        auth_secret_name(created_job(uid="another-uid"), KEYED),  # the job recreated
        auth_secret_name(created_job(namespace="team-b"), KEYED),
    }
    assert name not in others and len(others) == 3
    secret = build_children(job, KEYED, attempt=1, token="t")[0]
    assert secret["metadata"]["name"] == name


def test_without_a_key_or_a_uid_the_token_secret_has_the_plain_name():
    assert auth_secret_name(created_job(), KEYLESS) == child_names(created_job()).auth_secret
    assert auth_secret_name(read_job(rljob("prod"))[0], KEYED) == "prod-ray-auth"


def test_no_job_may_reference_a_keyed_token_secret():
    job = created_job()
    stolen = rljob("thief", storage={"secretRef": {"name": auth_secret_name(job, KEYED)}})
    thief, _ = read_job(stolen)

    [problem] = reach_problems(thief, OperatorSettings(allowed_secrets="*"))

    assert problem.path == "spec.storage.secretRef.name"
    assert "is a Secret of the operator's own" in problem.message


# --- Whose an object is -------------------------------------------------------------------------


def test_an_object_whose_controller_is_the_job_is_the_jobs():
    assert taken_name("ConfigMap", owned_by(UID), "prod", UID) is None


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"name": "prod-job"}},
        owned_by("another-uid", kind="Deployment"),
        owned_by(UID, controller=False),  # a mere owner, not the controller
        owned_by("another-uid", name="other-job"),  # another RLJob's child
    ],
    ids=["no-owner", "another-controller", "not-controller", "another-rljob"],
)
def test_an_object_the_job_does_not_control_is_someone_elses(obj):
    taken = taken_name("ConfigMap", obj, "prod", UID)

    assert taken == TakenName("ConfigMap", "prod-job", leftover=False)
    assert taken.describe() == "ConfigMap prod-job exists and is not this job's: rename the job"


def test_a_child_of_an_earlier_rljob_of_the_name_is_a_leftover():
    taken = taken_name("ConfigMap", owned_by("earlier-uid"), "prod", UID)

    assert taken == TakenName("ConfigMap", "prod-job", leftover=True)
    assert "garbage-collected" in taken.describe()


def test_without_a_uid_nothing_is_the_jobs():
    """A job being created (the webhook's view) owns nothing yet."""
    assert taken_name("ConfigMap", owned_by(""), "prod", "") is not None


# --- What the decider makes of it ---------------------------------------------------------------

SPEC = RLJobSpec.model_validate(rljob("prod")["spec"])
FOREIGN = TakenName("RayCluster", "serve-prod")
LEFTOVER = TakenName("ConfigMap", "serve-prod-job", leftover=True)


def observe(status: RLJobStatus | None = None, **fields) -> Observed:
    return Observed(status=status or RLJobStatus(), generation=1, now=NOW, **fields)


def test_a_new_job_whose_names_are_free_creates_its_children():
    assert compute_status(SPEC, observe()).action == CreateCluster(1)


def test_a_name_someone_else_holds_fails_the_job_naming_it_and_touches_nothing():
    update = compute_status(SPEC, observe(taken_names=(LEFTOVER, FOREIGN)))

    assert update.phase == Phase.FAILED
    assert update.action == Nothing()
    failed = next(c for c in update.status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", Reason.NAME_CONFLICT)
    assert failed.message == "RayCluster serve-prod exists and is not this job's: rename the job"
    assert ("Warning", Reason.NAME_CONFLICT) in [(e.type, e.reason) for e in update.events]


def test_every_name_someone_else_holds_is_said():
    pdb = TakenName("PodDisruptionBudget", "serve-prod-head")

    update = compute_status(SPEC, observe(taken_names=(FOREIGN, pdb)))

    failed = next(c for c in update.status.conditions if c.type == "Failed")
    assert failed.message == (
        "RayCluster serve-prod exists and is not this job's: rename the job; "
        "PodDisruptionBudget serve-prod-head exists and is not this job's: rename the job"
    )


def test_an_earlier_jobs_leftovers_are_waited_for_before_the_next_attempt():
    resuming = RLJobStatus(phase=Phase.RESUMING, attempt=2, restarts=1)

    update = compute_status(SPEC, observe(resuming, taken_names=(LEFTOVER,)))

    assert update.phase == Phase.RESUMING
    assert isinstance(update.action, Requeue)
    assert compute_status(SPEC, observe(resuming)).action == CreateCluster(2)


def test_taken_names_matter_only_where_children_would_be_created():
    """A running job's own cluster is followed as ever (the reconciler does not even look)."""
    running = RLJobStatus(phase=Phase.RUNNING, attempt=1)
    own = ObservedCluster(name="prod", attempt=1, state="ready", head_ready=True)

    update = compute_status(SPEC, observe(running, cluster=own, taken_names=(FOREIGN,)))

    assert update.phase == Phase.RUNNING


# --- Preconditions: what changed hands in between is refused ------------------------------------


def test_a_deletion_with_a_uid_is_refused_for_another_object_of_the_name(kube_api, tmp_path):
    configmaps = "/api/v1/namespaces/default/configmaps"
    first = kube_api.create(configmaps, {"metadata": {"name": "prod-job"}})
    kube_api.delete(f"{configmaps}/prod-job")
    kube_api.create(configmaps, {"metadata": {"name": "prod-job"}, "data": {"x": "y"}})
    kube = Kube(load_kube_config(kube_api.kubeconfig(tmp_path / "kubeconfig")))

    async def delete(uid: str) -> bool:
        try:
            return await kube.delete(path("v1", "configmaps", "default", "prod-job"), uid=uid)
        finally:
            await kube.close()

    with pytest.raises(KubeError) as refused:
        asyncio.run(delete(first["metadata"]["uid"]))
    assert refused.value.status == 409
    assert kube_api.get(f"{configmaps}/prod-job")["data"] == {"x": "y"}


# --- Acting on a child: only on the job's own ---------------------------------------------------

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def job_config(uid: str | None, data: str) -> dict:
    """The `prod-job` ConfigMap, controlled by the RLJob of UID `uid` (None: by nobody)."""
    meta: dict = {"name": "prod-job", "namespace": "default"}
    if uid is not None:
        meta["ownerReferences"] = [owned_by(uid)["metadata"]["ownerReferences"][0]]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"job.yaml": data}}


def ensure(kube_api, tmp_path, child: dict, settings: OperatorSettings = KEYLESS) -> bool:
    job = created_job(namespace="default")
    refs = {ref.kind: ref for ref in child_refs(job, settings)}
    kube = Kube(load_kube_config(kube_api.kubeconfig(tmp_path / "kubeconfig")))

    async def run() -> bool:
        try:
            return await ensure_child(kube, refs[child["kind"]], child, "default", "prod", UID)
        finally:
            await kube.close()

    return asyncio.run(run())


def test_a_child_of_the_jobs_that_exists_is_updated_in_place(kube_api, tmp_path):
    kube_api.create(CONFIGMAPS, job_config(UID, "the spec before\n"))

    assert ensure(kube_api, tmp_path, job_config(UID, "the spec now\n")) is True

    assert kube_api.get(f"{CONFIGMAPS}/prod-job")["data"] == {"job.yaml": "the spec now\n"}


def test_an_object_of_someone_elses_under_a_childs_name_is_left_as_it_is(kube_api, tmp_path):
    """It appeared after the names were read: the create finds it, and nothing is written."""
    before = kube_api.create(CONFIGMAPS, job_config(None, "another team's\n"))

    assert ensure(kube_api, tmp_path, job_config(UID, "the spec now\n")) is False

    assert kube_api.get(f"{CONFIGMAPS}/prod-job") == before


def test_a_keyed_secret_that_exists_is_the_jobs_and_is_not_read(kube_api, tmp_path):
    secret = build_children(created_job(namespace="default"), KEYED, attempt=1, token="t")[0]
    kube_api.create("/api/v1/namespaces/default/secrets", secret)
    reads = len(kube_api.api.log)

    assert ensure(kube_api, tmp_path, secret, KEYED) is True

    assert [r.method for r in kube_api.api.log[reads:]] == ["POST"]


def test_the_log_relay_gets_no_client_for_a_head_of_someone_elses(kube_api, tmp_path):
    """The RayCluster of the job's name is another team's: its head gets neither the job's token
    nor its questions."""
    kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    rayclusters = "/apis/ray.io/v1/namespaces/default/rayclusters"
    kube_api.create(rayclusters, {"metadata": {"name": "prod"}, "spec": {}})
    kube = Kube(load_kube_config(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    reconciler = Reconciler(kube, KEYED, OperatorMetrics())

    async def clients() -> tuple:
        try:
            foreign = await reconciler.observer.jobs_client("default", "prod", UID)
            absent = await reconciler.observer.jobs_client("default", "other", UID)
            return foreign, absent
        finally:
            await reconciler.close()

    foreign, absent = asyncio.run(clients())

    assert foreign is None
    assert absent is not None  # no cluster of that name: nothing of anyone else's to reach
