"""Before the driver places its actors: "never possible" or "not yet"?

A request the Ray cluster can never satisfy makes the job invalid (InvalidJobError: the operator
fails it at once instead of restarting it). A request the live nodes cannot satisfy yet, while the
cluster's capacity (kuberl_contract.capacity, from the operator) says they will, waits for the
nodes to join (rollout worker pods still Pending): bounded by the capacity's wait, logged, and
reported as the gauge kuberl_resource_wait_seconds, which the operator shows in the job's status.
Without a capacity the live nodes are all there is to judge by: in a private local Ray nothing
else will ever join (invalid), and in a Ray cluster of unknown shape the request fails as before.
An elastic fleet (rolloutWorkers.minReplicas, maxReplicas) is judged at both ends: the job's full
shape, at maxReplicas, must fit what the cluster can ever have, and training starts once the live
nodes hold it at minReplicas (the other workers join as their nodes come; see WorkerSet).
Here are the job's requests (`job_requests`) and the wait (`await_resources`); what a request is,
and whether given nodes can hold it, come from kuberl_trainer.rollouts.resources.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from kuberl_contract.capacity import RAY_CPU, Capacity
from kuberl_contract.config import PBT, JobTrainerConfig, OptimizerName, RolloutConfig
from kuberl_trainer.errors import InvalidJobError, TrainingError
from kuberl_trainer.rollouts.resources import (
    ResourceError,
    ResourceRequest,
    check_resources,
    replay_shards_request,
    rollout_workers_request,
)

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
REPORT_EVERY_SECONDS = 30.0  # how often a wait is logged again


def live_ray_nodes() -> list[dict[str, float]]:
    """The Ray resources of each live node of the Ray cluster this process is connected to."""
    import ray

    return [node["Resources"] for node in ray.nodes() if node.get("Alive")]


def job_requests(
    config: JobTrainerConfig, rollout: RolloutConfig, workers: int | None = None
) -> list[ResourceRequest]:
    """What the job's actors ask of the Ray cluster with `workers` rollout workers (its most,
    maxReplicas, if None; its fewest to start training): the rollout workers and, for
    AsyncReplay, its replay shards (the same requests WorkerSet and the optimizer check); for
    PBT, a trial actor and what its trainer asks, times the population."""
    if config.algorithm == PBT:
        hp = config.hyperparameters
        trials = ResourceRequest(
            "trial",
            "trainer.hyperparameters",
            "population",
            hp.population,
            {RAY_CPU: hp.cpus_per_trial},
            {RAY_CPU: "cpus_per_trial"},
        )
        inner = job_requests(config.trainer, rollout, workers)
        return [trials, *(replace(r, count=r.count * hp.population) for r in inner)]
    requests = []
    workers = rollout.most if workers is None else workers
    if workers:
        requests.append(
            rollout_workers_request(workers, rollout.cpus_per_worker, rollout.ray_resources)
        )
    if config.optimizer_name == OptimizerName.ASYNC_REPLAY:
        settings = config.optimizer_config
        requests.append(
            replay_shards_request(settings.replay_shards, settings.cpus_per_replay_shard)
        )
    return requests


def await_resources(
    requests: list[ResourceRequest],
    capacity: Capacity | None,
    private_ray: bool,
    live_nodes: Callable[[], list[dict[str, float]]] = live_ray_nodes,
    waited: Callable[[float], None] = lambda seconds: None,
    interrupted: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    to_start: list[ResourceRequest] | None = None,
) -> None:
    """Return once the live Ray nodes (`live_nodes()`, each as its Ray resources) can hold
    `to_start` (what training starts with: the fewest rollout workers; all the requests if
    None). Raises InvalidJobError when no node the cluster will ever have can hold every request
    (`capacity`, or with `private_ray` the live nodes themselves), TrainingError when the nodes
    that could have not joined within `capacity.wait_seconds`, and ResourceError when the live
    nodes cannot and nothing says more are coming. `waited(seconds)` is told the wait so far (0
    when there is none, or no more); `interrupted()` true (a stop signal came) ends a wait with
    a TrainingError."""
    _check_ever_possible(requests, capacity, live_nodes if private_ray else None)
    started, reported = clock(), None
    while True:
        try:
            check_resources(requests if to_start is None else to_start, live_nodes())
        except ResourceError as exc:
            if capacity is None and private_ray:
                raise InvalidJobError(f"{exc} (this machine's Ray is all there is)") from None
            if capacity is None:
                raise
            now = clock()
            elapsed = now - started
            if elapsed >= capacity.wait_seconds:
                waited(0.0)
                raise TrainingError(
                    f"the Ray nodes for the job's actors did not join within "
                    f"{capacity.wait_seconds:g}s: {exc}"
                ) from None
            if reported is None or now - reported >= REPORT_EVERY_SECONDS:
                reported = now
                log.warning(
                    "waiting up to %gs for Ray nodes to join (%.0fs so far); the live ones cannot "
                    "hold the job's actors yet: %s",
                    capacity.wait_seconds,
                    elapsed,
                    exc,
                )
            if interrupted():
                waited(0.0)
                raise TrainingError(
                    "stopped while waiting for the Ray nodes of the job's actors: nothing was "
                    "trained, so there is nothing to checkpoint"
                ) from None
            waited(max(elapsed, 1e-3))  # > 0: the wait has begun
            sleep(POLL_SECONDS)
            continue
        if reported is not None:
            log.warning("the Ray nodes joined after %.0fs", clock() - started)
        waited(0.0)
        return


def _check_ever_possible(
    requests: list[ResourceRequest],
    capacity: Capacity | None,
    private_nodes: Callable[[], list[dict[str, float]]] | None,
) -> None:
    """Raise InvalidJobError when the nodes the Ray cluster can ever have (`capacity`; without
    one, a private Ray's live nodes, `private_nodes()`: it never grows) cannot hold every request:
    the job's full shape, its most rollout workers included."""
    if capacity is not None:
        try:
            check_resources(requests, capacity.nodes())
        except ResourceError as exc:
            raise InvalidJobError(
                f"{exc} (counting every node the job's Ray cluster can ever have: the head and "
                "each worker group at its most replicas)"
            ) from None
    elif private_nodes is not None:
        try:
            check_resources(requests, private_nodes())
        except ResourceError as exc:
            raise InvalidJobError(f"{exc} (this machine's Ray is all there is)") from None
