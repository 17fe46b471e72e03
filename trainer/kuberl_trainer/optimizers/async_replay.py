"""AsyncReplay (Ape-X): rollout workers sample into sharded prioritized replay, and a learner
thread learns on minibatches replayed from the shards.

- Replay shards (see replay_shard.py) are Ray actors beside the driver, each holding
  buffer_size / replay_shards transitions. A worker's batch goes to the next shard as the object
  it already is in the object store: the driver passes its reference, not its contents.
- Once the shards hold learning_starts transitions, they have replay calls in flight while the
  learner's queue has room for them (so the driver never blocks on it), and the learner's TD
  errors go back to the shard each call came from as its new priorities. A replay call brings
  several minibatches (replay_rows_per_call transitions): a Ray call costs the driver and the
  shard far more than drawing a small minibatch, and with one call per minibatch of 64, a learner
  step took 14 ms in a 12-worker run against 1.8 ms on its own.
- With training_intensity, replay runs at that many transitions per transition sampled: new
  sample calls wait while the learner is behind, replay calls while it is ahead.
- A worker that returns a batch gets the learner's newest weights if they are broadcast_interval
  learner steps newer than its own, queued before its next sample call.

A step returns once it has a batch per remote worker (one synchronous iteration's worth of
samples), with the statistics of the learner steps finished meanwhile. With APEX's per-worker
exploration, the step's episodes are those of the least exploring third of the workers, as in
RLlib's Ape-X: the others' rates (up to worker_epsilon) hide how good the policy is. There is no
`policy_lag`: replayed transitions are of every age by design, and DQN corrects for none of it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kuberl_contract.progress_row import (
    LEARNER_QUEUE_DEPTH,
    LEARNER_UTILISATION,
    REPLAY_SHARDS_LOST,
    REPLAY_SIZE,
)
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.optimizers.base import PolicyOptimizer, StepResult, mean_statistics
from kuberl_trainer.optimizers.flow_control import calls_to_top_up, replay_behind, weights_due
from kuberl_trainer.optimizers.learner_thread import LearnerThread
from kuberl_trainer.optimizers.replay_shard import ReplayShard, ReplayShards
from kuberl_trainer.policies.sample_batch import SampleBatch, merged_policy_returns
from kuberl_trainer.rollouts.pool_events import Completed
from kuberl_trainer.rollouts.resources import check_resources, replay_shards_request
from kuberl_trainer.rollouts.worker_set import WorkerSet

REPLAY_CALLS_PER_SHARD = 4  # calls travelling while the shard draws the next (RLlib 0.6: 4)
POLL_S = 0.02  # learner results are no Ray objects: the driver looks for them this often


def reported_workers(num_remote: int) -> set[int]:
    """The workers whose episodes a step reports under Ape-X's per-worker exploration: the least
    exploring third of the remote workers (1 to num_remote) and the local one (0), which acts
    greedily while no remote worker is up."""
    return {0, *range(num_remote - max(1, num_remote // 3) + 1, num_remote + 1)}


def learn_on_replay_call(
    policy, columns: dict[str, np.ndarray], batch_size: int
) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """One gradient step on each minibatch of batch_size rows of a replay call, in order; its
    (indices, TD errors, per-step statistics), the TD errors for the shard's new priorities."""
    indices = columns.pop("indices")
    stats, td_errors = [], []
    for start in range(0, len(indices), batch_size):
        minibatch = {key: value[start : start + batch_size] for key, value in columns.items()}
        step_stats, step_td_errors = policy.learn_on_replay_batch(minibatch)
        stats.append(step_stats)
        td_errors.append(step_td_errors)
    return indices, np.concatenate(td_errors), stats


