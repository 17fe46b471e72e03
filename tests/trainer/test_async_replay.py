"""AsyncReplay's control flow against mock workers and a mock learner, with real Ray actors for
the workers and the replay shards: priorities go back to the shard a minibatch came from, the
learner queue bounds replay, weights follow the broadcast interval, failures of the learner and
of a shard surface instead of hanging. Every wait is on a condition or an Event."""

import json
import logging
import os
import signal
import threading

import numpy as np
import pytest
from mock_worker import MockWorker
from test_lost_workers import NoneReady

from kuberl_trainer.optimizers.async_replay import AsyncReplayOptimizer, reported_workers
from kuberl_trainer.optimizers.learner_thread import LearnerError
from kuberl_trainer.optimizers.replay_shard import ReplayShard
from kuberl_trainer.policies.apex import APEXPolicy
from kuberl_trainer.policies.dqn import DQNPolicy
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config, wait_until

ROWS = 10
BATCH = 4
QUEUE = 3
PER_CALL = 2  # minibatches a replay call brings

pytestmark = pytest.mark.timeout(300)  # a hang fails the test instead of the suite


class MockPolicy:
    """The learner: its TD errors are the ids of the transitions it learned on."""

    def __init__(self, release: threading.Event | None, fail: bool):
        self.release = release
        self.fail = fail
        self.learning = threading.Event()
        self.steps = 0
        self.global_timesteps = 0

    def learn_on_replay_batch(self, columns):
        self.learning.set()
        if self.release is not None:
            self.release.wait()
        if self.fail:
            raise ValueError("the learner broke")
        self.steps += 1
        return {"loss": 1.0}, columns["obs"][:, 0].copy()

    def get_weights(self):
        return {"w": np.array([self.steps], np.float32)}  # the version: learner steps

    def set_global_timesteps(self, timesteps):
        self.global_timesteps = timesteps


class SamplingWorker(MockWorker):
    def __init__(self, index, release=None, fail=False, cpus=None):
        super().__init__(index, MockPolicy(release, fail))

    def sample(self) -> SampleBatch:
        """Transitions with ids unique across workers and calls; one episode whose return is
        the worker's index."""
        self.calls += 1
        ids = 100_000 * self.index + ROWS * self.calls + np.arange(ROWS)
        return SampleBatch(
            {"obs": ids[:, None].astype(np.float32)}, np.array([self.index]), np.ones(1, int)
        )


class CheckingShard(ReplayShard):
    """A replay shard that checks every priority update against its own contents: the TD errors
    of the mock learner are transition ids, so an update meant for another shard shows."""

    def __init__(self, *args):
        super().__init__(*args)
        self.replays = self.updates = self.wrong = 0

    def sample(self, batch_size, beta, count=1):
        self.replays += 1
        return super().sample(batch_size, beta, count)

    def update_priorities(self, indices, td_errors):
        self.updates += 1
        if not np.array_equal(self.buffer.columns["obs"][indices, 0], td_errors):
            self.wrong += 1
        super().update_priorities(indices, td_errors)
        expected = (np.abs(td_errors) + self.buffer.eps) ** self.buffer.alpha
        assert np.allclose(self.buffer.sums.leaves(indices), expected)

    def report(self):
        return {"replays": self.replays, "updates": self.updates, "wrong": self.wrong}


class CheckedAsyncReplay(AsyncReplayOptimizer):
    shard_class = CheckingShard
    replay_rows_per_call = PER_CALL * BATCH


def config(**hyperparameters):
    settings = hyperparameters.pop("optimizer_config", {})
    checkpoint = hyperparameters.pop("checkpoint", {})
    return trainer_config(
        algorithm="APEX",
        hyperparameters={
            "batch_size": BATCH,
            "buffer_size": 100_000,
            "learning_starts": 3 * ROWS,
            "training_intensity": None,
            **hyperparameters,
        },
        optimizerConfig={"learnerQueueSize": QUEUE, **settings},
        checkpoint=checkpoint,
    )


