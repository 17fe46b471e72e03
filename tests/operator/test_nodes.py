"""The nodes jobs' pods run on, read for their cost against the emulated Kubernetes API: one GET
per node per cache period, shared by every job, only labels, allocatable and taints kept, and a
node that cannot be read skipped."""

from __future__ import annotations

import asyncio
import logging

from kuberl_operator.kube import Kube, load_kube_config
from kuberl_operator.nodes import NODE_CACHE_SECONDS, NodeCache

LABELS = {"node.kubernetes.io/instance-type": "m6i.xlarge", "karpenter.sh/capacity-type": "spot"}
ALLOCATABLE = {"cpu": "4", "memory": "16Gi"}
TAINTS = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
NODE = {
    "metadata": {"name": "node-a", "labels": LABELS, "annotations": {"big": "x" * 1000}},
    "spec": {"providerID": "aws:///us-east-1a/i-0123", "taints": TAINTS},
    "status": {"allocatable": ALLOCATABLE, "images": [{"names": ["ray"]}] * 50},
}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_node_is_read_once_per_cache_period_and_one_gone_is_skipped(
    kube_api, tmp_path, caplog
):
    kube_api.create("/api/v1/nodes", NODE)
    clock = Clock()

    async def scenario() -> list[dict]:
        kube = Kube(load_kube_config(kube_api.kubeconfig(tmp_path / "config")))
        try:
            cache = NodeCache(kube, clock=clock)
            seen = [await cache.nodes(["node-a", "node-a", "gone"])]
            clock.now += NODE_CACHE_SECONDS / 2  # a later poll, another job: no request
            seen.append(await cache.nodes(["node-a"]))
            clock.now += NODE_CACHE_SECONDS  # expired: read again
            seen.append(await cache.nodes(["node-a"]))
            return seen
        finally:
            await kube.close()

    with caplog.at_level(logging.INFO, logger="kuberl_operator.nodes"):
        seen = asyncio.run(scenario())

    kept = {
        "metadata": {"labels": LABELS},
        "spec": {"taints": TAINTS},
        "status": {"allocatable": ALLOCATABLE},
    }
    assert seen == [{"node-a": kept}] * 3
    reads = [r.path for r in kube_api.api.log if r.path.startswith("/api/v1/nodes/")]
    assert reads == ["/api/v1/nodes/gone", "/api/v1/nodes/node-a", "/api/v1/nodes/node-a"]
    assert "node gone is gone" in caplog.text
