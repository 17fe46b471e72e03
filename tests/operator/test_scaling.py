"""An elastic fleet, the pure parts: rolloutWorkers.minReplicas and maxReplicas, a Ray cluster built
to hold maxReplicas, replicas edits within the bounds applied to the running cluster (no new
attempt), and the scale subresource's status (replicas, selector)."""

import re
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from pydantic import ValidationError
from test_status import cluster, on_cluster, running, spec

from kuberl_contract.capacity import RAY_CPU
from kuberl_contract.config import RolloutConfig
from kuberl_operator.builders import (
    build_ray_cluster,
    ray_capacity,
    scale_rollout,
    stale_spec,
    worker_pods_selector,
)
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import Phase
from kuberl_operator.status.compute import compute_status
from kuberl_operator.validation import validate_rljob
from testkit import edited, rljob

SETTINGS = OperatorSettings()
ELASTIC = {"replicas": 4, "minReplicas": 1, "maxReplicas": 8}


def job(**workers: Any):
    return validate_rljob(
        rljob("walker", namespace="default", minimal=True, rolloutWorkers=workers)
    )


def groups(ray_cluster: dict) -> dict[str, dict]:
    return {g["groupName"]: g for g in ray_cluster["spec"]["workerGroupSpecs"]}


# --- The bounds ---------------------------------------------------------------------------------


