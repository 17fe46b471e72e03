"""Draining the Ray nodes of pods about to go, as the operator asks and the trainer does.

Kubernetes says a pod is about to go (its DisruptionTarget condition, a node tainted for deletion
or a cloud's interruption notice) before Ray notices anything. The operator, which sees those
signals, submits a Ray job on the job's cluster whose entrypoint (`drain_entrypoint`) runs the
trainer's DRAIN_MODULE there: it marks the pods' Ray nodes as draining in Ray's control service
(DrainNode, what Ray's own autoscaler does before it ends a node), with the deadline by which the
pods will be gone. The driver reads Ray's draining nodes: it gives the rollout workers there no
more calls.

The head's own node is never drained that way: Ray ends a drained node as soon as it is idle, and
a driver keeps no node busy, so the whole cluster would go at once. For the head pod the
entrypoint (`checkpoint_now_entrypoint`) instead leaves CHECKPOINT_NOW_KEY in Ray's key-value
store, which the driver reads: it checkpoints at once, before the deadline, and trains on until
its SIGTERM.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Sequence

DRAIN_MODULE = "kuberl_trainer.rollouts.node_drain"
DRAIN_SUBMISSION_PREFIX = "kuberl-drain-"
"""The Ray submission ids of drain jobs begin so: they are never a driver."""
CHECKPOINT_NOW_KEY = "kuberl/checkpoint-now"
"""Ray's internal key-value store: the head is about to go; its value, the deadline (Unix
seconds) and why, as JSON."""


def checkpoint_now_entrypoint(deadline_s: int, reason: str) -> str:
    """The shell command that tells the driver its head is about to go, `deadline_s` seconds
    from now, `reason` saying why."""
    return _command(["--checkpoint-now"], deadline_s, reason)


def drain_entrypoint(node_ips: Sequence[str], deadline_s: int, reason: str) -> str:
    """The shell command that drains the Ray nodes at `node_ips` (the pods' IPs, each a node's
    address in Ray) with a deadline `deadline_s` seconds away, `reason` saying why. Refuses
    anything but IP addresses and a deadline of 0 or more, so nothing else reaches the shell."""
    if not node_ips:
        raise ValueError("node_ips: name at least one node to drain")
    for ip in node_ips:
        ipaddress.ip_address(ip)  # ValueError names the bad address
    return _command(list(node_ips), deadline_s, reason)


def _command(arguments: list[str], deadline_s: int, reason: str) -> str:
    if deadline_s < 0:
        raise ValueError(f"deadline_s: {deadline_s}; 0 or more seconds")
    options = [f"--deadline-seconds={int(deadline_s)}", f"--reason={shlex.quote(reason)}"]
    return " ".join(["python", "-m", DRAIN_MODULE, *options, *arguments])
