"""status.cost from one poll to the next: the previous status's tally, plus what the job's pods
on their nodes cost since `lastTallyTime` (`kuberl_operator.cost.tally_step`).

The tally lives only in the status, so a restarted operator goes on from it: the gap since
lastTallyTime is counted for the pods that still hold their nodes (they cost money while the
operator was down), each at most since it was scheduled, so nothing is counted twice. A poll that
sees no pod on a node counts nothing and leaves lastTallyTime where it was; the next pods are
counted from when they were scheduled. Pods that came and went while no poll saw them are not
counted: the tally is as fine as the polls (KUBERL_POLL_SECONDS)."""

from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime

from kuberl_operator.cost import CostTally, PodOnNode, PriceTable, tally_step
from kuberl_operator.spec import Cost, Progress, RLJobSpec


def target_reached(spec: RLJobSpec | None, progress: Progress) -> bool:
    """Whether the job has reached its stop target's return: the greedy evaluation's where
    spec.trainer.stop.evaluationReturnMean is set, else the training episodes'."""
    if spec is None:
        return False
    stop = spec.trainer.stop
    for target, reached in (
        (stop.evaluation_return_mean, progress.evaluation_return_mean),
        (stop.episode_return_mean, progress.episode_return_mean),
    ):
        if target is not None:
            return reached is not None and reached >= target
    return False


def _tally(cost: Cost | None) -> CostTally:
    """The tally a status's cost holds: the fields of the same names."""
    if cost is None:
        return CostTally()
    return CostTally(**{field.name: getattr(cost, field.name) for field in fields(CostTally)})


def next_cost(
    previous: Cost | None,
    pods: tuple[PodOnNode, ...],
    prices: PriceTable | None,
    now: datetime,
    reached: bool,
) -> Cost | None:
    """The cost after this poll, which sees `pods` on their nodes at `now` and the target
    `reached` or not; None while no pod of the job has held a node."""
    if prices is None or (previous is None and not pods):
        return previous
    last = previous.last_tally_time if previous is not None else None
    if last is None:  # the first tally: each pod since it was scheduled
        seconds = max((pod.held_seconds or 0.0 for pod in pods), default=0.0)
    else:
        seconds = max((now - last).total_seconds(), 0.0)
    tally = tally_step(_tally(previous), pods, prices, seconds, reached)
    return Cost(dollars=tally.dollars, last_tally_time=now if pods else last, **asdict(tally))
