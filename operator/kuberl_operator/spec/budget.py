"""spec.budget: what the job may cost before the operator suspends it."""

from __future__ import annotations

from pydantic import Field

from kuberl_contract.config import Spec


class Budget(Spec):
    """The most the job may cost, as status.cost counts it (the price table is the operator's:
    its cost setting)."""

    max_dollars: float = Field(gt=0, allow_inf_nan=False)
    """Dollars the job may spend: once status.cost.dollars reaches it, the job is suspended (its Ray
    cluster deleted after the driver checkpoints) with reason BudgetExceeded; raising it, or
    removing the budget, resumes the job from its newest checkpoint."""
