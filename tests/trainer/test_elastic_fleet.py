"""An elastic rollout fleet (rolloutWorkers.minReplicas, maxReplicas): the driver keeps a slot for
each of the most workers, starts training with the fewest, and its fleet follows the spot nodes
that come and go, while one driver process trains on. The synchronous optimizers learn on batches
of the size the manifest implies whatever the number of workers sampling them.

The end-to-end runs are `kuberl train` attached to a loopback multi-node Ray (tests/multinode.py)
that starts with one spot node, as the operator runs the driver; both share one cluster."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from multinode import loopback_cluster
from test_multinode import (
    ENVS,
    WAIT_S,
    _return,
    ppo_hyperparameters,
    rows,
    spot_rljob,
    start,
    stop_with_sigterm,
    wait_for_row,
)

from kuberl_contract.capacity import Capacity, NodeGroup
from kuberl_contract.config import RolloutConfig
from kuberl_contract.drain import DRAIN_MODULE
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.resource_wait import await_resources, job_requests
from kuberl_trainer.optimizers.sync_samples import (
    SyncSamplesOptimizer,
    fixed_batch_fragments,
    fragment_lengths,
)
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import trainer_config, wait_until

FEWEST, REPLICAS, MOST = 1, 4, 4
ROLLOUT = 32  # PPO learns on ROLLOUT x ENVS x REPLICAS = 1024 env steps an iteration
THRESHOLD = 150.0
# Each env step also waits this long off the CPU, like a simulator elsewhere: the workers leave
# the loaded machine's cores to the spot nodes starting beside them (a node joining is CPU-bound).
STEP_SECONDS = 0.001
# IMPALA's flow control keeps only the calls its learner takes in flight: the workers do not all
# sample nonstop, so the loaded machine still starts the spot nodes added (A3C's four workers,
# each computing gradients nonstop, held up the head so that a node joining timed out).
IMPALA_FLOW = {"requestsInFlightPerWorker": 1, "learnerQueueSize": 2}


# -- the fragments of a fixed batch -------------------------------------------------------------


@pytest.mark.parametrize("healthy", [1, 3, 4])
def test_the_workers_there_share_the_batch_of_replicas_workers(healthy):
    fragments = fragment_lengths(ROLLOUT, REPLICAS, healthy)
    assert sum(fragments) == ROLLOUT * REPLICAS
    assert max(fragments) - min(fragments) <= 1  # as even as whole steps allow


@pytest.mark.parametrize("healthy", [1, 3, 4])
def test_sequence_learners_get_whole_rollouts_and_the_same_batch(healthy):
    fragments = fragment_lengths(ROLLOUT, REPLICAS, healthy, unit=ROLLOUT)
    assert sum(fragments) == ROLLOUT * REPLICAS
    assert all(steps % ROLLOUT == 0 for steps in fragments)


def test_more_workers_than_rollouts_leave_some_out():
    assert fragment_lengths(ROLLOUT, 2, 4, unit=ROLLOUT) == [ROLLOUT, ROLLOUT, 0, 0]


def test_a_fragment_needs_a_worker_and_a_unit_that_divides_the_rollout():
    with pytest.raises(ValueError, match="workers: 0"):
        fragment_lengths(ROLLOUT, REPLICAS, 0)
    with pytest.raises(ValueError, match="unit: 5"):
        fragment_lengths(ROLLOUT, REPLICAS, 1, unit=5)


@pytest.mark.parametrize("algorithm", ["PPO", "IMPALA"])
def test_a_local_worker_alone_samples_the_whole_batch_of_a_synchronous_iteration(algorithm):
    # IMPALA keeps its envs' reset steps as masked rows, so its batch's rows are exactly its steps.
    config = trainer_config(
        algorithm=algorithm, optimizer="SyncSamples", hyperparameters={"rollout_length": 8}
    )

    def kwargs(index):
        return dict(policy_class=algorithms.policy_class(config), config=config, num_envs=2, seed=0)

    workers = WorkerSet(RolloutWorker, kwargs, num_remote=0, batch_replicas=REPLICAS)
    try:
        optimizer = SyncSamplesOptimizer(workers, config)
        assert sum(optimizer.fragments(3)) == 8 * REPLICAS
        [batch] = workers.sample(None, optimizer.fragments)
        if algorithm == "IMPALA":
            assert len(batch) == 8 * REPLICAS * 2
        else:  # less the reset steps, which PPO drops
            assert 0.8 * 8 * REPLICAS * 2 <= len(batch) <= 8 * REPLICAS * 2
        assert workers.num_ready == 0
    finally:
        workers.stop()


def test_without_a_config_each_worker_samples_its_rollout_length():
    assert fixed_batch_fragments(None, REPLICAS, policy=None) is None


# -- training starts with the fewest, the job's shape is judged at the most ----------------------

HEAD, SPOT_NODE = {"CPU": 1.0}, {"CPU": 1.0, "spot": 1.0}
ELASTIC = RolloutConfig(
    replicas=REPLICAS,
    min_replicas=FEWEST,
    max_replicas=MOST,
    cpus_per_worker=1.0,
    ray_resources={"spot": 1.0},
)


def spot_capacity(nodes: int) -> Capacity:
    return Capacity((NodeGroup(HEAD, 1), NodeGroup(SPOT_NODE, nodes)), 60.0)


def test_training_starts_once_the_fewest_workers_fit_the_live_nodes():
    config = trainer_config(algorithm="PPO")
    await_resources(  # returns at once: one live spot node holds the one worker to start with
        job_requests(config, ELASTIC),
        spot_capacity(MOST),
        private_ray=False,
        live_nodes=lambda: [HEAD, SPOT_NODE],
        to_start=job_requests(config, ELASTIC, ELASTIC.fewest),
        sleep=lambda seconds: pytest.fail("waited for nodes the fewest workers do not need"),
    )


def test_a_job_whose_most_workers_exceed_the_capacity_is_invalid():
    config = trainer_config(algorithm="PPO")
    with pytest.raises(InvalidJobError, match="rolloutWorkers: 4 replicas"):
        await_resources(
            job_requests(config, ELASTIC),
            spot_capacity(MOST - 1),
            private_ray=False,
            live_nodes=lambda: [HEAD, SPOT_NODE],
            to_start=job_requests(config, ELASTIC, ELASTIC.fewest),
        )


# -- the fleet follows the spot nodes -------------------------------------------------------------


@pytest.fixture(scope="module")
def spot_cluster():
    """One loopback cluster for this module's runs (starting one takes a while)."""
    with loopback_cluster(spot_nodes=FEWEST, pythonpath=[Path(__file__).parent]) as cluster:
        yield cluster


