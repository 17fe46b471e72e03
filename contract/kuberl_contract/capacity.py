"""What a job's Ray cluster will offer at most, as the operator tells the driver.

The driver can start before its rollout workers' pods have joined the Ray cluster (the head is
Ready, spot worker pods are still Pending). With the cluster's capacity (every node group's Ray
resources and its most replicas) it tells a request that no node will ever satisfy, which makes
the job invalid, from one that waits for pods still starting, which it waits for, bounded
(kuberl_trainer.job.resource_wait).

Standard library only: the operator builds the value (kuberl_operator.builders.capacity) and sets
it as RAY_CAPACITY_ENV on the head's container, where the driver reads it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

RAY_CPU = "CPU"
"""Ray's own resource name for CPUs (what `ray start --num-cpus` advertises)."""
RAY_GPU = "GPU"
"""Ray's own resource name for GPUs (what `ray start --num-gpus` advertises)."""
RAY_OWN_RESOURCES = frozenset({RAY_CPU, RAY_GPU, "memory", "object_store_memory"})
"""Resources every Ray node advertises by itself: never a custom resource's name."""

RAY_CAPACITY_ENV = "KUBERL_RAY_CAPACITY"
"""The head container's environment variable holding the cluster's `Capacity` as JSON."""


@dataclass(frozen=True)
class NodeGroup:
    """Ray nodes alike: the head, or the pods of one worker group."""

    resources: dict[str, float]
    """The Ray resources each node advertises (CPU, GPU, custom ones such as spot)."""
    max_replicas: int
    """The most nodes of the group there will be at once."""


@dataclass(frozen=True)
class Capacity:
    """Every node group of a Ray cluster, and how long the driver waits for nodes to join."""

    groups: tuple[NodeGroup, ...]
    wait_seconds: float
    """How long the driver waits at start for the nodes its actors need to join, before it fails
    the attempt (which the operator then restarts with backoff)."""

    def nodes(self) -> list[dict[str, float]]:
        """The nodes of the cluster at its largest, each as its Ray resources."""
        return [dict(group.resources) for group in self.groups for _ in range(group.max_replicas)]

    def to_json(self) -> str:
        groups = [{"resources": g.resources, "maxReplicas": g.max_replicas} for g in self.groups]
        return json.dumps({"groups": groups, "waitSeconds": self.wait_seconds}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Capacity:
        """Raises ValueError saying what is wrong with `text`."""
        try:
            document = json.loads(text)
            groups = tuple(
                NodeGroup(
                    {str(name): float(amount) for name, amount in group["resources"].items()},
                    int(group["maxReplicas"]),
                )
                for group in document["groups"]
            )
            wait = float(document["waitSeconds"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(
                f"{RAY_CAPACITY_ENV} is not a Ray cluster capacity ({exc!r}): {text[:200]!r}"
            ) from None
        if not math.isfinite(wait) or wait < 0 or any(g.max_replicas < 0 for g in groups):
            raise ValueError(f"{RAY_CAPACITY_ENV} has a negative count or wait: {text[:200]!r}")
        return cls(groups, wait)


def capacity_from_env(environ: Mapping[str, str]) -> Capacity | None:
    """The capacity the operator gave the driver; None outside an operator's Ray cluster."""
    text = environ.get(RAY_CAPACITY_ENV, "").strip()
    return Capacity.from_json(text) if text else None
