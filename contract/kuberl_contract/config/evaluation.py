"""`spec.trainer.evaluation`: greedy evaluation episodes and their cadence."""

from __future__ import annotations

from pydantic import Field

from kuberl_contract.config.base import Spec


class EvaluationConfig(Spec):
    """Greedy evaluation episodes run by the driver on a separate env."""

    every_iterations: int = Field(0, ge=0)
    """Evaluate every this many iterations; 0 turns evaluation off."""

    episodes: int = Field(10, ge=1, le=1000)
    """Episodes per evaluation, averaged."""
