"""What a local run cost: the CPUs and GPUs it held times its training hours, as a cloud bills
reserved capacity, and the dollars at the prices given. (On a cluster the operator prices each pod
by its share of its node: kuberl_operator.cost.)"""

from __future__ import annotations

from dataclasses import dataclass

from kuberl_contract.config import RolloutConfig

DRIVER_CPUS = 1.0
"""The driver's CPU: the learner, and the sampler when it has no rollout workers."""


@dataclass(frozen=True)
class LocalCost:
    """CPU-hours and GPU-hours a run held, and their dollars (None without a price)."""

    cpu_hours: float
    gpu_hours: float
    dollars: float | None

    def describe(self, cpu_price: float | None, gpu_price: float | None) -> str:
        """One line for the run's summary."""
        held = f"{self.cpu_hours:.3g} CPU-hours"
        if self.gpu_hours:
            held += f", {self.gpu_hours:.3g} GPU-hours"
        if self.dollars is None:
            return held
        prices = [f"${cpu_price:g} per CPU-hour"] if cpu_price is not None else []
        prices += [f"${gpu_price:g} per GPU-hour"] if gpu_price is not None else []
        return f"{held}: ${self.dollars:.4g} at {' and '.join(prices)}"


def local_cost(
    time_total_s: float,
    rollout: RolloutConfig,
    learner_gpus: int,
    cpu_price: float | None = None,
    gpu_price: float | None = None,
) -> LocalCost:
    """The cost of `time_total_s` seconds of training: the driver's CPU and each rollout worker's
    cpusPerWorker held throughout, and the learner's GPUs; dollars at `cpu_price` per CPU-hour and
    `gpu_price` per GPU-hour (a missing price counts nothing; both missing, no dollars)."""
    hours = max(0.0, time_total_s) / 3600
    cpu_hours = (DRIVER_CPUS + rollout.replicas * rollout.cpus_per_worker) * hours
    gpu_hours = learner_gpus * hours
    if cpu_price is None and gpu_price is None:
        return LocalCost(cpu_hours, gpu_hours, None)
    dollars = cpu_hours * (cpu_price or 0.0) + gpu_hours * (gpu_price or 0.0)
    return LocalCost(cpu_hours, gpu_hours, dollars)