def make(ray_local, num_remote=2, release=None, fail=False, **hyperparameters):
    def kwargs(index):
        # The local worker's policy is the learner's; only it gets the in-process Event.
        return (
            {"index": index, "release": release, "fail": fail} if index == 0 else {"index": index}
        )

    workers = WorkerSet(SamplingWorker, kwargs, num_remote=num_remote, cpus_per_worker=0.5)
    return CheckedAsyncReplay(workers, config(**hyperparameters))


def shard_reports(ray_local, optimizer):
    return ray_local.get([shard.report.remote() for shard in optimizer.shards.actors])


def stop(optimizer):
    optimizer.stop()
    optimizer.workers.stop()


def test_priorities_go_to_the_shard_each_minibatch_came_from(ray_local):
    optimizer = make(ray_local)
    try:
        result = optimizer.step()
        assert result.steps_trained == 0 and not result.learner_stats.get("loss")
        learner = optimizer.workers.local_worker.policy
        wait_until(
            lambda: optimizer.step() and learner.steps >= 20, timeout=120, what="20 learner steps"
        )
        reports = shard_reports(ray_local, optimizer)
        assert all(r["updates"] > 0 for r in reports), reports  # both shards replayed
        assert all(r["wrong"] == 0 for r in reports), reports
        # One update per replay call, of all its minibatches.
        assert sum(r["updates"] for r in reports) <= learner.steps / PER_CALL
    finally:
        stop(optimizer)


def test_no_replay_before_learning_starts(ray_local):
    optimizer = make(ray_local, num_remote=1, learning_starts=5 * ROWS)
    try:
        while optimizer.counters.steps_sampled < 5 * ROWS:
            optimizer.step()
            # The shards' calls before the step's end were adds only (calls are answered in order)
            if optimizer.counters.steps_sampled < 5 * ROWS:
                assert all(r["replays"] == 0 for r in shard_reports(ray_local, optimizer))
        wait_until(
            lambda: optimizer.step() and optimizer.workers.local_worker.policy.steps,
            timeout=60,
            what="learning once learning_starts transitions are in",
        )
    finally:
        stop(optimizer)


def test_a_blocked_learner_bounds_replay_by_its_queue_while_sampling_goes_on(ray_local):
    release = threading.Event()
    optimizer = make(ray_local, release=release)
    learner = optimizer.workers.local_worker.policy
    try:
        wait_until(lambda: optimizer.step() and learner.learning.is_set(), timeout=60)
        wait_until(
            lambda: optimizer.step() and optimizer.learner.queue_depth == QUEUE,
            timeout=60,
            what="a full learner queue",
        )
        for _ in range(5):  # workers keep sampling; nothing more is replayed
            result = optimizer.step()
            assert result.steps_sampled >= 2 * ROWS and result.steps_trained == 0
            assert optimizer.learner.queue_depth == QUEUE
        replays = sum(r["replays"] for r in shard_reports(ray_local, optimizer))
        assert replays == QUEUE + 1  # the one being learned on, and a full queue
        release.set()
        wait_until(lambda: optimizer.step().steps_trained, timeout=60, what="learning again")
    finally:
        release.set()
        stop(optimizer)


@pytest.mark.parametrize("interval", [1, 4])
def test_weights_go_to_a_returning_worker_every_broadcast_interval(ray_local, interval):
    optimizer = make(ray_local, optimizer_config={"broadcastInterval": interval})
    learner = optimizer.workers.local_worker.policy
    try:
        all_started(optimizer.workers)  # worker 2 joined with the weights as built: version 0

        def received():
            optimizer.step()
            return [received for _, _, received in optimizer.workers.foreach_remote("report")]

        wait_until(lambda: all(len(r) >= 4 for r in received()), timeout=120, what="4 pushes")
        for index, versions in enumerate(received(), 1):
            assert versions[:index] == [0] * index  # the start's broadcast (and worker 2's join)
            versions = versions[index - 1 :]
            assert (np.diff(versions) >= interval).all(), versions
        assert learner.steps >= 3 * interval
    finally:
        stop(optimizer)


def test_a_failing_learner_raises_in_step(ray_local):
    optimizer = make(ray_local, fail=True)
    try:
        with pytest.raises(LearnerError, match="the learner broke"):
            for _ in range(1000):  # far more steps than learning_starts takes
                optimizer.step()
    finally:
        stop(optimizer)


