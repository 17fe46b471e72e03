"""What the cluster offers Ray: how many pods, and the Ray resources each advertises.

The spot pods advertise one unit of the custom Ray resource `spot` (SPOT_RAY_RESOURCE, in
rayStartParams), so a job whose rolloutWorkers.rayResources asks for {spot: 1} has its workers
placed on spot pods only, one per pod; without it Ray places workers on any pod, one per pod while
pods are free (the trainer creates them with the SPREAD strategy).

The head gets the cluster's capacity (every group's Ray resources and most replicas,
kuberl_contract.capacity) in KUBERL_RAY_CAPACITY, so the driver tells a resource request that will
never fit (the job is invalid) from worker pods that are still starting (it waits for them, up to
the settings' workers_join_timeout_seconds).
"""

from __future__ import annotations

import math

from kuberl_contract.capacity import RAY_CPU, RAY_GPU, Capacity, NodeGroup
from kuberl_contract.config import PBT
from kuberl_operator.constants import SPOT_RAY_RESOURCE
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.spec import RLJob, RLJobSpec, RolloutWorkers


def rollout_node_resources(workers: RolloutWorkers, spot: bool) -> dict[str, int]:
    """The Ray resources a rollout pod advertises: whole CPUs (`ray start --num-cpus` counts
    whole ones), and on the spot group's pods one unit of `spot`."""
    return {RAY_CPU: math.ceil(workers.cpus_per_worker)} | ({SPOT_RAY_RESOURCE: 1} if spot else {})


def rollout_pods(spec: RLJobSpec, at_most: bool = False) -> int:
    """Rollout worker pods, one per worker: rolloutWorkers.replicas (with `at_most`, the most it
    may be scaled to, maxReplicas), for every trial of a PBT population (each trial has workers
    of its own)."""
    trainer, workers = spec.trainer, spec.rollout_workers
    trials = trainer.hyperparameters.population if trainer.algorithm == PBT else 1
    return (workers.most if at_most else workers.replicas) * trials


def head_cpus(job: RLJob) -> int:
    """CPUs the head advertises to Ray: none (they are the driver's), but for a PBT population
    its trials' actors, which are learners like the driver (whole CPUs: `ray start --num-cpus`)."""
    trainer = job.spec.trainer
    if trainer.algorithm != PBT:
        return 0
    return math.ceil(trainer.hyperparameters.population * trainer.hyperparameters.cpus_per_trial)


def ray_capacity(job: RLJob, settings: OperatorSettings) -> Capacity:
    """The most the job's RayCluster offers the driver's actors (kuberl_contract.capacity): the
    head (no CPUs: they are the learner's; its GPUs) and every rollout group at its maxReplicas,
    the spot group and the on-demand fallback group together, as the builders make them."""
    learner, workers = job.spec.learner, job.spec.rollout_workers
    pods = rollout_pods(job.spec, at_most=True)
    groups = [NodeGroup({RAY_CPU: float(head_cpus(job)), RAY_GPU: float(learner.gpus)}, 1)]
    if pods:
        spot = workers.spot.enabled
        groups.append(NodeGroup(_floats(rollout_node_resources(workers, spot)), pods))
        if spot and workers.spot.fallback_to_on_demand:
            on_demand = rollout_node_resources(workers, spot=False)
            groups.append(NodeGroup(_floats(on_demand), pods))
    return Capacity(tuple(groups), float(settings.workers_join_timeout_seconds))


def _floats(resources: dict[str, int]) -> dict[str, float]:
    return {name: float(amount) for name, amount in resources.items()}
