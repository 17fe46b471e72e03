"""Ray's draining nodes: which nodes are about to go, and marking them so.

A node drains when Ray's control service was told it will go (DrainNode, with a deadline): Ray's
autoscaler does so before it ends a node, and the operator does when Kubernetes says a pod is
about to go (kuberl_contract.drain). Ray then places nothing new there, and ends the node once
it is idle; the worker pool gives the rollout workers there no more calls and starts their
replacements elsewhere. The head is never drained (idle but for the driver, it would end at
once): the operator leaves the driver a notice in Ray's key-value store instead, and the driver
checkpoints at once when its node drains or such a notice comes (`OwnNodeDrain`).

Ray's own libraries read the same state (Ray Train's preemption watcher, Serve's proxies); it is
an internal API of Ray, used here in this one module.

    python -m kuberl_trainer.rollouts.node_drain --deadline-seconds=30 --reason=why 10.0.0.7
    python -m kuberl_trainer.rollouts.node_drain --deadline-seconds=30 --reason=why --checkpoint-now
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kuberl_contract.drain import CHECKPOINT_NOW_KEY

log = logging.getLogger(__name__)


def draining_nodes() -> dict[str, float]:
    """Node id (hex) → the deadline of its drain (Unix seconds; inf where none was given), for
    every node of the connected Ray cluster that is draining."""
    import ray

    nodes = ray._private.state.state.get_draining_nodes()
    return {
        node: deadline_ms / 1000 if deadline_ms else math.inf for node, deadline_ms in nodes.items()
    }


def actor_node(handle: Any) -> str | None:
    """The id (hex) of the node where the actor `handle` runs; None while it is not placed."""
    import ray

    info = ray._private.state.actors(handle._actor_id.hex())
    node = (info.get("Address") or {}).get("NodeID")
    return node if node and node.strip("f") else None  # all "f": Ray's nil id, not placed


class DrainWatch:
    """The nodes of the rollout workers, and which of them drain. Ray is asked at most every
    LOOK_S seconds (one call to its control service), and each worker's node once."""

    LOOK_S = 1.0

    def __init__(
        self,
        nodes_draining: Callable[[], Mapping[str, float]] = draining_nodes,
        node_of: Callable[[Any], str | None] = actor_node,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._nodes_draining, self._node_of, self._clock = nodes_draining, node_of, clock
        self._handles: dict[int, Any] = {}  # index → the actor whose node is not known yet
        self._nodes: dict[int, str] = {}  # index → its actor's node
        self._next_look = 0.0

    def placed(self, index: int, handle: Any) -> None:
        """Worker `index` is now the actor `handle` (its node is looked up at the next look)."""
        self._nodes.pop(index, None)
        self._handles[index] = handle

    def forget(self, index: int) -> None:
        self._nodes.pop(index, None)
        self._handles.pop(index, None)

    def on_draining_nodes(self, indices: Iterable[int]) -> list[int]:
        """Those of `indices` whose node drains; none between looks."""
        now = self._clock()
        if now < self._next_look:
            return []
        self._next_look = now + self.LOOK_S
        for index, handle in list(self._handles.items()):
            node = self._node_of(handle)
            if node is not None:
                self._nodes[index] = node
                del self._handles[index]
        draining = self._nodes_draining()
        return [index for index in indices if draining and self._nodes.get(index) in draining]


def own_node() -> str | None:
    """The id (hex) of this process's Ray node; None where Ray is not running here (a job
    without remote workers never imports it: so it stays)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def head_notice() -> bytes | None:
    """What the operator left under CHECKPOINT_NOW_KEY (the head is about to go), if anything."""
    from ray.experimental import internal_kv

    return internal_kv._internal_kv_get(CHECKPOINT_NOW_KEY)


class OwnNodeDrain:
    """Whether this process's node (the driver's: the head, on a cluster) is about to go: it
    drains in Ray, or the operator left a notice for the head (kuberl_contract.drain). Ray is
    asked at most every DrainWatch.LOOK_S, and not at all where it is not running (a job
    without remote workers never starts it)."""

    def __init__(
        self,
        nodes_draining: Callable[[], Mapping[str, float]] = draining_nodes,
        node: Callable[[], str | None] = own_node,
        notice: Callable[[], bytes | None] = head_notice,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._nodes_draining, self._node, self._notice = nodes_draining, node, notice
        self._clock = clock
        self._next_look = 0.0
        self._drained = False  # the node's drain was reported already
        self._notices: set[bytes] = set()  # and these notices

    def begun(self) -> float | None:
        """The deadline (Unix seconds, inf where none) the first time this node is seen draining,
        or a notice is seen; None otherwise."""
        now = self._clock()
        if now < self._next_look:
            return None
        self._next_look = now + DrainWatch.LOOK_S
        node = self._node()
        if node is None:
            return None
        notice = self._notice()
        if notice is not None and notice not in self._notices:
            self._notices.add(notice)
            return float(json.loads(notice)["deadline"])
        deadline = None if self._drained else self._nodes_draining().get(node)
        self._drained = self._drained or deadline is not None
        return deadline


def until(deadline: float) -> str:
    """A drain's deadline (Unix seconds) as words."""
    if math.isinf(deadline):
        return "no deadline given"
    return f"deadline in {max(0.0, deadline - time.time()):.0f} s"


