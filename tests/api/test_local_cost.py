"""What a local run held and cost (kuberl_cli.local_cost), as `kuberl train` reports it."""

import pytest

from kuberl_cli.local_cost import local_cost
from kuberl_contract.config import RolloutConfig

TWO_HOURS = 7200.0


def test_the_driver_and_each_worker_hold_their_cpus_for_the_training_time():
    workers = RolloutConfig(replicas=4, cpus_per_worker=0.5)
    cost = local_cost(TWO_HOURS, workers, learner_gpus=1)
    assert (cost.cpu_hours, cost.gpu_hours, cost.dollars) == ((1 + 4 * 0.5) * 2, 2.0, None)
    assert cost.describe(None, None) == "6 CPU-hours, 2 GPU-hours"


def test_dollars_at_the_prices_given():
    cost = local_cost(TWO_HOURS, RolloutConfig(replicas=2), 1, cpu_price=0.04, gpu_price=1.5)
    assert cost.dollars == pytest.approx(3 * 2 * 0.04 + 2 * 1.5)
    assert cost.describe(0.04, 1.5) == (
        "6 CPU-hours, 2 GPU-hours: $3.24 at $0.04 per CPU-hour and $1.5 per GPU-hour"
    )
    only_cpus = local_cost(TWO_HOURS, RolloutConfig(), 0, cpu_price=0.05)
    assert (only_cpus.dollars, only_cpus.describe(0.05, None)) == (
        pytest.approx(0.1),
        "2 CPU-hours: $0.1 at $0.05 per CPU-hour",
    )