class AsyncReplayOptimizer(PolicyOptimizer):
    shard_class = ReplayShard
    # Transitions a replay call brings, in whole minibatches (RLlib's Ape-X learns on 512 at once).
    replay_rows_per_call = 512

    def __init__(self, workers: WorkerSet, config: Any):
        super().__init__(workers, config)
        if not workers.num_remote:
            raise InvalidJobError(
                "optimizer: AsyncReplay keeps its replay shards in Ray actors fed by remote "
                "rollout workers; set rolloutWorkers.replicas to 1 or more, or use SyncReplay "
                "to train in one process"
            )
        self.hp = hp = config.hyperparameters
        settings = config.optimizer_config
        self.checkpoint_buffer = config.checkpoint.replay_buffer
        self.queue_size = settings.learner_queue_size or 16
        self.minibatches_per_call = max(1, self.replay_rows_per_call // hp.batch_size)
        self.learner = LearnerThread(self._learn, self.queue_size)
        count, cpus = settings.replay_shards, settings.cpus_per_replay_shard
        check_resources([*workers.resource_requests, replay_shards_request(count, cpus)])
        capacity = -(-hp.buffer_size // count)
        self.shards = ReplayShards(
            count,
            capacity,
            hp.prioritized_replay_alpha,
            hp.prioritized_replay_eps,
            cpus,
            config.seed,
            self.shard_class,
        )
        self.intensity = getattr(hp, "training_intensity", None)
        self._learning = False
        self._added = self._replayed = 0  # transitions sent to the shards, asked of them
        self._next_replay = 0  # the shard to replay from next
        n = workers.num_remote
        per_worker = getattr(hp, "worker_epsilon", None) is not None  # APEX
        self.reported = reported_workers(n) if per_worker else None
        self._started = False

    @property
    def policy_lock(self):
        return self.learner.lock

    def step(self) -> StepResult:
        if not self._started:  # workers start from weights of their own seeds
            self.workers.sync_weights(self.counters.steps_sampled)
            self.learner.start()
            self._started = True
        began, busy_before = time.perf_counter(), self.learner.busy_s
        batches: list[tuple[int, SampleBatch]] = []
        learned: list[dict[str, float]] = []
        while len(batches) < self.workers.num_remote:
            # No remote worker up (lost, or still starting): the local one samples, held back
            # by training_intensity as they are, or it would spend the job's env steps in
            # seconds while the learner took a few steps.
            if not self._request_samples() and not self._replay_behind():
                self.workers.refresh_local_copy(lock=self.learner.lock)
                batch = self.workers.local_worker.sample()
                self._add(batch, len(batch))
                batches.append((0, batch))
            self._request_replays()
            with self.timer("wait"):
                self._wait()
            batches += self._take_samples(self.workers.events(timeout=0))
            for minibatch in self.shards.completed():
                self.learner.put(minibatch)
            for shard, generation, indices, td_errors, stats in self.learner.results():
                self.shards.update_priorities(shard, generation, indices, td_errors)
                learned += stats
        return self._step_result(batches, learned, began, busy_before)

    def _learn(self, item: tuple[int, int, dict[str, np.ndarray]]):
        """In the learner thread: one gradient step on each minibatch of a replay call."""
        shard, generation, columns = item
        indices, td_errors, stats = learn_on_replay_call(self.policy, columns, self.hp.batch_size)
        return shard, generation, indices, td_errors, stats

    # -- rollout workers ----------------------------------------------------------------------

    def _request_samples(self) -> bool:
        """Top every healthy worker up to its calls in flight, unless replay is behind; False
        when none is healthy."""
        healthy = self.workers.healthy_indices
        limit = self.config.optimizer_config.requests_in_flight_per_worker or 2
        if not self._replay_behind():
            for index in healthy:
                for _ in range(calls_to_top_up(self.workers.in_flight(index), limit)):
                    self.workers.call(index, "sample")
        return bool(healthy)

    def _take_samples(self, events) -> list[tuple[int, SampleBatch]]:
        """The batches that arrived, each to a shard as the object it is (a worker lost drops
        its calls: nothing here depends on them)."""
        taken = []
        for event in events:
            if isinstance(event, Completed):
                self._add(event.ref, len(event.result))
                self._send_weights(event.worker)  # before its next sample call
                taken.append((event.worker, event.result))
        return taken

    def _send_weights(self, index: int) -> None:
        """The learner's newest weights to worker `index` every broadcast_interval learner
        steps (a worker whose version is unknown holds the start's, version 0)."""
        newest = self.learner.num_steps
        held = self.workers.broadcaster.held.get(index)
        interval = self.config.optimizer_config.broadcast_interval
        if not weights_due(held or 0, newest, interval):
            return
        weights = None
        if not self.workers.broadcaster.is_put(newest):
            with self.timer("weight_sync"), self.learner.lock:  # the weights and their version
                newest, weights = self.learner.num_steps, self.policy.get_weights()
        self.workers.offer_weights(index, newest, lambda: weights, self.counters.steps_sampled)

    # -- replay -------------------------------------------------------------------------------

    def _add(self, batch, rows: int) -> None:
        self.shards.add(batch, rows)
        self._added += rows

    def _replay_behind(self) -> bool:
        """Replay has not reached training_intensity x the transitions sampled (and can: a
        shard holds transitions)."""
        if not self._learning or not any(self.shards.sizes):
            return False
        return replay_behind(self._replayed, self._added, self.intensity)

    def _request_replays(self) -> None:
        """Replay calls, the shards in turn, as many as the learner queue has room for."""
        self._learning = self._learning or sum(self.shards.sizes) >= self.hp.learning_starts
        if not self._learning:
            return
        replays = self.shards.replays
        room = self.queue_size - self.learner.queue_depth - sum(replays.values())
        while room > 0 and (self.intensity is None or self._replay_behind()):
            shards = len(self.shards.sizes)
            ready = [
                shard
                for shard, size in enumerate(self.shards.sizes)
                if size and replays[shard] < REPLAY_CALLS_PER_SHARD
            ]
            if not ready:
                return
            shard = min(ready, key=lambda s: (s - self._next_replay) % shards)
            self._next_replay = (shard + 1) % shards
            minibatches = self.minibatches_per_call
            beta = self.hp.prioritized_replay_beta
            self.shards.replay(shard, self.hp.batch_size, beta, minibatches)
            self._replayed += self.hp.batch_size * minibatches
            room -= 1

    def _wait(self) -> None:
        """Until a worker or a shard has finished a call, or POLL_S passed; with no call in
        flight (sampling held back by training_intensity, the learner's queue full), until the
        learner has finished a step."""
        import ray

        refs = [*self.shards.pending, *self.workers.calls_in_flight]
        if refs:
            ray.wait(refs, num_returns=1, timeout=POLL_S)
        else:
            self.learner.wait_for_result(POLL_S)

    # -- results and state --------------------------------------------------------------------

    def _step_result(self, batches, learned, began: float, busy_before: float) -> StepResult:
        sampled = sum(len(batch) for _, batch in batches)
        trained = len(learned) * self.hp.batch_size
        self.counters.steps_sampled += sampled
        self.counters.steps_trained += trained
        self.policy.set_global_timesteps(self.counters.steps_sampled)
        stats = mean_statistics(learned)
        if self.reported is None:  # one exploration rate for all, decaying
            stats |= self.policy.exploration_stats()
        reported = [b for index, b in batches if self.reported is None or index in self.reported]
        stats |= {
            LEARNER_QUEUE_DEPTH: self.learner.queue_depth,
            LEARNER_UTILISATION: self.learner.share_busy_since(busy_before, began),
            REPLAY_SHARDS_LOST: self.shards.lost,
            REPLAY_SIZE: sum(self.shards.sizes),
        }
        return StepResult(
            stats,
            np.concatenate([np.zeros(0, np.float32), *(b.episode_returns for b in reported)]),
            np.concatenate([np.zeros(0, np.int64), *(b.episode_lengths for b in reported)]),
            sampled,
            trained,
            merged_policy_returns(b for _, b in batches),
        )

    def save(self) -> dict[str, Any]:
        state = super().save()
        if self.checkpoint_buffer:
            state["replay_shards"] = self.shards.state()
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if "replay_shards" in state:
            self.shards.load_state(state["replay_shards"])

    def stop(self) -> None:
        self.learner.stop()
        self.shards.stop()
