"""spec.trainer.warmStart on a cluster (builders/warm_start.py): relative paths refused, and a
warmStart.job resolved to the other job's checkpoints as the head will see them, with the other
job's claim mounted read-only and the manifest the driver reads naming the location."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from test_builders import TOKEN, check_kubernetes_schema, head_spec, job_with

from kuberl_operator.builders import (
    WARM_START_MOUNT_PATH,
    WarmStartSource,
    WarmStartUnavailable,
    build_children,
    cluster_warm_start_source,
    served_warm_start_problems,
)
from kuberl_operator.builders.warm_start import WARM_START_CHECKPOINT_FIELD, WARM_START_JOB_FIELD
from kuberl_operator.constants import JOB_CONFIG_FILE
from kuberl_operator.settings import OperatorSettings
from testkit import rljob

SETTINGS = OperatorSettings()
OWN_CLAIM = {"size": "5Gi"}
SHARED = {"persistentVolumeClaim": {"claimName": "team-runs"}}
STUDENT = {"spec.trainer.warmStart": {"job": "teacher"}}


def stored_teacher(checkpointed: bool = True, **spec: Any) -> dict[str, Any]:
    """The RLJob `teacher` as Kubernetes stores it, with a checkpoint saved (or none yet)."""
    job = rljob("teacher", namespace="default", **spec)
    job["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "managedFields": []}
    last = "/kuberl/checkpoints/teacher/checkpoints/000040" if checkpointed else None
    job["status"] = {"phase": "Succeeded", "progress": {"lastCheckpoint": last}}
    return job


@pytest.mark.parametrize(
    ("named", "refused"),
    [
        ("runs/teacher", True),
        ("./teacher", True),
        ("/data/runs/teacher", False),
        ("file:///data/runs/teacher", False),
        ("s3://bucket/teacher", False),
    ],
)
def test_a_served_job_may_not_warm_start_from_a_relative_path(named, refused):
    job = job_with(**{"spec.trainer.warmStart": {"checkpoint": named}})

    problems = served_warm_start_problems(job)

    assert bool(problems) is refused
    if refused:
        [(field, message)] = problems
        assert field == WARM_START_CHECKPOINT_FIELD
        assert "relative path" in message and "warmStart.job" in message


def test_a_job_without_a_claim_mounts_the_teachers_claim_read_only():
    student = job_with(**STUDENT)
    teacher = stored_teacher(storage=OWN_CLAIM)

    source = cluster_warm_start_source(student, teacher)

    assert source == WarmStartSource(f"{WARM_START_MOUNT_PATH}/teacher", "teacher-storage")
    children = build_children(student, SETTINGS, 1, TOKEN, source)
    for child in children:
        if child["kind"] != "RayCluster":
            check_kubernetes_schema(child)
    [config_map] = [child for child in children if child["kind"] == "ConfigMap"]
    manifest = yaml.safe_load(config_map["data"][JOB_CONFIG_FILE])
    assert manifest["spec"]["trainer"]["warmStart"] == {"checkpoint": source.checkpoint}
    [cluster] = [child for child in children if child["kind"] == "RayCluster"]
    head = head_spec(cluster)
    volumes = {volume["name"]: volume for volume in head["volumes"]}
    mounts = {mount["name"]: mount for mount in head["containers"][0]["volumeMounts"]}
    assert volumes["warm-start"]["persistentVolumeClaim"] == {
        "claimName": "teacher-storage",
        "readOnly": True,
    }
    assert mounts["warm-start"] == {
        "name": "warm-start",
        "mountPath": WARM_START_MOUNT_PATH,
        "readOnly": True,
    }


def test_jobs_sharing_a_claim_read_the_teacher_through_their_own_mount():
    student = job_with(**STUDENT, **{"spec.storage": SHARED | {"mountPath": "/runs"}})
    teacher = stored_teacher(storage=SHARED)

    assert cluster_warm_start_source(student, teacher) == WarmStartSource("/runs/teacher")


def test_a_teacher_checkpointing_to_an_object_store_is_read_there():
    teacher = stored_teacher(
        trainer={**rljob("t")["spec"]["trainer"], "checkpoint": {"uri": "s3://b/t"}}
    )

    assert cluster_warm_start_source(job_with(**STUDENT), teacher) == WarmStartSource("s3://b/t")


def test_a_checkpoint_uri_on_the_teachers_claim_is_found_below_the_mount():
    trainer = {**rljob("t")["spec"]["trainer"], "checkpoint": {"uri": "/kuberl/checkpoints/ck/t"}}
    teacher = stored_teacher(storage=OWN_CLAIM, trainer=trainer)

    source = cluster_warm_start_source(job_with(**STUDENT), teacher)

    assert source == WarmStartSource(f"{WARM_START_MOUNT_PATH}/ck/t", "teacher-storage")


@pytest.mark.parametrize(
    ("teacher", "fragment"),
    [
        (None, "there is no job 'teacher' in this namespace"),
        (stored_teacher(checkpointed=False, storage=OWN_CLAIM), "has saved no checkpoint yet"),
        (stored_teacher(), "cannot start another: the checkpoints, and the policy exported"),
        (stored_teacher(storage=OWN_CLAIM, learner={"gpus": -1}), "has an invalid spec"),
    ],
)
def test_a_teacher_that_cannot_start_the_job_is_said_on_the_field(teacher, fragment):
    with pytest.raises(WarmStartUnavailable) as caught:
        cluster_warm_start_source(job_with(**STUDENT), teacher)

    assert caught.value.problem.path == WARM_START_JOB_FIELD
    assert fragment in caught.value.problem.message