@pytest.fixture
def one_spot_node(spot_cluster):
    """The module's cluster with one live spot node, whatever a run before added."""
    spot_cluster.keep_spot_nodes(FEWEST)
    return spot_cluster


def write_job(path, algorithm: str):
    """CartPole (waiting STEP_SECONDS a step) on rollout workers pinned to the spot nodes, elastic
    between FEWEST and MOST; no stop it reaches by itself (the test stops it with SIGTERM)."""
    trainer = {
        "algorithm": algorithm,
        "env": "custom_envs:SlowCartPole",
        "envConfig": {"step_seconds": STEP_SECONDS},
        "seed": 0,
        "hyperparameters": ppo_hyperparameters(ROLLOUT) if algorithm == "PPO" else {},
        "stop": {"timesteps": 10_000_000},
        "checkpoint": {"everyIterations": 10_000},
        **({"optimizerConfig": IMPALA_FLOW} if algorithm == "IMPALA" else {}),
    }
    elastic = {"replicas": REPLICAS, "minReplicas": FEWEST, "maxReplicas": MOST}
    path.write_text(yaml.safe_dump(spot_rljob(trainer, **elastic)))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["IMPALA", "PPO"])
def test_the_fleet_grows_and_shrinks_with_the_spot_nodes_and_training_goes_on(
    one_spot_node, tmp_path, algorithm
):
    run_dir = tmp_path / "run"
    job = write_job(tmp_path / "job.yaml", algorithm)
    driver = start(job, run_dir, one_spot_node.client_env(spot_nodes_at_most=MOST))
    try:
        first = wait_for_row(run_dir, driver, "the first iteration", lambda r: True)
        assert first["workers_ready"] == FEWEST  # trains with the one worker it can place
        grown = first
        for count in range(FEWEST + 1, MOST + 1):
            one_spot_node.add_spot_node()  # the operator scaled the rollout group up
            grown = wait_for_row(
                run_dir, driver, f"{count} workers", lambda r, c=count: r["workers_ready"] == c
            )
        one_spot_node.live_spot_nodes()[-1].kill()  # a spot node preempted
        shrunk = wait_for_row(
            run_dir,
            driver,
            f"{MOST - 1} workers after the loss",
            lambda r: r["iteration"] > grown["iteration"] and r["workers_ready"] == MOST - 1,
        )
        assert shrunk["worker_restarts"] >= 1
        wait_for_row(run_dir, driver, f"a return of {THRESHOLD}", lambda r: _return(r) >= THRESHOLD)
        stop_with_sigterm(driver)
    finally:
        output = driver.output()
    history = rows(run_dir)
    # One driver throughout: the iterations continue, nothing was resumed.
    assert [row["iteration"] for row in history] == list(range(1, len(history) + 1))
    assert "Resuming from" not in output
    if algorithm == "PPO":  # the batch of REPLICAS workers, whatever the fleet
        batch = ROLLOUT * ENVS * REPLICAS
        # less the reset steps, and but for the iteration that lost a worker's share with it
        restarts = [0] + [row["worker_restarts"] for row in history]
        sizes = [
            row["timesteps_this_iter"]
            for row, before in zip(history, restarts, strict=False)
            if row["worker_restarts"] == before
        ]
        assert all(0.8 * batch <= size <= batch for size in sizes), sizes


