"""spec.learner: the learner's resources (GPUs, CPU, memory) and the nodes its pod runs on."""

from __future__ import annotations

from pydantic import Field, model_validator

from kuberl_operator.spec.formats import LABEL_VALUE_PATTERN, NodeSelector, Quantity, Toleration
from kuberl_trainer.config import Spec


class Learner(Spec):
    """Resources and placement of the learner, which computes the gradient updates."""

    gpus: int = Field(0, ge=0, le=16)
    """GPUs for the learner; 0 trains on CPU. The learner trains on one of them, except with
    the LocalMultiGPU optimizer, which splits every SGD minibatch across all of them."""

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

    @model_validator(mode="after")
    def _gpu_type_needs_gpus(self) -> Learner:
        if self.gpu_type and self.gpus == 0:
            raise ValueError(
                f"gpuType: {self.gpu_type} asks for a GPU node but gpus is 0; set gpus >= 1 or "
                "remove gpuType"
            )
        return self
