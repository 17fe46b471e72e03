"""Fault tolerance with real rollout workers as Ray actors: a killed worker is replaced, counted,
and training goes on meanwhile."""

import os
import signal
import time

from kuberl_trainer.optimizers.sync_samples import SyncSamplesOptimizer
from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet
from testkit import all_started, trainer_config

ROLLOUT, ENVS = 16, 2
BATCH = ROLLOUT * ENVS  # env steps of a worker's batch at most (less the envs' reset steps)


def test_killed_worker_is_replaced_and_training_continues(ray_local):
    config = trainer_config(algorithm="PPO", hyperparameters={"rollout_length": ROLLOUT})

    def kwargs(index):
        return {"policy_class": PPOPolicy, "config": config, "num_envs": ENVS, "seed": index}

    workers = WorkerSet(RolloutWorker, kwargs, num_remote=2, cpus_per_worker=0.5)
    try:
        all_started(workers)
        optimizer = SyncSamplesOptimizer(workers, config)
        assert BATCH < optimizer.step().steps_sampled <= 2 * BATCH  # both workers' batches
        victim = ray_local.get(workers.remote_workers[0].pid.remote())
        os.kill(victim, signal.SIGKILL)

        after_kill = optimizer.step()  # the survivor's batch still trains the policy
        assert after_kill.steps_sampled == after_kill.steps_trained <= BATCH
        assert workers.restarts == 1

        deadline = time.monotonic() + 60
        while len(workers.remote_workers) < 2:
            assert time.monotonic() < deadline, "the replacement worker never became ready"
            optimizer.step()
        assert BATCH < optimizer.step().steps_sampled <= 2 * BATCH
        assert victim not in ray_local.get([w.pid.remote() for w in workers.remote_workers])
        assert workers.restarts == 1
    finally:
        workers.stop()