def test_only_the_least_exploring_third_of_the_workers_reports_episodes(ray_local):
    optimizer = make(ray_local, num_remote=3)
    try:
        returns: list[float] = []
        wait_until(
            lambda: returns.extend(optimizer.step().episode_returns) or returns,
            timeout=60,
            what="episodes of worker 3",
        )
        # Each mock episode returns its worker's index: workers 1 and 2 explore more.
        assert set(returns) == {3}
    finally:
        stop(optimizer)


def test_a_killed_replay_shard_is_reported_replaced_and_counted(ray_local, caplog):
    optimizer = make(ray_local)
    learner = optimizer.workers.local_worker.policy
    try:
        wait_until(lambda: optimizer.step() and learner.steps >= 5, timeout=120)
        victim = optimizer.shards.actors[0]
        os.kill(ray_local.get(victim.pid.remote()), signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="kuberl_trainer.optimizers.replay_shard"):
            wait_until(
                lambda: optimizer.step().learner_stats["replay_shards_lost"] == 1,
                timeout=120,
                what="the lost shard to be counted",
            )
        assert "replay shard 0 died" in caplog.text
        assert "starting an empty one" in caplog.text
        assert optimizer.shards.actors[0] is not victim

        # Training goes on, and the new shard fills and is replayed again.
        steps = learner.steps
        wait_until(
            lambda: optimizer.step() and shard_reports(ray_local, optimizer)[0]["updates"] > 0,
            timeout=120,
            what="priority updates on the new shard",
        )
        assert learner.steps > steps
        assert all(r["wrong"] == 0 for r in shard_reports(ray_local, optimizer))
        assert optimizer.step().learner_stats["replay_shards_lost"] == 1
    finally:
        stop(optimizer)


def test_training_intensity_holds_replay_to_sampling(ray_local):
    optimizer = make(ray_local, training_intensity=2.0)
    learner = optimizer.workers.local_worker.policy
    try:
        wait_until(lambda: optimizer.step() and learner.steps >= 100, timeout=120)
        sampled = optimizer.counters.steps_sampled
        call = PER_CALL * BATCH
        replayed = sum(r["replays"] for r in shard_reports(ray_local, optimizer)) * call
        # Never ahead of 2 x sampled by more than a call; behind by at most the calls in flight
        # on the workers (2 each) and the learner's queue.
        assert replayed <= 2 * sampled + call
        assert replayed >= 2 * (sampled - 2 * 2 * ROWS) - (QUEUE + 1) * call
    finally:
        stop(optimizer)


def test_training_intensity_holds_the_local_worker_while_no_remote_one_is_up(ray_local):
    """As after losing every worker, or while they start: the local worker samples, and no faster
    than replay keeps up with (unheld, it spent a job's 150k env steps in seconds)."""
    kwargs = {"index": 0, "release": None, "fail": False}
    workers = NoneReady(SamplingWorker, lambda index: kwargs, num_remote=0)
    optimizer = CheckedAsyncReplay(workers, config(training_intensity=2.0))
    try:
        wait_until(lambda: optimizer.step() and workers.local_worker.policy.steps >= 100, 120)
        sampled = optimizer.counters.steps_sampled
        call = PER_CALL * BATCH
        replayed = sum(r["replays"] for r in shard_reports(ray_local, optimizer)) * call
        assert replayed <= 2 * sampled + call
        assert replayed >= 2 * (sampled - ROWS) - (QUEUE + 1) * call
    finally:
        stop(optimizer)


@pytest.mark.parametrize("num_workers", [1, 2, 4, 8])
def test_per_worker_epsilons_follow_the_ape_x_schedule(num_workers):
    config = trainer_config(algorithm="APEX", hyperparameters={"hidden_sizes": [8]})

    def epsilon(index):
        worker = RolloutWorker(APEXPolicy, config, 1, 0, index, num_workers)
        return worker.policy.epsilon

    expected = [0.4 ** (1 + 7 * i / max(1, num_workers - 1)) for i in range(num_workers)]
    assert [epsilon(i) for i in range(1, num_workers + 1)] == pytest.approx(expected)
    assert epsilon(0) == 0.0  # the local worker evaluates greedily


