"""What a job cost, computed as OpenCost computes it: pure functions of the job's pods, the nodes
they run on and a price table.

Each poll, every pod of the job that runs on a node is charged its share of that node (the larger
of its CPU, memory and GPU requests over the node's allocatable, at most the whole node) times the
node's hourly price times the hours since the last poll. A node's price depends on its capacity
type (spot or on-demand, read from the labels each cloud puts on its nodes) and on what the price
table says of its pool or instance type. Pending pods cost nothing: they hold no node.

`tally_step` adds one poll interval to a `CostTally`; it reads no clock, so the caller decides the
interval and the same inputs always give the same tally. A pod that has held its node for less
than the interval (it was scheduled since the last poll) is charged only that long. The status
module keeps the tally in the RLJob's status.cost (`status.cost`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

from kuberl_operator.constants import GPU_RESOURCE
from kuberl_operator.spec.formats import is_qualified_key

CapacityType = Literal["spot", "on-demand"]
SPOT: CapacityType = "spot"
ON_DEMAND: CapacityType = "on-demand"
PodRole = Literal["head", "worker"]

# The price table's keys for each capacity type, as the chart's values spell them.
CAPACITY_KEYS: dict[str, CapacityType] = {"onDemand": ON_DEMAND, "spot": SPOT}

POOL_LABEL = "kuberl.io/pool"
"""The node label naming a node's pool in the price table, unless the table names another."""
DEFAULT_POOL = "default"
"""The pool whose prices apply to every node no other entry of the price table prices."""

# The chart's default price table (values.yaml, operator.settings.cost, which a test holds equal):
# list prices of AWS us-east-1 and GCP us-central1 when written, spot prices a typical recent
# figure. Spot prices move daily: a cluster should state its own.
DEFAULT_PRICES: dict[str, Any] = {
    "poolLabel": POOL_LABEL,
    "pools": {
        DEFAULT_POOL: {"onDemand": 0.2, "spot": 0.08},
        "gpu": {"onDemand": 1.0, "spot": 0.4},
    },
    "instanceTypes": {
        "m6i.xlarge": {"onDemand": 0.192, "spot": 0.07},
        "m6i.2xlarge": {"onDemand": 0.384, "spot": 0.14},
        "c6i.2xlarge": {"onDemand": 0.34, "spot": 0.13},
        "g5.xlarge": {"onDemand": 1.006, "spot": 0.4},
        "e2-standard-4": {"onDemand": 0.134, "spot": 0.04},
        "n2-standard-8": {"onDemand": 0.388, "spot": 0.095},
        "g2-standard-8": {"onDemand": 0.854, "spot": 0.34},
    },
}

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")

# The label each cloud marks its spot (preemptible) nodes with, and its value there. They are the
# spot presets the builders place rollout workers with, plus GKE's older preemptible VMs; a node
# none of them marks (EKS's ON_DEMAND, AKS's regular, Karpenter's on-demand) is on-demand.
SPOT_LABELS: dict[str, str] = {
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "kubernetes.azure.com/scalesetpriority": "spot",
}

# Kubernetes' quantity grammar (resource.Quantity) with its groups named. Unlike the CRD's pattern
# it takes integer exponents only, as the API server's parser does.
QUANTITY = re.compile(
    r"\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]+)?"
)
BINARY_SUFFIXES = {
    suffix: 2 ** (10 * power)
    for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)
}
DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}


Quantity = str | int | Fraction
"""A quantity as Kubernetes writes it ("500m", "4Gi"), or as a number already."""


def parse_quantity(value: Quantity, where: str = "quantity") -> Fraction:
    """A Kubernetes quantity ("500m", "2", "4Gi", "1e3", "100M") as an exact number. Raises
    ValueError naming `where` for anything else."""
    if isinstance(value, int | Fraction) and not isinstance(value, bool) and value >= 0:
        return Fraction(value)
    match = QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            f"{where}: {value!r} is not a Kubernetes quantity: write a number with an optional "
            "suffix, such as 500m, 2, 512Mi or 8Gi"
        )
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in BINARY_SUFFIXES:
        return number * BINARY_SUFFIXES[suffix]
    exponent = DECIMAL_SUFFIXES[suffix] if suffix in DECIMAL_SUFFIXES else int(suffix[1:])
    return number * Fraction(10) ** exponent


