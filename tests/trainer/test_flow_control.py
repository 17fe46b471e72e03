"""The asynchronous optimizers' flow control, rule by rule, without Ray: calls kept in flight,
the order workers get calls in, stragglers, stale batches, weights due, replay held to sampling."""

import pytest

from kuberl_trainer.optimizers.flow_control import (
    MIN_PATIENCE_S,
    STRAGGLER_PATIENCE,
    calls_to_keep_in_flight,
    calls_to_top_up,
    counts_in_flight,
    in_call_order,
    is_stale,
    replay_behind,
    straggler_patience_s,
    weights_due,
)


@pytest.mark.parametrize(
    ("in_flight", "limit", "more"), [(0, 2, 2), (1, 2, 1), (2, 2, 0), (3, 2, 0)]
)
def test_a_worker_is_topped_up_to_its_limit_and_never_past_it(in_flight, limit, more):
    assert calls_to_top_up(in_flight, limit) == more


def test_the_calls_kept_in_flight_never_leave_the_workers_idle_nor_exceed_their_capacity():
    assert calls_to_keep_in_flight(0.0, 0.010, 0.1, 12) == 1  # at least one call
    assert calls_to_keep_in_flight(100.0, 0.010, 4, 12) == 12  # at most every worker's
    assert calls_to_keep_in_flight(0.020, 0.010, 1, 12) == 3  # two learner steps' worth, + one


def test_workers_that_have_returned_nothing_get_calls_first_then_the_latest_to_return():
    last_return = {1: 10.0, 2: 30.0, 4: 20.0}
    assert in_call_order([1, 2, 3, 4, 5], last_return) == [3, 5, 2, 4, 1]


def test_a_starting_worker_and_a_straggler_do_not_count_against_the_calls_in_flight():
    assert not counts_in_flight(returned_before=False, since_last_call_s=0.0, sample_s=0.1)
    assert counts_in_flight(returned_before=True, since_last_call_s=0.5, sample_s=0.01)
    assert not counts_in_flight(returned_before=True, since_last_call_s=1.5, sample_s=0.01)
    assert counts_in_flight(returned_before=True, since_last_call_s=1.5, sample_s=0.2)


def test_patience_with_a_straggler_grows_with_the_sampling_time_from_a_floor():
    assert straggler_patience_s(None) == MIN_PATIENCE_S
    assert straggler_patience_s(0.01) == MIN_PATIENCE_S
    assert straggler_patience_s(2.0) == STRAGGLER_PATIENCE * 2.0


@pytest.mark.parametrize(
    ("lag", "max_policy_lag", "stale"),
    [(3, 3, False), (4, 3, True), (0, 0, False), (99, None, False)],
)
def test_a_batch_is_stale_only_past_max_policy_lag(lag, max_policy_lag, stale):
    assert is_stale(lag, max_policy_lag) is stale


@pytest.mark.parametrize(
    ("held", "newest", "interval", "due"),
    [(None, 0, 5, True), (0, 4, 5, False), (0, 5, 5, True), (7, 7, 1, False), (6, 7, 1, True)],
)
def test_weights_are_due_to_a_new_worker_and_every_broadcast_interval(held, newest, interval, due):
    assert weights_due(held, newest, interval) is due


@pytest.mark.parametrize(
    ("replayed", "added", "intensity", "behind"),
    [(0, 100, None, False), (100, 100, 2.0, True), (200, 100, 2.0, False), (50, 100, 0.5, False)],
)
def test_replay_is_behind_until_it_reaches_the_training_intensity(
    replayed, added, intensity, behind
):
    assert replay_behind(replayed, added, intensity) is behind
