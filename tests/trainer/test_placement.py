"""Placement on a real Ray whose node advertises a custom `spot` resource (as an RLJob's spot
worker pods do): workers that require it are placed and hold it, and what can never be placed
(a resource no node advertises, more than a node or the cluster has, replay shards' CPUs on top
of the workers') fails fast, naming the manifest field."""

import pytest
from test_sync_samples import MockWorker

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.rollouts.resources import (
    ResourceError,
    check_resources,
    replay_shards_request,
    rollout_workers_request,
)
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config, wait_until

SPOT = 2  # units of `spot` the node advertises


@pytest.fixture(scope="module")
def ray_spot(ray_local):
    """The session's private Ray restarted with `spot` advertised, and as it was afterwards."""
    options = {"address": "local", "num_cpus": 2, "include_dashboard": False}
    ray_local.shutdown()
    ray_local.init(**options, resources={"spot": SPOT}, log_to_driver=False)
    yield ray_local
    ray_local.shutdown()
    ray_local.init(**options, log_to_driver=False)  # as conftest's ray_local starts it


def test_workers_requiring_spot_are_placed_and_hold_it(ray_spot):
    workers = WorkerSet(
        MockWorker, lambda index: {}, num_remote=2, cpus_per_worker=0.5, ray_resources={"spot": 1}
    )
    try:
        all_started(workers)
        assert len(workers.foreach_remote("pid")) == 2  # both placed and answering
        wait_until(lambda: ray_spot.available_resources().get("spot", 0) == 0, timeout=30)
    finally:
        workers.stop()
    wait_until(lambda: ray_spot.available_resources().get("spot") == SPOT, timeout=30)


@pytest.mark.parametrize(
    "resources, replicas, needle",
    [
        (
            {"preemptible": 1},
            1,
            "rolloutWorkers.rayResources.preemptible=1 but no live Ray node advertises "
            "'preemptible' (custom resources advertised: spot)",
        ),
        ({"spot": 3}, 1, "rolloutWorkers.rayResources.spot=3 but the largest Ray node has 2 spot"),
        (
            {"spot": 1},
            3,
            "rolloutWorkers: 3 replicas x 1 spot = 3 spot requested but the Ray cluster has 2; "
            "lower rolloutWorkers.replicas or rolloutWorkers.rayResources.spot",
        ),
    ],
    ids=["unknown", "more-than-a-node", "more-than-the-cluster"],
)
def test_custom_resources_the_cluster_lacks_fail_fast(ray_spot, resources, replicas, needle):
    with pytest.raises(ResourceError) as raised:
        WorkerSet(MockWorker, lambda index: {}, replicas, 0.5, ray_resources=resources)
    assert needle in str(raised.value)


def test_replay_shards_cpus_count_with_the_workers(ray_spot):
    workers = rollout_workers_request(2, 0.5, {})
    check_resources([workers, replay_shards_request(2, 0.0)])  # shards at 0 CPUs: always fit
    check_resources([workers, replay_shards_request(2, 0.5)])  # 2 CPUs of 2

    with pytest.raises(ResourceError) as raised:
        check_resources([workers, replay_shards_request(2, 1.0)])
    assert str(raised.value) == (
        "rolloutWorkers: 2 replicas x 0.5 CPUs + trainer.optimizerConfig: 2 replayShards x 1 CPUs "
        "= 3 CPUs requested but the Ray cluster has 2; lower rolloutWorkers.replicas, "
        "rolloutWorkers.cpusPerWorker, trainer.optimizerConfig.replayShards or "
        "trainer.optimizerConfig.cpusPerReplayShard (fractions such as 0.5 are allowed)"
    )
    with pytest.raises(ResourceError, match=r"optimizerConfig\.cpusPerReplayShard=4 but the larg"):
        check_resources([replay_shards_request(1, 4.0)])


def test_the_driver_places_workers_with_the_manifests_resources(ray_spot, tmp_path):
    config = trainer_config(algorithm="PPO", stop={"iterations": 1})
    rollout = RolloutConfig(replicas=1, cpus_per_worker=0.5, ray_resources={"gpu_node": 1})
    with pytest.raises(ResourceError, match=r"rolloutWorkers\.rayResources\.gpu_node=1 but no"):
        Driver(config, rollout, tmp_path, "job").run()
