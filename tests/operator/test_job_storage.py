"""A job's own claim (spec.storage.size) and a warm start from another job (warmStart.job), with
kopf running for real (handlers.py) against the emulated Kubernetes API. No Ray head runs here:
what is checked is what the operator creates before any driver."""

from __future__ import annotations

import kopf
import pytest
import yaml
from kubeapi import RAYCLUSTER_CRD
from test_foreign_children import CONFIGMAPS, PATIENCE, RAYCLUSTERS, found, settings

from kuberl_operator.builders import WARM_START_MOUNT_PATH
from kuberl_operator.handlers import registry
from testkit import rljob, wait_until

CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"


@pytest.fixture
def kube(kube_api, tmp_path, monkeypatch):
    """The emulated Kubernetes API, with KubeRay's CRD and the operator running against it."""
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path / "kubeconfig")))
    kube_api.register_crd()
    kube_api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", RAYCLUSTER_CRD)
    memo = kopf.Memo(settings=settings(tmp_path, None))
    with kube_api.kopf(registry, login=False, memo=memo):
        yield kube_api


TEACHER_CHECKPOINT = "/kuberl/checkpoints/teacher/checkpoints/5"


def checkpointed_teacher(kube_api) -> None:
    """The job `teacher`, on a claim of its own, once its driver has reported a checkpoint."""
    kube_api.create(kube_api.rljobs(), rljob("teacher", storage={"size": "2Gi"}))
    teacher = kube_api.rljobs(name="teacher")
    wait_until(lambda: (kube_api.get(teacher).get("status") or {}).get("phase"), PATIENCE, "status")
    teacher_reports_its_checkpoint(kube_api)


def teacher_reports_its_checkpoint(kube_api) -> None:
    """The teacher's newest checkpoint in its status, as its driver reports it at every poll: the
    operator's status write of a poll that read the job before a report may drop it, which the
    next report mends."""
    teacher = kube_api.rljobs(name="teacher")
    progress = (kube_api.get(teacher).get("status") or {}).get("progress") or {}
    if progress.get("lastCheckpoint") != TEACHER_CHECKPOINT:
        status = {"progress": {"lastCheckpoint": TEACHER_CHECKPOINT}}
        kube_api.patch(teacher + "/status", {"status": status})


def reported_and_found(kube_api, path: str):
    """`path`'s object once it exists, the teacher reporting its checkpoint meanwhile."""
    teacher_reports_its_checkpoint(kube_api)
    return found(kube_api, path)


def trainer_with(**fields) -> dict:
    return {**rljob("t")["spec"]["trainer"], **fields}


def test_a_job_with_a_storage_size_gets_its_own_claim_owned_by_the_job(kube):
    kube_api = kube
    job = kube_api.create(kube_api.rljobs(), rljob("teacher", storage={"size": "2Gi"}))

    claim = wait_until(lambda: found(kube_api, f"{CLAIMS}/teacher-storage"), PATIENCE, "claim")

    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "RLJob",
        "teacher",
        job["metadata"]["uid"],
    )
    assert owner["controller"] is True  # the garbage collector deletes it with the job
    cluster = wait_until(lambda: found(kube_api, f"{RAYCLUSTERS}/teacher"), PATIENCE, "cluster")
    volumes = cluster["spec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    assert {"name": "storage", "persistentVolumeClaim": {"claimName": "teacher-storage"}} in volumes


def test_a_warm_start_from_a_job_reads_its_claim_through_the_manifest(kube):
    kube_api = kube
    checkpointed_teacher(kube_api)
    student = rljob("student", trainer=trainer_with(warmStart={"job": "teacher"}))
    kube_api.create(kube_api.rljobs(), student)

    config_map = wait_until(
        lambda: reported_and_found(kube_api, f"{CONFIGMAPS}/student-job"), PATIENCE, "cm"
    )

    manifest = yaml.safe_load(config_map["data"]["job.yaml"])
    warm_start = {"checkpoint": f"{WARM_START_MOUNT_PATH}/teacher"}
    assert manifest["spec"]["trainer"]["warmStart"] == warm_start
    cluster = wait_until(lambda: found(kube_api, f"{RAYCLUSTERS}/student"), PATIENCE, "cluster")
    volumes = cluster["spec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    claim = {"claimName": "teacher-storage", "readOnly": True}
    assert {"name": "warm-start", "persistentVolumeClaim": claim} in volumes
    # The job as written keeps the name: only its driver's manifest says where.
    stored = kube_api.get(kube_api.rljobs(name="student"))
    assert stored["spec"]["trainer"]["warmStart"] == {"job": "teacher"}


def test_a_warm_start_from_a_job_not_there_yet_waits_for_it_and_says_why(kube):
    """Without the webhook nothing stops such a job at the door: its cluster waits, an Event says
    why (once for each reason, not at every poll), and the job runs once the job it names has a
    checkpoint."""
    kube_api = kube
    student = rljob("student", trainer=trainer_with(warmStart={"job": "teacher"}))
    kube_api.create(kube_api.rljobs(), student)

    def warnings() -> list[str]:
        events = kube_api.list("/api/v1/namespaces/default/events")
        return [
            e["message"]
            for e in events
            if e["involvedObject"]["name"] == "student" and e["reason"] == "WarmStartUnavailable"
        ]

    [message, *_] = wait_until(warnings, PATIENCE, "the WarmStartUnavailable Event")
    assert message.startswith("spec.trainer.warmStart.job: there is no job 'teacher'")
    assert found(kube_api, f"{RAYCLUSTERS}/student") is None

    checkpointed_teacher(kube_api)
    wait_until(
        lambda: reported_and_found(kube_api, f"{RAYCLUSTERS}/student"),
        PATIENCE,
        "the student's cluster",
    )
    said = warnings()
    assert len(said) == len(set(said)), said  # each reason said once, not at every poll
