"""status.cost as `compute_status` carries it from poll to poll, and spec.budget: a job whose cost
reaches maxDollars is suspended with reason BudgetExceeded and a Warning Event, and resumes once
the budget is raised or removed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_status import NOW, after, condition, observe, on_cluster, running, spec

from kuberl_operator.cost import PodOnNode, PriceTable
from kuberl_operator.spec import ConditionType, Cost, Phase, Progress, RLJobStatus
from kuberl_operator.status import CreateCluster, DeleteCluster, Nothing, compute_status
from kuberl_operator.status.cost import next_cost, target_reached
from kuberl_operator.validation import InvalidManifest, validate_rljob

# A node-hour at $3.60 on demand and $1.44 on spot: a whole node costs $0.001 (on demand) or
# $0.0004 (spot) a second, which keeps the hand arithmetic short.
PRICES = PriceTable.from_values({"pools": {"default": {"onDemand": 3.6, "spot": 1.44}}})
NODE = {"cpu": "4", "memory": "16Gi"}
SPOT_NODE = {"karpenter.sh/capacity-type": "spot"}


def head(held: float | None = None) -> PodOnNode:
    """The head, holding a whole on-demand node."""
    return PodOnNode("head", {"cpu": "4"}, {}, NODE, held)


def worker(held: float | None = None) -> PodOnNode:
    """A rollout worker, holding half a spot node."""
    return PodOnNode("worker", {"cpu": "2"}, SPOT_NODE, NODE, held)


def cost_of(previous: Cost | None, seconds: float, *pods: PodOnNode) -> Cost | None:
    return next_cost(previous, pods, PRICES, NOW + timedelta(seconds=seconds), reached=False)


# --- The tally ------------------------------------------------------------------------------------


def test_the_cost_adds_up_poll_by_poll_from_when_each_pod_was_scheduled():
    update = compute_status(
        spec(), on_cluster(running(), pods_on_nodes=(head(30), worker(10)), prices=PRICES)
    )
    for poll in range(1, 5):  # four more polls, 5 s apart (no transition moves the clock)
        later = NOW + timedelta(seconds=10 + 5 * poll)
        update = compute_status(
            spec(), on_cluster(update, now=later, pods_on_nodes=(head(), worker()), prices=PRICES)
        )

    cost = update.status.cost
    # The head for 30 + 4 x 5 s at $0.001/s; the worker for 10 + 20 s at half of $0.0004/s.
    assert cost.on_demand_dollars == pytest.approx(50 * 0.001)
    assert cost.spot_dollars == pytest.approx(30 * 0.5 * 0.0004)
    assert cost.dollars == pytest.approx(0.05 + 0.006)
    assert cost.on_demand_equivalent_dollars == pytest.approx(0.05 + 30 * 0.5 * 0.001)
    assert cost.worker_hours == pytest.approx(30 / 3600)
    assert cost.gpu_hours == 0
    assert cost.last_tally_time == NOW + timedelta(seconds=10 + 4 * 5)


def test_a_restarted_operator_counts_the_gap_once_for_the_pods_still_there():
    before = cost_of(None, 0, head(0), worker(0))
    # Ten minutes without the operator: the head ran through it, a worker came 100 s before the
    # end, and the worker seen before is gone (its time in the gap is not seen).
    back = cost_of(before, 600, head(600), worker(100))

    assert back.on_demand_dollars == pytest.approx(600 * 0.001)
    assert back.spot_dollars == pytest.approx(100 * 0.5 * 0.0004)
    # The same ten minutes polled every minute cost the head the same: nothing counted twice.
    polled = before
    for minute in range(1, 11):
        polled = cost_of(polled, 60 * minute, head())
    assert polled.on_demand_dollars == pytest.approx(back.on_demand_dollars)


def test_a_tally_from_a_stale_status_over_the_longer_interval_comes_to_the_same():
    first = cost_of(None, 0, head(0))
    second = cost_of(first, 5, head())
    assert cost_of(second, 10, head()) == cost_of(first, 10, head())


def test_a_poll_without_pods_on_nodes_keeps_the_cost_and_its_tally_time():
    before = cost_of(cost_of(None, 0, head(0)), 5, head())
    assert cost_of(before, 60) == before
    assert cost_of(None, 60) is None
    assert next_cost(before, (head(),), None, NOW, reached=False) == before  # no prices


def test_polls_costing_a_fraction_of_a_cent_each_add_up_unrounded():
    cost = cost_of(None, 0, worker(0))
    for poll in range(1, 721):  # an hour of 5 s polls, each $0.0000005 of a tiny spot share
        cost = next_cost(
            cost,
            (PodOnNode("worker", {"cpu": "10m"}, SPOT_NODE, NODE),),
            PRICES,
            NOW + timedelta(seconds=5 * poll),
            reached=False,
        )
    assert cost.spot_dollars == pytest.approx(0.01 / 4 * 1.44)


def test_the_target_is_the_evaluation_return_where_set_else_the_training_return():
    both = spec(**{"trainer.stop": {"episodeReturnMean": 100, "evaluationReturnMean": 450}})
    training = spec(**{"trainer.stop": {"episodeReturnMean": 100}})
    progress = Progress(episode_return_mean=120.0, evaluation_return_mean=400.0)

    assert not target_reached(both, progress)
    assert target_reached(training, progress)
    assert not target_reached(spec(**{"trainer.stop": {"timesteps": 10}}), progress)
    assert not target_reached(training, Progress())


def test_dollars_at_target_are_those_of_the_poll_that_first_sees_the_target():
    cost = cost_of(None, 0, head(0))
    reached = next_cost(cost, (head(),), PRICES, NOW + timedelta(seconds=20), reached=True)
    later = next_cost(reached, (head(),), PRICES, NOW + timedelta(seconds=40), reached=True)

    assert reached.dollars_at_target == pytest.approx(0.02)
    assert later.dollars_at_target == reached.dollars_at_target
    assert later.dollars == pytest.approx(0.04)


# --- The budget -----------------------------------------------------------------------------------

SPENT = Cost(dollars=10.0, on_demand_dollars=10.0, on_demand_equivalent_dollars=10.0)


def budget(max_dollars: float) -> dict:
    return {"budget": {"maxDollars": max_dollars}}


def test_a_job_whose_cost_reaches_its_budget_is_suspended_with_a_warning():
    job = spec(**budget(10))
    update = compute_status(job, on_cluster(running(cost=SPENT)))

    assert update.phase == Phase.SUSPENDED
    assert update.action == DeleteCluster("BudgetExceeded")  # the head's preStop checkpoints
    suspended = condition(update, ConditionType.SUSPENDED)
    assert (suspended.status, suspended.reason) == ("True", "BudgetExceeded")
    assert "$10.00, past spec.budget.maxDollars ($10.00)" in suspended.message
    assert [(e.type, e.reason) for e in update.events] == [("Warning", "BudgetExceeded")]

    gone = compute_status(job, after(update))
    assert (gone.phase, gone.action, gone.events) == (Phase.SUSPENDED, Nothing(), ())
    assert condition(gone, ConditionType.SUSPENDED).reason == "BudgetExceeded"


@pytest.mark.parametrize("raised", [budget(25), {}], ids=["raised", "removed"])
def test_raising_or_removing_the_budget_resumes_the_job(raised):
    job = spec(**budget(10))
    suspended = compute_status(job, after(compute_status(job, on_cluster(running(cost=SPENT)))))

    resumed = compute_status(spec(**raised), after(suspended))
    assert resumed.phase == Phase.RESUMING
    assert (resumed.attempt, resumed.action) == (2, CreateCluster(2))
    assert condition(resumed, ConditionType.SUSPENDED).status == "False"
    assert resumed.status.cost == SPENT  # the tally goes on from where it was


def test_a_job_under_its_budget_runs_on():
    job = spec(**budget(10.01))
    update = compute_status(job, on_cluster(running(cost=SPENT)))
    assert (update.phase, update.action) == (Phase.RUNNING, Nothing())


def test_spec_suspend_is_said_before_a_spent_budget():
    job = spec(suspend=True, **budget(10))
    update = compute_status(job, on_cluster(running(spec(), cost=SPENT)))
    assert condition(update, ConditionType.SUSPENDED).reason == "Suspended"
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "Suspended")]


def test_a_job_never_polled_with_pods_has_no_budget_to_exceed():
    update = compute_status(spec(**budget(0.01)), observe(RLJobStatus()))
    assert update.phase == Phase.PROVISIONING and update.status.cost is None


@pytest.mark.parametrize("max_dollars", [0, -5])
def test_a_budget_must_be_positive_and_says_where(max_dollars):
    document = {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "thrifty"},
        "spec": {**spec().model_dump(mode="json", by_alias=True), **budget(max_dollars)},
    }
    with pytest.raises(InvalidManifest, match=r"spec\.budget\.maxDollars"):
        validate_rljob(document)


def test_a_job_suspended_by_hand_and_over_its_budget_stays_suspended_for_the_budget_once_resumed():
    over = budget(10)
    by_hand = compute_status(spec(suspend=True, **over), on_cluster(running(spec(), cost=SPENT)))
    gone = compute_status(spec(suspend=True, **over), after(by_hand))
    assert condition(gone, ConditionType.SUSPENDED).reason == "Suspended"

    unsuspended = compute_status(spec(**over), after(gone))  # spec.suspend cleared, budget spent
    assert (unsuspended.phase, unsuspended.action) == (Phase.SUSPENDED, Nothing())
    suspended = condition(unsuspended, ConditionType.SUSPENDED)
    assert suspended.reason == "BudgetExceeded"
    assert "raise maxDollars or remove the budget" in suspended.message
