"""The cost model: which nodes are spot, what share of a node a pod is charged, what a job's polls
add up to (checked against hand computations), and the price table's errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kuberl_operator.cost import (
    ON_DEMAND,
    SPOT,
    CostTally,
    PodOnNode,
    PriceTable,
    capacity_type,
    parse_quantity,
    pod_on_node,
    pod_requests,
    pod_share,
    tally_step,
)
from kuberl_operator.settings import InvalidSettings, OperatorSettings

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"

PRICES = PriceTable.from_values(
    {
        "pools": {"default": {"onDemand": 0.2, "spot": 0.08}, "reserved": {"onDemand": 0.1}},
        "instanceTypes": {
            "m6i.xlarge": {"onDemand": 0.192, "spot": 0.07},
            "g5.xlarge": {"onDemand": 1.006},
        },
    }
)

# An m6i.xlarge as Kubernetes reports it, rounded for hand arithmetic.
M6I_ALLOCATABLE = {"cpu": "4", "memory": "16Gi", "pods": "58"}
ON_DEMAND_M6I = {INSTANCE_TYPE: "m6i.xlarge", KARPENTER_CAPACITY: "on-demand"}
SPOT_M6I = {INSTANCE_TYPE: "m6i.xlarge", KARPENTER_CAPACITY: "spot"}

HEAD = PodOnNode("head", {"cpu": "2", "memory": "4Gi"}, ON_DEMAND_M6I, M6I_ALLOCATABLE)
WORKER = PodOnNode("worker", {"cpu": "1", "memory": "2Gi"}, SPOT_M6I, M6I_ALLOCATABLE)


# --- Which nodes are spot ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"cloud.google.com/gke-spot": "true"}, SPOT),
        ({"cloud.google.com/gke-preemptible": "true"}, SPOT),
        ({"cloud.google.com/gke-nodepool": "default-pool"}, ON_DEMAND),
        ({KARPENTER_CAPACITY: "spot"}, SPOT),
        ({KARPENTER_CAPACITY: "on-demand"}, ON_DEMAND),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, SPOT),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, ON_DEMAND),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, SPOT),
        ({"kubernetes.azure.com/scalesetpriority": "regular"}, ON_DEMAND),
        ({}, ON_DEMAND),
    ],
)
def test_each_clouds_labels_say_whether_a_node_is_spot(labels, expected):
    assert capacity_type(labels) == expected


# --- Quantities and shares -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("2", 2),
        (3, 3),
        ("4Gi", 4 * 2**30),
        ("1.5Ki", 1536),
        ("1e3", 1000),
        ("2E-3", Fraction(2, 1000)),
        ("100M", 100 * 10**6),
        ("1E", 10**18),
        (".5", Fraction(1, 2)),
        ("250u", Fraction(250, 10**6)),
    ],
)
def test_quantities_parse_exactly(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["2 GiB", "-1", "1e1.5", "", "1/2", "lots", 1.5, True])
def test_a_bad_quantity_is_refused_naming_where_it_was(text):
    with pytest.raises(ValueError, match=r"^requests\.cpu: .* is not a Kubernetes quantity"):
        pod_share({"cpu": text}, M6I_ALLOCATABLE)


def test_a_cpu_bound_pod_is_charged_its_cpu_share():
    assert pod_share({"cpu": "2", "memory": "1Gi"}, M6I_ALLOCATABLE) == 0.5


def test_a_memory_bound_pod_is_charged_its_memory_share():
    assert pod_share({"cpu": "500m", "memory": "12Gi"}, M6I_ALLOCATABLE) == 0.75


def test_a_gpu_bound_pod_is_charged_its_gpu_share_where_the_node_has_gpus():
    gpu_node = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "4"}
    assert pod_share({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}, gpu_node) == 0.5
    # 4 of 32 CPUs and 16 of 128 Gi are an eighth each; the GPUs make it half.
    assert pod_share({"cpu": "4", "memory": "16Gi"}, gpu_node) == 0.125


def test_a_share_is_at_most_the_whole_node():
    assert pod_share({"cpu": "8", "memory": "1Gi"}, M6I_ALLOCATABLE) == 1


def test_a_pod_without_requests_is_charged_nothing():
    assert pod_share({}, M6I_ALLOCATABLE) == 0


# --- Prices --------------------------------------------------------------------------------------


def test_a_node_is_priced_by_its_pool_then_its_instance_type_then_the_default_pool():
    reserved_m6i = {**ON_DEMAND_M6I, "kuberl.io/pool": "reserved"}
    assert PRICES.hourly_price(reserved_m6i, ON_DEMAND) == 0.1
    assert PRICES.hourly_price(ON_DEMAND_M6I, ON_DEMAND) == 0.192
    assert PRICES.hourly_price({INSTANCE_TYPE: "m5.large"}, ON_DEMAND) == 0.2
    # An entry without the node's capacity type leaves it to the next one.
    assert PRICES.hourly_price({**SPOT_M6I, "kuberl.io/pool": "reserved"}, SPOT) == 0.07
    assert PRICES.hourly_price({INSTANCE_TYPE: "g5.xlarge"}, SPOT) == 0.08


def test_the_beta_instance_type_label_still_names_the_type():
    assert PRICES.hourly_price({"beta.kubernetes.io/instance-type": "m6i.xlarge"}, SPOT) == 0.07


def test_the_pool_label_is_the_tables_to_choose():
    table = PriceTable.from_values(
        {
            "poolLabel": "example.com/billing-pool",
            "pools": {"default": {"onDemand": 0.2, "spot": 0.08}, "cheap": {"onDemand": 0.05}},
        }
    )
    assert table.hourly_price({"example.com/billing-pool": "cheap"}, ON_DEMAND) == 0.05
    assert table.hourly_price({"kuberl.io/pool": "cheap"}, ON_DEMAND) == 0.2


DEFAULT_POOL = {"default": {"onDemand": 0.2, "spot": 0.08}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"pools": {**DEFAULT_POOL, "gpu": {"onDemand": -1.0}}},
            "pools.gpu.onDemand: -1.0 is negative",
        ),
        (
            {"pools": DEFAULT_POOL, "instanceTypes": {"m6i.xlarge": {"spot": "0.07"}}},
            "instanceTypes.m6i.xlarge.spot: '0.07' is not a number",
        ),
        ({"pools": {"default": {"onDemand": True, "spot": 0.1}}}, "pools.default.onDemand: True"),
        (
            {"pools": {"default": {"onDemand": float("nan"), "spot": 0.1}}},
            "pools.default.onDemand: nan is not a number",
        ),
        (
            {"pools": {"default": {"onDemand": 0.2, "spot": 0.08, "reserved": 0.1}}},
            "pools.default.reserved: unknown capacity type: write onDemand or spot",
        ),
        ({"pools": {"default": {"onDemand": 0.2}}}, "pools.default.spot: required"),
        ({"instanceTypes": {}}, "pools.default.onDemand: required"),
        ({"pools": [0.2, 0.08]}, "pools: .* is not a mapping"),
        ({"pools": {"default": 0.2}}, "pools.default: 0.2 is not a mapping"),
        ({"pools": DEFAULT_POOL, "gpuPools": {}}, "gpuPools: unknown key"),
        ({"pools": DEFAULT_POOL, "poolLabel": "a pool"}, "poolLabel: 'a pool' is not a label key"),
    ],
)
def test_a_bad_price_table_is_refused_naming_the_key_path_and_reason(values, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        PriceTable.from_values(values)


def test_the_operator_reads_its_prices_from_one_setting():
    default = OperatorSettings().price_table
    assert default.hourly_price(SPOT_M6I, SPOT) > 0

    told = OperatorSettings.from_env(
        {"KUBERL_COST": '{"pools": {"default": {"onDemand": 0.3, "spot": 0.1}}}'}
    )
    assert told.price_table.hourly_price(SPOT_M6I, SPOT) == 0.1

    bad = '{"pools": {"default": {"onDemand": 0.3, "spot": -0.1}}}'
    with pytest.raises(
        InvalidSettings, match=r"KUBERL_COST=.*pools\.default\.spot: -0\.1 is negative"
    ):
        OperatorSettings.from_env({"KUBERL_COST": bad})
    with pytest.raises(InvalidSettings, match=r"KUBERL_COST=.*not JSON"):
        OperatorSettings.from_env({"KUBERL_COST": "pools: {}"})


# --- A job's tally -------------------------------------------------------------------------------


def run_polls(targets_reached: list[bool], seconds: float) -> list[CostTally]:
    """The tally after each poll of a job with a head and 3 workers, HEAD's and WORKER's."""
    tallies, tally = [], CostTally()
    for reached in targets_reached:
        tally = tally_step(tally, [HEAD, WORKER, WORKER, WORKER], PRICES, seconds, reached)
        tallies.append(tally)
    return tallies


def test_a_job_with_an_on_demand_head_and_three_spot_workers_costs_what_the_hand_says():
    # Four polls half an hour apart: 2 hours.
    final = run_polls([False] * 4, 1800)[-1]

    head = 0.5 * 0.192 * 2  # 2 of 4 CPUs (4 of 16 Gi) of an on-demand m6i.xlarge for 2 h
    workers = 3 * 0.25 * 0.07 * 2  # each 1 of 4 CPUs (2 of 16 Gi) of a spot m6i.xlarge
    assert final.on_demand_dollars == pytest.approx(head)
    assert final.spot_dollars == pytest.approx(workers)
    assert final.dollars == pytest.approx(0.192 + 0.105)
    assert final.on_demand_equivalent_dollars == pytest.approx(head + 3 * 0.25 * 0.192 * 2)
    assert final.worker_hours == pytest.approx(3 * 2)
    assert final.gpu_hours == 0
    assert final.dollars_at_target is None


def test_dollars_at_target_are_fixed_at_the_first_poll_that_sees_it_reached():
    tallies = run_polls([False, False, True, True], 1800)

    per_poll = (0.5 * 0.192 + 3 * 0.25 * 0.07) / 2  # the hourly cost for half an hour
    assert [t.dollars_at_target for t in tallies[:2]] == [None, None]
    assert tallies[2].dollars_at_target == pytest.approx(3 * per_poll)
    assert tallies[3].dollars_at_target == tallies[2].dollars_at_target
    assert tallies[3].dollars == pytest.approx(4 * per_poll)


def test_a_gpu_pod_counts_its_gpu_hours():
    g5 = {INSTANCE_TYPE: "g5.xlarge", "cloud.google.com/gke-spot": "false"}
    learner = PodOnNode(
        "head",
        {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
        g5,
        {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
    )
    tally = tally_step(CostTally(), [learner], PRICES, 5400, target_reached=False)

    assert tally.gpu_hours == pytest.approx(1.5)
    assert tally.on_demand_dollars == pytest.approx(1 * 1.006 * 1.5)  # the GPU is the whole node
    assert tally.worker_hours == 0


def test_a_poll_without_pods_on_nodes_costs_nothing():
    before = run_polls([False], 1800)[-1]
    assert tally_step(before, [], PRICES, 1800, target_reached=False) == before


def test_a_negative_interval_is_refused():
    with pytest.raises(ValueError, match=r"^seconds: -5 is not a duration"):
        tally_step(CostTally(), [HEAD], PRICES, -5, target_reached=False)


def test_a_pod_scheduled_during_the_interval_is_charged_only_since():
    newcomer = PodOnNode(**{**WORKER.__dict__, "held_seconds": 900})
    tally = tally_step(CostTally(), [WORKER, newcomer], PRICES, 1800, target_reached=False)

    assert tally.spot_dollars == pytest.approx(0.25 * 0.07 * (0.5 + 0.25))
    assert tally.worker_hours == pytest.approx(0.75)


# --- Reading pods and nodes ----------------------------------------------------------------------


def test_a_pods_request_adds_its_containers_up_or_takes_a_larger_init_container():
    pod = {
        "spec": {
            "containers": [
                {"name": "ray", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}},
                {"name": "relay", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "initContainers": [{"name": "wait", "resources": {"requests": {"memory": "3Gi"}}}],
        }
    }
    assert pod_requests(pod) == {"cpu": 2, "memory": 3 * 2**30}
    assert pod_requests({"spec": {"containers": [{"name": "bare"}]}}) == {}


def test_a_pod_on_a_node_reads_the_nodes_labels_and_allocatable():
    pod = {"spec": {"containers": [{"name": "ray", "resources": {"requests": {"cpu": "2"}}}]}}
    node = {"metadata": {"labels": SPOT_M6I}, "status": {"allocatable": M6I_ALLOCATABLE}}
    on_node = pod_on_node(pod, node, "worker", 30.0)

    assert on_node == PodOnNode("worker", {"cpu": 2}, SPOT_M6I, M6I_ALLOCATABLE, 30.0)
    assert pod_share(on_node.requests, on_node.node_allocatable) == 0.5