def drain(node_ips: Sequence[str], deadline_s: int, reason: str) -> list[str]:
    """Mark the live Ray nodes at `node_ips` as draining for preemption, to be gone within
    `deadline_s` seconds; returns the ids of the nodes marked. Addresses no live node has are
    logged and skipped (the pod went, or its node never joined)."""
    import ray
    from ray.core.generated import autoscaler_pb2

    by_ip = {
        node["NodeManagerAddress"]: node["NodeID"] for node in ray.nodes() if node.get("Alive")
    }
    deadline_ms = int((time.time() + deadline_s) * 1000)
    gcs = ray._private.worker.global_worker.gcs_client
    marked = []
    for ip in node_ips:
        node = by_ip.get(ip)
        if node is None:
            log.warning("no live Ray node at %s: nothing to drain there", ip)
            continue
        accepted, why_not = gcs.drain_node(
            node,
            autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            reason,
            deadline_ms,
        )
        if accepted:
            marked.append(node)
            log.info("Ray node %s (%s) drains: %s", node, ip, reason)
        else:
            log.warning("Ray refused to drain node %s (%s): %s", node, ip, why_not)
    return marked


def checkpoint_now(deadline_s: int, reason: str) -> None:
    """Tell the driver its head is about to go (CHECKPOINT_NOW_KEY): it checkpoints at once."""
    from ray.experimental import internal_kv

    notice = {"deadline": time.time() + deadline_s, "reason": reason}
    internal_kv._internal_kv_put(CHECKPOINT_NOW_KEY, json.dumps(notice), overwrite=True)
    log.info("the driver is told its head goes within %d s: %s", deadline_s, reason)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Drain the Ray nodes at these addresses.")
    parser.add_argument("node_ips", nargs="*", metavar="IP")
    parser.add_argument("--deadline-seconds", type=int, required=True)
    parser.add_argument("--reason", required=True)
    parser.add_argument(
        "--checkpoint-now", action="store_true", help="tell the driver its head is about to go"
    )
    args = parser.parse_args(argv)
    if bool(args.node_ips) == args.checkpoint_now:
        parser.error("give the addresses of nodes to drain, or --checkpoint-now (not both)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import ray

    ray.init(logging_level=logging.WARNING)  # the cluster this runs on, as a Ray job
    try:
        if args.checkpoint_now:
            checkpoint_now(args.deadline_seconds, args.reason)
        else:
            marked = drain(args.node_ips, args.deadline_seconds, args.reason)
            print(f"drained {len(marked)} of {len(args.node_ips)} node(s)")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
