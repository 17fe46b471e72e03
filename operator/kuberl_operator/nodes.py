"""The nodes jobs' pods run on, read for the cost model (`cost.pod_on_node`) and for the taints
that say a node is about to go (`status.disruption`): one GET per node, shared by every job and
kept for NODE_CACHE_SECONDS.

A node's capacity type and instance type are fixed for its life, but its taints change at the
moment it is to be removed (a cluster autoscaler, Karpenter or a cloud's interruption handler
taints it with a notice of seconds to minutes), so a node is read again once NODE_CACHE_SECONDS
(about two polls of the operator) have passed: a taint is seen within a poll or two. A cluster of
thousands of nodes and many jobs costs the API server one GET per node in use per
NODE_CACHE_SECONDS, never a list of every node. Only what is read is kept (labels, allocatable,
taints). A node that cannot be read (gone, forbidden, the API unreachable) is skipped with a log
line, and tried again after NODE_RETRY_SECONDS: its pods go uncounted meanwhile, and the reconcile
goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kuberl_operator.kube import Kube, KubeError, path

NODE_CACHE_SECONDS = 10.0
NODE_RETRY_SECONDS = 30.0

Object = dict[str, Any]
logger = logging.getLogger(__name__)


class NodeCache:
    """Nodes by name, read through one Kubernetes client."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self._clock = kube, clock
        self._nodes: dict[str, tuple[float, Object | None]] = {}  # name -> (expires, node)
        self._pruned = clock()

    async def nodes(self, names: Iterable[str]) -> dict[str, Object]:
        """The nodes of these names that could be read, by name."""
        found = {}
        for name in sorted(set(names)):
            node = await self._node(name)
            if node is not None:
                found[name] = node
        return found

    async def _node(self, name: str) -> Object | None:
        now = self._clock()
        cached = self._nodes.get(name)
        if cached is not None and now < cached[0]:
            return cached[1]
        try:
            node = await self.kube.get(path("v1", "nodes", name=name))
        except KubeError as exc:
            logger.warning("node %s cannot be read, its pods are not counted: %s", name, exc)
            node = None
        else:
            if node is None:
                logger.info("node %s is gone: its pods are not counted", name)
        kept = None if node is None else _kept_fields(node)
        expires = now + (NODE_CACHE_SECONDS if kept is not None else NODE_RETRY_SECONDS)
        self._nodes[name] = (expires, kept)
        self._prune(now)
        return kept

    def _prune(self, now: float) -> None:
        """Forget expired nodes (removed from the cluster, or no job's any more), at most once
        per NODE_CACHE_SECONDS, so that the cache never outgrows the nodes in use."""
        if now - self._pruned < NODE_CACHE_SECONDS:
            return
        self._nodes = {name: kept for name, kept in self._nodes.items() if now < kept[0]}
        self._pruned = now


def _kept_fields(node: Object) -> Object:
    """What is read of a node: its labels and allocatable resources (the cost model's), and its
    taints (whether it is about to go)."""
    return {
        "metadata": {"labels": (node.get("metadata") or {}).get("labels") or {}},
        "spec": {"taints": (node.get("spec") or {}).get("taints") or []},
        "status": {"allocatable": (node.get("status") or {}).get("allocatable") or {}},
    }
