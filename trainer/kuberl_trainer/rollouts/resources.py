"""What a job's actors ask of the Ray cluster, and whether its nodes can ever hold them.

A `ResourceRequest` is a number of Ray actors (rollout workers, replay shards, PBT's trials) that
each need some Ray resources, with the manifest fields that set them. What the Ray cluster could
never place fails at once with the manifest field to change (`check_resources`), where Ray itself
would wait forever: WorkerSet checks its rollout workers before it creates them, AsyncReplay its
replay shards together with them, and the driver judges the whole job against the nodes the cluster
has or will have (kuberl_trainer.job.resource_wait).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kuberl_contract.capacity import RAY_CPU, RAY_GPU, RAY_OWN_RESOURCES
from kuberl_trainer.errors import TrainingError


class ResourceError(TrainingError):
    """Requested actors (rollout workers, replay shards) can never be placed on this Ray
    cluster."""


@dataclass(frozen=True)
class ResourceRequest:
    """`count` Ray actors that each need `amounts` of Ray resources, with the manifest fields that
    set them, so that a request the cluster can never satisfy is reported by field."""

    what: str
    """The actors, singular: "rollout worker"."""
    section: str
    """Where their fields are in the manifest, under spec: "rolloutWorkers"."""
    count_field: str
    """The field of `count`: "replicas"."""
    count: int
    amounts: dict[str, float]
    """Ray resource → amount per actor: {"CPU": 0.5, "spot": 1}."""
    amount_fields: dict[str, str] = field(default_factory=dict)
    """Ray resource → the field that sets it: {"CPU": "cpusPerWorker"}."""


def rollout_workers_request(
    replicas: int, cpus_per_worker: float, ray_resources: Mapping[str, float]
) -> ResourceRequest:
    """What `rolloutWorkers` asks of the Ray cluster."""
    fields = {RAY_CPU: "cpusPerWorker"} | {name: f"rayResources.{name}" for name in ray_resources}
    amounts = {RAY_CPU: cpus_per_worker, **ray_resources}
    return ResourceRequest(
        "rollout worker", "rolloutWorkers", "replicas", replicas, amounts, fields
    )


def replay_shards_request(replay_shards: int, cpus_per_replay_shard: float) -> ResourceRequest:
    """What AsyncReplay's replay-shard actors ask of the Ray cluster."""
    return ResourceRequest(
        "replay shard",
        "trainer.optimizerConfig",
        "replayShards",
        replay_shards,
        {RAY_CPU: cpus_per_replay_shard},
        {RAY_CPU: "cpusPerReplayShard"},
    )


def check_resources(
    requests: Iterable[ResourceRequest], nodes: list[dict[str, float]] | None = None
) -> None:
    """Fail fast instead of waiting forever for resources the cluster will never have: an actor
    needing more of a resource than any live node has (or a custom resource no node advertises),
    no node with all that one actor needs, or more of a resource in all than the cluster has.

    Raises ResourceError naming the manifest fields. Only live nodes count: a node that is still
    starting (a pod Pending on Kubernetes) is not seen. `nodes` (each node's Ray resources)
    replaces the live nodes: the nodes a cluster will have at most, say."""
    if nodes is None:
        import ray

        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    requests = [request for request in requests if request.count > 0]
    for request in requests:
        _check_one_actor_fits(request, nodes)
    totals: dict[str, list[ResourceRequest]] = {}
    for request in requests:
        for name, amount in request.amounts.items():
            if amount > 0:
                totals.setdefault(name, []).append(request)
    for name, asking in totals.items():
        wanted = sum(request.count * request.amounts[name] for request in asking)
        have = sum(node.get(name, 0.0) for node in nodes)
        if wanted > have + 1e-9:  # sums of fractions such as 0.1 are not exact in binary
            terms = " + ".join(
                f"{r.section}: {r.count} {r.count_field} x {r.amounts[name]:g} {_unit(name)}"
                for r in asking
            )
            knobs = [f"{r.section}.{f}" for r in asking for f in (r.count_field, _field(r, name))]
            fractions = " (fractions such as 0.5 are allowed)" if name == RAY_CPU else ""
            raise ResourceError(
                f"{terms} = {wanted:g} {_unit(name)} requested but the Ray cluster has "
                f"{have:g}; lower {', '.join(knobs[:-1])} or {knobs[-1]}{fractions}"
            )


def _check_one_actor_fits(request: ResourceRequest, nodes: list[dict[str, float]]) -> None:
    needs = {name: amount for name, amount in request.amounts.items() if amount > 0}
    for name, amount in needs.items():
        where = f"{request.section}.{_field(request, name)}"
        largest = max((node.get(name, 0.0) for node in nodes), default=0.0)
        if largest == 0 and name not in RAY_OWN_RESOURCES:
            advertised = ", ".join(sorted(_custom_resources(nodes))) or "none"
            raise ResourceError(
                f"{where}={amount:g} but no live Ray node advertises {name!r} (custom resources "
                f"advertised: {advertised}): no {request.what} could ever be placed; start nodes "
                f"that advertise {name!r} (an RLJob's spot worker groups advertise 'spot') or "
                "remove it"
            )
        if amount > largest:
            raise ResourceError(
                f"{where}={amount:g} but the largest Ray node has {largest:g} {_unit(name)}: no "
                f"{request.what} could ever be placed; lower {_field(request, name)}"
            )
    if not any(all(node.get(n, 0.0) >= a for n, a in needs.items()) for node in nodes):
        wants = ", ".join(f"{request.section}.{_field(request, n)}={a:g}" for n, a in needs.items())
        raise ResourceError(
            f"no Ray node has all that one {request.what} needs at once ({wants}): none could "
            "ever be placed"
        )


def _custom_resources(nodes: list[dict[str, float]]) -> set[str]:
    # Ray's own per-node names hold a colon ("node:10.0.0.5", "accelerator_type:A100").
    return {
        name for node in nodes for name in node if name not in RAY_OWN_RESOURCES and ":" not in name
    }


def _field(request: ResourceRequest, name: str) -> str:
    return request.amount_fields.get(name, name)


def _unit(name: str) -> str:
    return f"{name}s" if name in (RAY_CPU, RAY_GPU) else name