def capacity_type(node_labels: Mapping[str, str]) -> CapacityType:
    """Whether a node is spot (preemptible) or on-demand, from the labels GKE, Karpenter, EKS
    managed node groups and AKS put on their nodes; a node none marks spot is on-demand."""
    marked = any(node_labels.get(label) == value for label, value in SPOT_LABELS.items())
    return SPOT if marked else ON_DEMAND


def instance_type(node_labels: Mapping[str, str]) -> str | None:
    """The node's instance (machine) type, from the well-known label or its beta predecessor."""
    return next((node_labels[k] for k in INSTANCE_TYPE_LABELS if k in node_labels), None)


def pod_share(
    pod_requests: Mapping[str, Quantity], node_allocatable: Mapping[str, Quantity]
) -> float:
    """The share of its node a pod is charged, as OpenCost charges it: the largest of its CPU,
    memory and GPU requests over the node's allocatable, at most 1. A resource the node has none
    of (GPUs on a CPU node) is no share: the pod could not request it there."""
    shares = [Fraction(0)]
    for resource in ("cpu", "memory", GPU_RESOURCE):
        allocatable = parse_quantity(node_allocatable.get(resource, 0), f"allocatable.{resource}")
        if allocatable > 0:
            requested = parse_quantity(pod_requests.get(resource, 0), f"requests.{resource}")
            shares.append(requested / allocatable)
    return float(min(max(shares), 1))


@dataclass(frozen=True)
class PriceTable:
    """Dollars per node-hour by capacity type: for node pools (named by pool_label on the node)
    and for instance types, with the pool `default` pricing every other node.

    A node's price for its capacity type is the first of these that gives one: its pool's entry
    (a pool label is the cluster's own statement, e.g. of reserved or discounted capacity, so it
    wins), its instance type's entry, the default pool's entry.
    """

    pools: Mapping[str, Mapping[CapacityType, float]]
    instance_types: Mapping[str, Mapping[CapacityType, float]] = field(default_factory=dict)
    pool_label: str = POOL_LABEL

    def hourly_price(self, node_labels: Mapping[str, str], capacity: CapacityType) -> float:
        """Dollars per hour of the node these labels describe, at this capacity type."""
        entries = (
            self.pools.get(node_labels.get(self.pool_label, "")),
            self.instance_types.get(instance_type(node_labels) or ""),
            self.pools[DEFAULT_POOL],
        )
        return next(entry[capacity] for entry in entries if entry and capacity in entry)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> PriceTable:
        """The table from the chart's values: `{"poolLabel": ..., "pools": {"default": {"onDemand":
        0.2, "spot": 0.08}, ...}, "instanceTypes": {"m6i.xlarge": {"onDemand": 0.192, ...}}}`.
        Raises ValueError naming the key path and the reason for anything else."""
        values = _mapping(values, "cost")
        unknown = sorted(set(values) - {"poolLabel", "pools", "instanceTypes"})
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown key: write poolLabel, pools or instanceTypes")
        pool_label = values.get("poolLabel", POOL_LABEL)
        if not isinstance(pool_label, str) or not is_qualified_key(pool_label):
            raise ValueError(
                f"poolLabel: {pool_label!r} is not a label key: write one like kuberl.io/pool"
            )
        pools = _entries(values.get("pools", {}), "pools")
        default = pools.get(DEFAULT_POOL, {})
        missing = [key for key, capacity in CAPACITY_KEYS.items() if capacity not in default]
        if missing:
            raise ValueError(
                f"pools.{DEFAULT_POOL}.{missing[0]}: required: it prices every node that no other "
                "entry prices"
            )
        instance_types = _entries(values.get("instanceTypes", {}), "instanceTypes")
        return cls(pools=pools, instance_types=instance_types, pool_label=pool_label)


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    """The value, which must be a mapping (a YAML or JSON object)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{path}: {value!r} is not a mapping")
    return value


def _entries(values: object, path: str) -> dict[str, dict[CapacityType, float]]:
    """`{name: {"onDemand": price, "spot": price}}` checked, keyed by capacity type."""
    entries = {}
    for name, prices in _mapping(values, path).items():
        entry: dict[CapacityType, float] = {}
        for key, price in _mapping(prices, f"{path}.{name}").items():
            where = f"{path}.{name}.{key}"
            if key not in CAPACITY_KEYS:
                raise ValueError(f"{where}: unknown capacity type: write onDemand or spot")
            entry[CAPACITY_KEYS[key]] = _price(price, where)
        entries[str(name)] = entry
    return entries


def _price(price: object, where: str) -> float:
    """Dollars per hour: a finite number >= 0."""
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price):
        raise ValueError(f"{where}: {price!r} is not a number: write dollars per hour, like 0.192")
    if price < 0:
        raise ValueError(f"{where}: {price} is negative: write dollars per hour >= 0")
    return float(price)


@dataclass(frozen=True)
class PodOnNode:
    """One pod of a job, scheduled on a node: what the cost model needs of both."""

    role: PodRole
    requests: Mapping[str, Quantity]
    node_labels: Mapping[str, str]
    node_allocatable: Mapping[str, Quantity]
    held_seconds: float | None = None
    """How long the pod has held its node (since it was scheduled); None when unknown. A poll
    interval longer than this charges the pod only this long."""


@dataclass(frozen=True)
class CostTally:
    """What a job has cost so far."""

    spot_dollars: float = 0.0
    on_demand_dollars: float = 0.0
    on_demand_equivalent_dollars: float = 0.0
    """What the same pod-hours would have cost on on-demand nodes of the same types: the saving
    spot brought is this less `dollars`."""
    gpu_hours: float = 0.0
    """GPUs requested times hours."""
    worker_hours: float = 0.0
    """Rollout worker pods times hours."""
    dollars_at_target: float | None = None
    """`dollars` at the first poll that saw the job's target reached; None before."""

    @property
    def dollars(self) -> float:
        """Dollars so far, spot and on-demand together."""
        return self.spot_dollars + self.on_demand_dollars