def test_without_remote_workers_the_local_worker_explores_as_worker_one():
    config = trainer_config(algorithm="APEX", hyperparameters={"hidden_sizes": [8]})
    assert RolloutWorker(APEXPolicy, config, 1, 0, 0, 0).policy.epsilon == 0.4


def test_apex_starts_its_most_and_least_exploring_workers_first_alternately():
    # Where workers start one at a time (a loaded laptop), the first already span the rates: the
    # first explores most, the second is among the least exploring third, whose episodes are
    # reported.
    assert APEXPolicy.worker_start_order(12) == [1, 12, 2, 11, 3, 10, 4, 9, 5, 8, 6, 7]
    assert APEXPolicy.worker_start_order(5) == [1, 5, 2, 4, 3]
    assert APEXPolicy.worker_start_order(2) == [1, 2]
    assert APEXPolicy.worker_start_order(1) == [1]
    assert DQNPolicy.worker_start_order(3) == [1, 2, 3]  # one rate for all: by index


def test_apex_reports_the_least_exploring_third_and_the_local_worker():
    assert reported_workers(12) == {0, 9, 10, 11, 12}
    assert reported_workers(4) == {0, 4}
    assert reported_workers(2) == {0, 2}
    assert reported_workers(1) == {0, 1}


def test_dqn_keeps_its_decaying_epsilon_on_any_worker():
    config = trainer_config(
        algorithm="DQN", optimizer="AsyncReplay", hyperparameters={"hidden_sizes": [8]}
    )
    worker = RolloutWorker(DQNPolicy, config, 1, 0, 3, 4)
    assert worker.policy.epsilon == 1.0
    worker.set_weights(worker.get_weights(), global_timesteps=10_000)
    assert worker.policy.epsilon == pytest.approx(0.04)


def test_async_replay_needs_remote_workers():
    from kuberl_trainer.errors import TrainingError

    workers = WorkerSet(SamplingWorker, lambda index: {"index": index}, num_remote=0)
    with pytest.raises(TrainingError, match=r"rolloutWorkers\.replicas"):
        AsyncReplayOptimizer(workers, config())


def test_checkpoints_hold_the_shards_contents_when_asked(ray_local):
    first = make(ray_local, num_remote=1, checkpoint={"replayBuffer": True})
    second = make(ray_local, num_remote=1, checkpoint={"replayBuffer": True})
    try:
        wait_until(lambda: first.step() and first.workers.local_worker.policy.steps, timeout=60)
        state = first.save()
        second.restore(state)
        assert second.counters.steps_sampled == first.counters.steps_sampled
        assert second.shards.sizes == first.shards.sizes and sum(second.shards.sizes) > 0
        for saved, shard in zip(state["replay_shards"], second.shards.actors, strict=True):
            restored = ray_local.get(shard.state.remote())
            assert np.array_equal(restored["columns"]["obs"], saved["columns"]["obs"])
            assert np.array_equal(restored["priorities"], saved["priorities"])
    finally:
        stop(first)
        stop(second)


def test_checkpoints_leave_the_shards_out_by_default(ray_local):
    optimizer = make(ray_local, num_remote=1)
    try:
        assert "replay_shards" not in optimizer.save()
    finally:
        stop(optimizer)


def test_dqn_trains_on_async_replay_with_real_workers(ray_local, tmp_path):
    from kuberl_contract.config import RolloutConfig
    from kuberl_trainer.job.driver import Driver

    config = trainer_config(
        algorithm="DQN",
        optimizer="AsyncReplay",
        stop={"iterations": 20},
        hyperparameters={"learning_starts": 256, "hidden_sizes": [32]},
    )
    rollout = RolloutConfig(replicas=1, envs_per_worker=2, cpus_per_worker=0.5)
    result = Driver(config, rollout, tmp_path, "job").run()
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert result.iteration == 20
    assert sum(row["timesteps_trained_this_iter"] for row in rows) > 0
    assert rows[-1]["epsilon"] < 1.0  # DQN's decaying epsilon, told through the weights