def test_the_bounds_default_to_replicas():
    workers = RolloutConfig(replicas=3)
    assert (workers.fewest, workers.most) == (3, 3)
    assert (RolloutConfig.model_validate(ELASTIC).fewest, RolloutConfig(**{}).most) == (1, 0)


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ({"replicas": 4, "minReplicas": 5}, "minReplicas: 5 is more than replicas (4)"),
        ({"replicas": 4, "maxReplicas": 3}, "maxReplicas: 3 is less than replicas (4)"),
        ({"replicas": 2, "minReplicas": 0}, "minReplicas: 0 would let training start with no"),
        ({"replicas": 0, "maxReplicas": 2}, "maxReplicas: replicas is 0, so the driver samples"),
    ],
)
def test_bounds_that_do_not_hold_replicas_are_refused_naming_the_field(workers, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        RolloutConfig.model_validate(workers)


# --- The cluster ----------------------------------------------------------------------------------


def test_the_cluster_is_built_to_hold_max_replicas():
    built = build_ray_cluster(job(**ELASTIC), SETTINGS, 1)
    rollout = groups(built)["rollout"]
    assert (rollout["replicas"], rollout["minReplicas"], rollout["maxReplicas"]) == (4, 0, 8)
    # the driver is told the most the cluster may offer: 8 pods of one CPU, not 4
    [_, workers] = ray_capacity(job(**ELASTIC), SETTINGS).groups
    assert (workers.resources[RAY_CPU], workers.max_replicas) == (1.0, 8)


def test_an_elastic_replicas_edit_within_the_bounds_keeps_the_cluster():
    built = build_ray_cluster(job(**ELASTIC), SETTINGS, 1)
    assert stale_spec(job(**ELASTIC | {"replicas": 8}), built) == ()
    assert stale_spec(job(**ELASTIC | {"replicas": 1}), built) == ()
    # the bounds are what the cluster was built from: a new maxReplicas needs a new attempt
    assert stale_spec(job(**ELASTIC | {"maxReplicas": 16}), built) == ("rolloutWorkers",)


def test_a_fixed_fleets_replicas_edit_waits_for_the_next_attempt():
    built = build_ray_cluster(job(replicas=4), SETTINGS, 1)
    assert stale_spec(job(replicas=6), built) == ("rolloutWorkers",)
    only_max = build_ray_cluster(job(replicas=4, maxReplicas=8), SETTINGS, 1)
    assert stale_spec(job(replicas=6, maxReplicas=8), only_max) == ("rolloutWorkers",)


def queued(**workers: Any) -> dict:
    manifest = rljob("walker", namespace="default", minimal=True, rolloutWorkers=workers)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    return manifest


def test_a_queued_job_keeps_the_shape_kueue_admitted():
    built = build_ray_cluster(validate_rljob(queued(**ELASTIC)), SETTINGS, 1)
    assert "kueue.x-k8s.io/elastic-job" not in built["metadata"]["annotations"]
    rescaled = edited(queued(**ELASTIC), **{"spec.rolloutWorkers.replicas": 6})
    assert stale_spec(validate_rljob(rescaled), built) == ("rolloutWorkers",)


def test_with_kueues_elastic_jobs_a_queued_elastic_job_scales_in_place():
    """Kueue's ElasticJobsViaWorkloadSlices: the RayCluster opts in, and a scale-up is admitted
    as a new workload slice rather than requeueing the job."""
    settings = OperatorSettings(kueue_elastic_jobs=True)
    built = build_ray_cluster(validate_rljob(queued(**ELASTIC)), settings, 1)
    assert built["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"
    rescaled = edited(queued(**ELASTIC), **{"spec.rolloutWorkers.replicas": 6})
    assert stale_spec(validate_rljob(rescaled), built) == ()
    fixed = build_ray_cluster(validate_rljob(queued(replicas=4)), settings, 1)
    assert "kueue.x-k8s.io/elastic-job" not in fixed["metadata"]["annotations"]


def test_the_rollout_group_is_resized_by_a_patch_that_names_it():
    built = build_ray_cluster(job(**ELASTIC), SETTINGS, 1)
    assert scale_rollout(built, 4) == []
    [test, replace] = scale_rollout(built, 6)
    assert test == {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": "rollout"}
    assert replace == {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 6}


def test_a_shrinking_group_gives_up_its_pending_pods_first():
    """Spot is preferred: a Pending spot pod holds no node, and the on-demand fallback stands in
    for it, so dropping it first keeps the workers that sample and shrinks the on-demand group."""
    built = build_ray_cluster(job(**ELASTIC | {"replicas": 6}), SETTINGS, 1)
    operations = scale_rollout(built, 3, pending=["walker-rollout-a", "walker-rollout-b"])
    shrunk = jsonpatch.apply_patch(built, operations)
    [group] = shrunk["spec"]["workerGroupSpecs"]
    assert group["replicas"] == 3
    assert group["scaleStrategy"] == {"workersToDelete": ["walker-rollout-a", "walker-rollout-b"]}
    fewer = jsonpatch.apply_patch(built, scale_rollout(built, 5, pending=["a", "b"]))
    assert fewer["spec"]["workerGroupSpecs"][0]["scaleStrategy"] == {"workersToDelete": ["a"]}
    grown = jsonpatch.apply_patch(built, scale_rollout(built, 8, pending=["a"]))
    assert "scaleStrategy" not in grown["spec"]["workerGroupSpecs"][0]


def test_the_selector_picks_the_jobs_worker_pods():
    assert worker_pods_selector(job(**ELASTIC)) == "kuberl.io/job=walker,ray.io/node-type=worker"


# --- The status ---------------------------------------------------------------------------------


def elastic(**workers: Any):
    return spec(rolloutWorkers=ELASTIC | workers)


def test_a_running_elastic_job_has_its_group_sized_to_replicas():
    update = compute_status(elastic(replicas=6), on_cluster(running(elastic())))
    assert (update.phase, update.attempt, update.rollout_replicas) == (Phase.RUNNING, 1, 6)


def test_a_fixed_fleet_keeps_its_size_and_a_cluster_of_another_attempt_is_left_alone():
    fixed = spec(rolloutWorkers={"replicas": 4})
    assert compute_status(fixed, on_cluster(running(fixed))).rollout_replicas == 4  # as built
    old = on_cluster(running(elastic()), cluster=cluster(attempt=0))
    assert compute_status(elastic(), old).rollout_replicas is None


def test_a_driver_retried_on_the_same_cluster_keeps_it_sized():
    """Attempt 2 on the cluster built for attempt 1 (a failed driver retried in place)."""
    retried = running(elastic()).status.model_copy(update={"attempt": 2, "cluster_attempt": 1})
    observed = on_cluster(running(elastic()), cluster=cluster(attempt=1))
    observed = replace(observed, status=retried)
    assert compute_status(elastic(replicas=6), observed).rollout_replicas == 6


def test_a_bound_edited_under_the_attempt_waits_for_the_next_cluster():
    observed = on_cluster(running(elastic()), stale_spec=("rolloutWorkers",))
    assert compute_status(elastic(maxReplicas=16), observed).rollout_replicas is None


def test_the_status_reports_the_live_workers_and_their_selector():
    selector = "kuberl.io/job=walker,ray.io/node-type=worker"
    observed = on_cluster(running(elastic()), workers_live=3, worker_selector=selector)
    status = compute_status(elastic(), observed).status
    assert (status.replicas, status.selector) == (3, selector)
