"""spec.learner: the learner's resources (GPUs, CPU, memory), the nodes its pod runs on, and
whether node drains may evict it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kuberl_contract.config import LearnerDevice, Spec
from kuberl_operator.spec.formats import LABEL_VALUE_PATTERN, NodeSelector, Quantity, Toleration


class DisruptionBudget(Spec):
    """The PodDisruptionBudget of the learner's pod (the Ray head, which runs the driver)."""

    max_unavailable: Literal[0, 1] = 0
    """0: voluntary disruptions (node drains, cluster upgrades, the autoscaler's scale-down) never
    evict the healthy head, so training is never interrupted by them, but a drain of its node
    waits until the job ends. 1: they may evict it like a preemption: the driver checkpoints on
    SIGTERM within the head's grace period, and the job goes on from that checkpoint on new nodes
    as restartPolicy.onPreemption says. An edit applies to the next attempt."""


class Learner(Spec):
    """Resources and placement of the learner, which computes the gradient updates."""

    gpus: int = Field(0, ge=0, le=16)
    """GPUs for the learner; 0 trains on CPU. The learner trains on one of them, except with
    the LocalMultiGPU optimizer, which splits every SGD minibatch across all of them."""

    device: LearnerDevice = "auto"
    """With gpus 1 or more: auto (the default) times the learner's first learn calls on the GPU
    and then on the CPU, and keeps it where they ran faster per row, since a small network learns
    faster on the CPU (CartPole PPO's 64x64 MLP learned at half its CPU speed on an H200, Pong's
    CNN 6x faster on it); gpu keeps it on the GPU. The choice is logged once made. LocalMultiGPU
    keeps its GPUs either way. Without GPUs the learner trains on the CPU."""

    cpu: Quantity = "2"
    """CPU request of the learner's pod, as a Kubernetes quantity (2, 500m)."""

    memory: Quantity = "4Gi"
    """Memory request of the learner's pod, as a Kubernetes quantity (4Gi, 512Mi)."""

    gpu_type: str | None = Field(None, max_length=63, pattern=LABEL_VALUE_PATTERN)
    """GPU model, such as nvidia-l4 or nvidia-tesla-t4: the operator selects nodes whose GPU-model
    label has this value (cloud.google.com/gke-accelerator by default; the operator can be set up
    with another key, such as nvidia.com/gpu.product)."""

    node_selector: NodeSelector = Field(default_factory=dict)
    """Node labels the learner's pod requires (never a control-plane node's)."""

    tolerations: list[Toleration] = Field(default_factory=list)
    """Tolerations of the learner's pod (GPU nodes are often tainted)."""

    disruption_budget: DisruptionBudget = Field(default_factory=DisruptionBudget)
    """Whether node drains may evict the learner's pod (its PodDisruptionBudget)."""

    @model_validator(mode="after")
    def _gpu_settings_need_gpus(self) -> Learner:
        if self.gpu_type and self.gpus == 0:
            raise ValueError(
                f"gpuType: {self.gpu_type} asks for a GPU node but gpus is 0; set gpus >= 1 or "
                "remove gpuType"
            )
        if self.device == "gpu" and self.gpus == 0:
            raise ValueError(
                "device: gpu keeps the learner on a GPU but gpus is 0; set gpus >= 1 or remove "
                "device"
            )
        return self