def tally_step(
    tally: CostTally,
    pods_on_nodes: Iterable[PodOnNode],
    prices: PriceTable,
    seconds: float,
    target_reached: bool,
) -> CostTally:
    """The tally after one poll interval of `seconds` in which these pods held their nodes.
    `target_reached` says whether the job has reached its target by the end of the interval: the
    first time it does, the tally keeps its dollars then (this interval included, as it was spent
    reaching the target)."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds: {seconds} is not a duration: write seconds >= 0")
    spot = on_demand = equivalent = gpu_hours = worker_hours = 0.0
    for pod in pods_on_nodes:
        held = seconds if pod.held_seconds is None else min(seconds, max(pod.held_seconds, 0.0))
        hours = held / 3600
        share = pod_share(pod.requests, pod.node_allocatable)
        capacity = capacity_type(pod.node_labels)
        dollars = share * prices.hourly_price(pod.node_labels, capacity) * hours
        if capacity == SPOT:
            spot += dollars
        else:
            on_demand += dollars
        equivalent += share * prices.hourly_price(pod.node_labels, ON_DEMAND) * hours
        gpus = parse_quantity(pod.requests.get(GPU_RESOURCE, 0), f"requests.{GPU_RESOURCE}")
        gpu_hours += float(gpus) * hours
        worker_hours += hours if pod.role == "worker" else 0.0
    after = CostTally(
        spot_dollars=tally.spot_dollars + spot,
        on_demand_dollars=tally.on_demand_dollars + on_demand,
        on_demand_equivalent_dollars=tally.on_demand_equivalent_dollars + equivalent,
        gpu_hours=tally.gpu_hours + gpu_hours,
        worker_hours=tally.worker_hours + worker_hours,
        dollars_at_target=tally.dollars_at_target,
    )
    if target_reached and after.dollars_at_target is None:
        return replace(after, dollars_at_target=after.dollars)
    return after


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """What a pod requests of its node, as the scheduler counts it: its containers' requests
    added up, or an init container's where that is larger (init containers run one at a time,
    before the others)."""
    spec = pod.get("spec") or {}

    def requests_of(container: Mapping[str, Any]) -> dict[str, Fraction]:
        asked = (container.get("resources") or {}).get("requests") or {}
        name = container.get("name", "?")
        return {
            resource: parse_quantity(value, f"{name}.resources.requests.{resource}")
            for resource, value in asked.items()
        }

    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for resource, amount in requests_of(container).items():
            total[resource] = total.get(resource, Fraction(0)) + amount
    for container in spec.get("initContainers") or []:
        for resource, amount in requests_of(container).items():
            total[resource] = max(total.get(resource, Fraction(0)), amount)
    return total


def pod_on_node(
    pod: Mapping[str, Any], node: Mapping[str, Any], role: PodRole, held_seconds: float | None
) -> PodOnNode:
    """A pod and the node object it is scheduled on, as the cost model reads them."""
    return PodOnNode(
        role=role,
        requests=pod_requests(pod),
        node_labels=(node.get("metadata") or {}).get("labels") or {},
        node_allocatable=(node.get("status") or {}).get("allocatable") or {},
        held_seconds=held_seconds,
    )