@pytest.mark.slow
def test_a_draining_node_gets_no_more_calls_and_its_worker_goes_where_there_is_room(
    one_spot_node, tmp_path
):
    """The operator drains the node of a pod about to go (kuberl_contract.drain): the worker
    there finishes its calls and goes, not counted as a failure; the node, idle, ends itself as
    Ray does; the slot's next worker starts on a node that joins later."""
    cluster = one_spot_node
    leaving = cluster.add_spot_node(ip="127.0.0.2")  # a pod of its own address
    run_dir = tmp_path / "run"
    job = write_job(tmp_path / "job.yaml", "IMPALA")
    driver = start(job, run_dir, cluster.client_env(spot_nodes_at_most=MOST))
    try:
        both = wait_for_row(run_dir, driver, "2 workers", lambda r: r["workers_ready"] == 2)
        drain = [sys.executable, "-m", DRAIN_MODULE, "--deadline-seconds=120", "--reason=test"]
        subprocess.run([*drain, "127.0.0.2"], env=cluster.client_env(), check=True, timeout=120)
        drained = wait_for_row(
            run_dir,
            driver,
            "1 worker after the drain",
            lambda r: r["iteration"] > both["iteration"] and r["workers_ready"] == 1,
        )

        # Its worker gone, the node is idle and Ray ends it (its raylet exits).
        def gone() -> bool:  # Ray lists the cluster (it answers), without the node
            names = {node.get("node_name") for node in cluster.alive_nodes()}
            return bool(names) and leaving.name not in names

        wait_until(gone, timeout=WAIT_S, what="the drained node's end")
        leaving.stop()  # what is left of it: `ray start --block` outlives its raylet
        leaving.killed = True
        cluster.add_spot_node()
        back = wait_for_row(
            run_dir,
            driver,
            "2 workers again",
            lambda r: r["iteration"] > drained["iteration"] and r["workers_ready"] == 2,
        )
        # The head's pod about to go: the operator's notice has the driver checkpoint at once.
        notice = [*drain, "--checkpoint-now"]
        subprocess.run(notice, env=cluster.client_env(), check=True, timeout=120)
        saved = wait_for_row(
            run_dir,
            driver,
            "a checkpoint",
            lambda r: r["iteration"] > back["iteration"] and r["checkpoint"] is not None,
        )
        stop_with_sigterm(driver)
    finally:
        output = driver.output()
    assert "node drains: it gets no more calls" in output
    assert "This Ray node is about to go (deadline in" in output
    assert back["worker_restarts"] == 0  # a drain is not a failure
    history = rows(run_dir)
    assert [row["iteration"] for row in history] == list(range(1, len(history) + 1))
    # The notice's checkpoint is the first: everyIterations is far off.
    assert all(row["checkpoint"] is None for row in history[: saved["iteration"] - 1])
