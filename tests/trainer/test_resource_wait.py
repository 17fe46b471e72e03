"""The driver's start on a Ray cluster whose worker pods may still be starting: a request no node of
the cluster will ever satisfy is an invalid job; one the cluster will satisfy once its pods join is
waited for, bounded and reported (resource_wait.py, with the capacity the operator passes on)."""

import logging

import pytest

from kuberl_contract.capacity import RAY_CAPACITY_ENV, Capacity, NodeGroup, capacity_from_env
from kuberl_contract.config import RolloutConfig
from kuberl_trainer.errors import InvalidJobError, TrainingError
from kuberl_trainer.job.resource_wait import await_resources, job_requests
from kuberl_trainer.rollouts.resources import ResourceError, rollout_workers_request
from testkit import trainer_config

HEAD = NodeGroup({"CPU": 0.0, "GPU": 0.0}, 1)
# The RayCluster of a job with 2 spot rollout workers of 1 CPU each and an on-demand fallback.
SPOT_CLUSTER = Capacity(
    (HEAD, NodeGroup({"CPU": 1.0, "spot": 1.0}, 2), NodeGroup({"CPU": 1.0}, 2)), wait_seconds=600
)
HEAD_ONLY = [{"CPU": 0.0, "GPU": 0.0}]
SPOT_NODE = {"CPU": 1.0, "spot": 1.0}


class Joining:
    """Live nodes that join as time passes: the head first, a spot pod's node every `every`
    seconds of a fake clock that each poll's sleep advances."""

    def __init__(self, every: float, nodes: int):
        self.now, self.every, self.nodes = 0.0, every, nodes
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def live(self) -> list[dict[str, float]]:
        joined = min(self.nodes, int(self.now // self.every))
        return HEAD_ONLY + [dict(SPOT_NODE)] * joined


def wait(requests, capacity, joining: Joining, private_ray: bool = False, **kwargs) -> None:
    await_resources(
        requests,
        capacity,
        private_ray,
        live_nodes=joining.live,
        waited=joining.waits.append,
        clock=joining.clock,
        sleep=joining.sleep,
        **kwargs,
    )


def test_workers_that_are_still_starting_are_waited_for_and_the_wait_reported(caplog):
    joining = Joining(every=45.0, nodes=2)
    two_spot_workers = [rollout_workers_request(2, 1.0, {"spot": 1.0})]
    with caplog.at_level(logging.WARNING):
        wait(two_spot_workers, SPOT_CLUSTER, joining)

    assert joining.now == 90.0  # the second node joined at 90 s
    assert joining.waits[-1] == 0.0  # no longer waiting
    assert max(joining.waits) == pytest.approx(89.0)
    assert all(seconds > 0 for seconds in joining.waits[:-1])
    messages = [record.getMessage() for record in caplog.records]
    assert "waiting up to 600s for Ray nodes to join (0s so far)" in messages[0]
    assert "rolloutWorkers" in messages[0]  # what is missing, by field
    assert sum("waiting up to" in m for m in messages) == 3  # at 0, 30 and 60 s: bounded noise
    assert messages[-1] == "the Ray nodes joined after 90s"


def test_a_request_the_cluster_can_never_offer_is_an_invalid_job_at_once():
    joining = Joining(every=1.0, nodes=2)
    three_spot_workers = [rollout_workers_request(3, 1.0, {"spot": 1.0})]
    with pytest.raises(InvalidJobError) as raised:
        wait(three_spot_workers, SPOT_CLUSTER, joining)
    assert "3 replicas x 1 spot = 3 spot requested but the Ray cluster has 2" in str(raised.value)
    assert "every node the job's Ray cluster can ever have" in str(raised.value)
    assert joining.now == 0.0  # nothing waited for

    too_big = [rollout_workers_request(1, 4.0, {})]
    with pytest.raises(InvalidJobError, match=r"cpusPerWorker=4 but the largest Ray node has 1"):
        wait(too_big, SPOT_CLUSTER, joining)


def test_nodes_that_do_not_join_in_time_fail_the_attempt_not_the_job():
    joining = Joining(every=1000.0, nodes=2)
    capacity = Capacity(SPOT_CLUSTER.groups, wait_seconds=120)
    with pytest.raises(TrainingError) as raised:
        wait([rollout_workers_request(2, 1.0, {})], capacity, joining)
    assert not isinstance(raised.value, InvalidJobError)  # the operator restarts the attempt
    assert "did not join within 120s" in str(raised.value)
    assert joining.now == 120.0 and joining.waits[-1] == 0.0


def test_a_stop_signal_ends_the_wait():
    joining = Joining(every=1000.0, nodes=2)
    with pytest.raises(TrainingError, match="stopped while waiting"):
        wait(
            [rollout_workers_request(1, 1.0, {})],
            SPOT_CLUSTER,
            joining,
            interrupted=lambda: joining.now >= 5,
        )
    assert joining.now == 5.0


def test_without_a_capacity_the_live_nodes_decide():
    joining = Joining(every=1000.0, nodes=2)
    one_worker = [rollout_workers_request(1, 1.0, {})]
    # A private local Ray is all there will ever be.
    with pytest.raises(InvalidJobError, match="this machine's Ray is all there is"):
        wait(one_worker, None, joining, private_ray=True)
    # A Ray cluster of unknown shape: fail as before, as a failure that a retry may fix.
    with pytest.raises(ResourceError):
        wait(one_worker, None, joining)
    assert joining.now == 0.0


def test_the_capacity_travels_as_json_in_the_environment():
    assert Capacity.from_json(SPOT_CLUSTER.to_json()) == SPOT_CLUSTER
    assert capacity_from_env({RAY_CAPACITY_ENV: SPOT_CLUSTER.to_json()}) == SPOT_CLUSTER
    assert capacity_from_env({}) is None
    assert len(SPOT_CLUSTER.nodes()) == 5
    with pytest.raises(ValueError, match=RAY_CAPACITY_ENV):
        Capacity.from_json('{"groups": [{"resources": {"CPU": 1}}]}')


def test_the_jobs_requests_are_its_workers_and_replay_shards():
    ppo = trainer_config(algorithm="PPO")
    assert job_requests(ppo, RolloutConfig(replicas=0)) == []
    [workers] = job_requests(ppo, RolloutConfig(replicas=2, ray_resources={"spot": 1}))
    assert (workers.count, workers.amounts) == (2, {"CPU": 1.0, "spot": 1})
    apex = trainer_config(
        algorithm="APEX", optimizerConfig={"replayShards": 3, "cpusPerReplayShard": 0.5}
    )
    _, shards = job_requests(apex, RolloutConfig(replicas=1))
    assert (shards.count, shards.amounts) == (3, {"CPU": 0.5})


def test_the_live_nodes_of_a_real_ray(ray_local):
    one_worker = [rollout_workers_request(1, 1.0, {})]
    await_resources(one_worker, None, private_ray=True)  # ray_local has 2 CPUs
    with pytest.raises(InvalidJobError, match=r"3 replicas x 1 CPUs = 3 CPUs requested"):
        await_resources([rollout_workers_request(3, 1.0, {})], None, private_ray=True)
