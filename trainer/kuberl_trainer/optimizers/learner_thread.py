"""The learner thread: learns on batches from a bounded queue while the driver keeps the workers
busy, as in IMPALA and Ape-X. Torch releases the GIL in its kernels, so learning and the driver's
bookkeeping overlap.

The driver puts work in with `put()`, which blocks while the queue is full (backpressure: sampling
can never outrun learning by more than the queue), and takes what each learn call returned from
`results()`. An exception in the thread stops it and is raised in the driver by the next `put()`
or `results()`, so a broken learner fails the run instead of hanging it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kuberl_trainer.errors import TrainingError

_STOP = object()


class LearnerError(TrainingError):
    """The learner thread raised; the original exception is the cause."""


class LearnerThread(threading.Thread):
    def __init__(self, learn: Callable[[Any], Any], queue_size: int):
        """`learn(item)` runs in the thread for every item put in; its return values are
        collected for `results()`."""
        super().__init__(name="kuberl-learner", daemon=True)
        self._learn = learn
        self.inqueue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._outqueue: queue.Queue = queue.Queue()
        # Held while the policy changes: take it to read weights or state in one piece.
        self.lock = threading.Lock()
        self.num_steps = 0  # learn calls finished: the version of the learner's weights
        self.busy_s = 0.0
        self.call_s: float | None = None  # a learn call's seconds, a moving average
        self._finished = threading.Event()  # set when a learn call ends (see wait_for_result)
        self._began = time.perf_counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        self._began = time.perf_counter()
        try:
            while (item := self.inqueue.get()) is not _STOP:
                start = time.perf_counter()
                with self.lock:
                    result = self._learn(item)
                    self.num_steps += 1
                took = time.perf_counter() - start
                self.busy_s += took
                self.call_s = moving_average(self.call_s, took)
                self._outqueue.put(result)
                self._finished.set()
        except BaseException as exc:  # reported to the driver, which decides
            self.error = exc

    def put(self, item: Any) -> None:
        """Queue `item` for learning, waiting while the queue is full; raises LearnerError
        if the thread has failed instead of waiting forever."""
        while True:
            self.check()
            try:
                self.inqueue.put(item, timeout=0.1)  # wakes to notice a failed thread
                return
            except queue.Full:
                continue

    def results(self) -> list[Any]:
        """What the learn calls finished since the last call returned, oldest first."""
        self.check()
        results = []
        while True:
            try:
                results.append(self._outqueue.get_nowait())
            except queue.Empty:
                return results

    def wait_for_result(self, timeout: float) -> None:
        """Until a learn call ends (or has ended since the last wait), at most `timeout` seconds:
        a driver with nothing else to wait for sleeps here instead of spinning, which would hold
        the GIL the learner needs between its kernels."""
        if self._finished.wait(timeout):
            self._finished.clear()

    def check(self) -> None:
        if self.error is not None:
            raise LearnerError(f"the learner thread failed: {self.error!r}") from self.error

    @property
    def queue_depth(self) -> int:
        return self.inqueue.qsize()

    @property
    def utilisation(self) -> float:
        """Fraction of its life the thread spent learning (1.0: the learner is the bottleneck)."""
        alive = time.perf_counter() - self._began
        return self.busy_s / alive if alive > 0 else 0.0

    def share_busy_since(self, busy_before: float, start: float) -> float:
        """Fraction of the time since `start` (a perf_counter reading, taken when `busy_s` was
        `busy_before`) spent learning. A learn call counts when it ends, whole: one that began
        before `start` can push a short interval's share past 1, so it is capped there."""
        elapsed = time.perf_counter() - start
        return min(1.0, (self.busy_s - busy_before) / elapsed) if elapsed > 0 else 0.0

    def stop(self) -> None:
        """End the thread after the item it is learning on; queued items are dropped."""
        if not self.is_alive():
            return
        while True:
            try:
                self.inqueue.get_nowait()
            except queue.Empty:
                break
        self.inqueue.put(_STOP)
        self.join()


def moving_average(average: float | None, value: float, weight: float = 0.2) -> float:
    """An exponential moving average, starting at the first value."""
    return value if average is None else average + weight * (value - average)
