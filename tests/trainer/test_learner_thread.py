"""The learner thread on its own: results in order, a bounded queue that holds the driver back,
and a failure that reaches the driver instead of hanging it. Every wait is on an Event."""

import threading
import time

import pytest

from kuberl_trainer.optimizers.learner_thread import LearnerError, LearnerThread, moving_average
from testkit import wait_until


def test_every_item_is_learned_once_in_order_and_counted():
    learner = LearnerThread(lambda item: item * 10, queue_size=2)
    learner.start()
    try:
        for item in range(5):
            learner.put(item)
        results: list[int] = []
        wait_until(lambda: results.extend(learner.results()) or len(results) == 5, what="results")
        assert results == [0, 10, 20, 30, 40]
        assert learner.num_steps == 5
        assert 0.0 <= learner.utilisation <= 1.0
    finally:
        learner.stop()
    assert not learner.is_alive()


def test_the_learn_calls_seconds_are_averaged_from_the_first():
    learner = LearnerThread(lambda seconds: time.sleep(seconds), queue_size=2)
    assert learner.call_s is None
    learner.start()
    try:
        for seconds in (0.05, 0.05, 0.3):
            learner.put(seconds)
        wait_until(lambda: learner.num_steps == 3, what="three learn calls")
        # 0.05, then 0.05, then 0.05 + 0.2 (0.3 - 0.05): at least 0.1, calls being no shorter
        # than their sleeps
        assert learner.call_s >= 0.1
    finally:
        learner.stop()
    assert moving_average(None, 0.05) == 0.05
    assert moving_average(moving_average(0.05, 0.05), 0.3) == pytest.approx(0.1)


def test_a_learn_call_that_began_before_an_interval_leaves_it_busy_at_most_fully():
    """A call's whole duration counts when it ends, also where it began before the interval."""
    learner = LearnerThread(lambda item: item, queue_size=1)
    start = time.perf_counter()
    assert learner.share_busy_since(learner.busy_s, start) == 0.0
    learner.busy_s += 60.0  # a minute-long call, ended just now
    assert learner.share_busy_since(0.0, start) == 1.0


def test_a_full_queue_holds_the_driver_back():
    release = threading.Event()
    started = threading.Event()

    def learn(item):
        started.set()
        release.wait()
        return item

    learner = LearnerThread(learn, queue_size=2)
    learner.start()
    learner.put("learning")  # taken by the thread, which then blocks
    started.wait()
    learner.put("queued 1")
    learner.put("queued 2")
    assert learner.queue_depth == 2

    blocked_put = threading.Thread(target=learner.put, args=("one too many",))
    blocked_put.start()
    blocked_put.join(timeout=0.5)
    assert blocked_put.is_alive(), "put() returned although the queue was full"
    assert learner.queue_depth == 2

    release.set()
    blocked_put.join()
    results: list[str] = []
    wait_until(lambda: results.extend(learner.results()) or len(results) == 4, what="results")
    assert results == ["learning", "queued 1", "queued 2", "one too many"]
    learner.stop()


def test_a_failing_learner_raises_in_the_driver_instead_of_hanging():
    def learn(item):
        raise ValueError(f"bad batch {item}")

    learner = LearnerThread(learn, queue_size=1)
    learner.start()
    learner.put(1)
    learner.join()  # the thread ends on the error
    with pytest.raises(LearnerError, match="bad batch 1") as raised:
        learner.put(2)
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(LearnerError):
        learner.results()
    learner.stop()  # stopping a dead learner is fine


def test_stop_drops_queued_items_and_ends_the_thread():
    release = threading.Event()
    learner = LearnerThread(lambda item: release.wait(), queue_size=4)
    learner.start()
    for item in range(4):
        learner.put(item)
    release.set()
    learner.stop()
    assert not learner.is_alive()
    assert learner.num_steps <= 4


def test_a_driver_waiting_for_a_result_sleeps_until_one_ends():
    release = threading.Event()
    learner = LearnerThread(lambda item: release.wait(60) and item, queue_size=1)
    learner.start()
    try:
        learner.put(7)
        began = time.perf_counter()
        learner.wait_for_result(0.05)  # nothing finished: the whole timeout, asleep
        assert time.perf_counter() - began >= 0.05
        assert learner.results() == []
        release.set()
        learner.wait_for_result(60)  # returns when the call ends, long before the timeout
        wait_until(lambda: learner.results() == [7], what="the result")
    finally:
        release.set()
        learner.stop()
