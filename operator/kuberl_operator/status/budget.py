"""Why an active job is to be suspended: spec.suspend, or a cost that reached spec.budget.

A job over its budget is suspended as spec.suspend suspends it (its Ray cluster deleted, the
driver checkpointing on the way out), with reason BudgetExceeded; raising maxDollars, or removing
the budget, resumes it from its newest checkpoint. The cost compared is the status's, so the
suspension comes at most one poll after the cost reaches the budget."""

from __future__ import annotations

from kuberl_operator.spec import Reason, RLJobSpec, RLJobStatus

SUSPENDED_MESSAGE = "suspended: the Ray cluster is deleted; checkpoints are kept"


def over_budget(spec: RLJobSpec, status: RLJobStatus) -> str | None:
    """Why the job's cost is past its budget, in words; None when it is not (or has none)."""
    if spec.budget is None or status.cost is None:
        return None
    spent, budget = status.cost.dollars, spec.budget.max_dollars
    if spent < budget:
        return None
    return (
        f"{SUSPENDED_MESSAGE}: it has cost ${spent:,.2f}, past spec.budget.maxDollars "
        f"(${budget:,.2f}); raise maxDollars or remove the budget to resume it"
    )


def suspension(spec: RLJobSpec, status: RLJobStatus) -> tuple[str, str] | None:
    """(reason, message) of why the job is to be suspended now; None when it is to run.
    spec.suspend comes first: it is the user's own word."""
    if spec.suspend:
        return Reason.SUSPENDED, SUSPENDED_MESSAGE
    if (message := over_budget(spec, status)) is not None:
        return Reason.BUDGET_EXCEEDED, message
    return None
