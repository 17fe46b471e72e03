"""Trainer: one algorithm's training, an iteration at a time.

It holds the rollout workers, the policy and its optimizer, and the counters that a progress row
reports, and it can hand over and take back its whole state in memory. It knows nothing of the
process it runs in: the Driver wraps one in a job (Ray, signals, checkpoints on a store,
progress files, metrics), and population-based training runs one per trial inside a Ray actor.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter, deque
from typing import Any

import numpy as np
import torch

from kuberl_contract.config import AnyTrainerConfig, LearnerDevice, RolloutConfig, frozen
from kuberl_contract.progress_row import (
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    EPISODES_THIS_ITER,
    EPISODES_TOTAL,
    EVALUATION_CONFIRMED,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    SAMPLES_PER_S,
    STRAGGLERS_DROPPED,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTEPS_THIS_ITER,
    TIMESTEPS_TOTAL,
    TIMESTEPS_TRAINED_THIS_ITER,
    WORKER_DOWNTIME_S,
    WORKER_RESTARTS,
    WORKERS_READY,
)
from kuberl_trainer.cpu_quota import usable_cpus
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.device_choice import DeviceTrial, learner_devices
from kuberl_trainer.job.evaluation import greedy_evaluation
from kuberl_trainer.job.policy_metrics import PolicyMetrics
from kuberl_trainer.job.self_play import SelfPlay
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.rollouts.interrupt import StopRequest
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet

log = logging.getLogger(__name__)

# Small MLPs train fastest on one thread; more threads only add synchronisation overhead, and on
# a shared node they steal cores from the rollout workers. A CNN's convolutions are another
# matter (see `learner_torch_threads`).
LEARNER_TORCH_THREADS = 1


def learner_torch_threads(spaces: SpaceInfo) -> int:
    """Threads of the learner's torch: one for an MLP, every CPU this process may use for a CNN
    (within its pod's CPU limit: see cpu_quota.py), whose forward and backward passes parallelize
    and are most of the job's time."""
    if spaces.image is None:
        return LEARNER_TORCH_THREADS
    return usable_cpus()


class Trainer:
    def __init__(
        self,
        config: AnyTrainerConfig,
        rollout: RolloutConfig,
        seed: int,
        learner_gpus: int = 0,
        stop_request: StopRequest | None = None,
        learner_device: LearnerDevice = "auto",
    ):
        """`seed` is the run's (the config's, or one drawn for it); `stop_request` is what a
        signal sets to drop an unfinished iteration (see interrupt.py); `learner_device` is
        spec.learner.device (see device_choice.py)."""
        self.config = config
        self.rollout = rollout
        self.seed = seed
        self.learner_gpus = learner_gpus
        self.learner_device = learner_device
        self.stop_request = stop_request or StopRequest()
        window = config.metrics_window
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.policy_metrics = PolicyMetrics(window)
        self_play = config.multi_agent.self_play if config.multi_agent else None
        self.self_play = None if self_play is None else SelfPlay(config, seed)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.iteration = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.evaluation_return_mean: float | None = None
        self.evaluation_confirmed: bool | None = None  # see progress_row.EVALUATION_CONFIRMED
        self.workers: WorkerSet | None = None
        self.optimizer = None
        self.placement = ""  # where the learner and the sampling run (see `placement`)

    @property
    def needs_ray(self) -> bool:
        """Ray is started (or joined) only for remote actors: none without remote workers."""
        return self.rollout.replicas > 0

    # -- building and ending ----------------------------------------------------------------

    def seed_everything(self) -> None:
        """This process's random generators from the run's seed (a restored state replaces
        them)."""
        torch.set_num_threads(LEARNER_TORCH_THREADS)
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        torch.manual_seed(self.seed)

    def build(self, resumed_iteration: int = 0) -> None:
        """The rollout workers (Ray actors when `rollout.replicas` > 0: Ray must be up), the
        policy on the learner's devices (and, with the learner off the CPU, the CPU copy the local
        worker acts with) and the optimizer. `resumed_iteration` (0 for a new run) gives the
        workers of a resumed run seeds of their own."""
        self.workers = self._make_workers(resumed_iteration)
        self.workers.stop_request = self.stop_request
        devices, warning = learner_devices(self.learner_gpus, torch.cuda.device_count())
        if warning:
            log.warning(warning)
        local_copy = samples_on_a_cpu_copy(devices[0])
        if local_copy:  # made while the learner's policy is still on the CPU
            self.workers.act_locally_with_a_cpu_copy()
        self.optimizer = algorithms.optimizer_class(self.config)(self.workers, self.config)
        self.optimizer.place(devices)  # the local worker's policy is the learner
        torch.set_num_threads(learner_torch_threads(self.workers.local_worker.spaces))
        self.placement = placement(devices, local_copy, self.rollout.replicas)
        policy = self.optimizer.policy
        if (
            self.learner_gpus >= 1
            and self.learner_device == "auto"
            and local_copy  # the learner is off the CPU
            and isinstance(policy, TorchPolicy)
            and policy.towers is None  # LocalMultiGPU's towers were asked for by name
        ):
            DeviceTrial(policy, devices[0], self._chose_device).install()
            self.placement += (
                "; its first learn calls are timed there and on the CPU, and it stays on the "
                "faster (learner.device: auto)"
            )
        log.info(self.placement)

    def _chose_device(self, device: str, reason: str) -> None:
        self.placement = reason

    def stop(self) -> None:
        """End the optimizer's threads and the rollout workers."""
        if self.optimizer is not None:
            self.optimizer.stop()
        if self.workers is not None:
            self.workers.stop()

    def _make_workers(self, resumed_iteration: int) -> WorkerSet:
        # Remote workers only act: where they can, without torch (see policy/acting.py), and
        # then reading a Frozen copy of the config, without pydantic (see frozen.py).
        policy_class, remote_policy, only_acts = algorithms.worker_policies(self.config)
        starts: Counter[int] = Counter()  # of each worker slot in this run

        def worker_kwargs(index: int) -> dict[str, Any]:
            seed = worker_seed(self.seed, index, resumed_iteration, starts[index])
            starts[index] += 1
            remote = index > 0
            return {
                "policy_class": remote_policy if remote else policy_class,
                "config": frozen(self.config) if remote and only_acts else self.config,
                "num_envs": self.rollout.envs_per_worker,
                "seed": seed,
                "worker_index": index,
                "num_workers": self.rollout.most,
            }

        # A slot for each of the most workers (maxReplicas); training starts with the fewest,
        # and the batches of the synchronous optimizers stay those of `replicas` workers.
        return WorkerSet(
            RolloutWorker,
            worker_kwargs,
            self.rollout.most,
            self.rollout.cpus_per_worker,
            self.rollout.ray_resources,
            policy_class.worker_start_order(self.rollout.most),
            fewest=self.rollout.fewest,
            batch_replicas=self.rollout.replicas,
        )

    # -- iterations ---------------------------------------------------------------------------

    @property
    def timesteps(self) -> int:
        return self.optimizer.counters.steps_sampled

    @property
    def env_spaces(self) -> tuple[Any, Any]:
        """The observation and action spaces of the job's envs (after its wrappers): what its
        checkpoints record, so that using the policy needs no env."""
        envs = self.workers.local_worker.envs
        return envs.single_observation_space, envs.single_action_space

    def step(self) -> tuple[dict[str, Any], dict[str, float], int]:
        """One iteration: the optimizer's step, then the greedy evaluation when one is due.
        Returns the progress row (without its checkpoint, which the caller knows), the seconds
        each of the optimizer's timers ran, and the workers restarted meanwhile. Raises
        IterationAbandoned when the stop request dropped the iteration."""
        optimizer = self.optimizer
        timers_before = dict(optimizer.counters.timers)
        restarts_before = optimizer.workers.restarts
        start = time.perf_counter()
        if self.self_play is not None:  # the opponent's snapshot for this iteration
            self.self_play.before_step(self.iteration + 1, optimizer)
        result = optimizer.step()
        self.iteration += 1
        self.recent_returns.extend(result.episode_returns.tolist())
        policies = self.policy_metrics.take(result.policy_returns, result.learner_stats)
        if self.self_play is not None:
            with optimizer.policy_lock:
                policies |= self.self_play.after_step(
                    result.policy_returns,
                    optimizer.workers.local_worker,
                    self.seed + self.iteration,
                )
        self.recent_lengths.extend(result.episode_lengths.tolist())
        self.episodes_total += len(result.episode_returns)
        evaluation = self.config.evaluation
        evaluated = (
            evaluation.every_iterations and self.iteration % evaluation.every_iterations == 0
        )
        if evaluated:
            with optimizer.policy_lock:
                optimizer.workers.refresh_local_copy()  # the learner has learned since
                self.evaluation_return_mean, self.evaluation_confirmed = greedy_evaluation(
                    optimizer.workers.local_worker, self.config, self.seed, self.iteration
                )
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        row = {
            **self.totals(),
            TIMESTEPS_THIS_ITER: result.steps_sampled,
            TIMESTEPS_TRAINED_THIS_ITER: result.steps_trained,
            EPISODES_TOTAL: self.episodes_total,
            EPISODES_THIS_ITER: len(result.episode_returns),
            EPISODE_RETURN_MAX: max(self.recent_returns, default=math.nan),
            EPISODE_RETURN_MIN: min(self.recent_returns, default=math.nan),
            EPISODE_LEN_MEAN: mean(self.recent_lengths),
            SAMPLES_PER_S: result.steps_sampled / elapsed,
            TIME_THIS_ITER_S: elapsed,
            WORKER_RESTARTS: optimizer.workers.restarts,
            STRAGGLERS_DROPPED: optimizer.workers.stragglers_dropped,
            WORKER_DOWNTIME_S: optimizer.workers.downtime_s,
            WORKERS_READY: optimizer.workers.num_ready,
            **result.learner_stats,
            **policies,
        }
        timer_deltas = {
            name: seconds - timers_before.get(name, 0.0)
            for name, seconds in optimizer.counters.timers.items()
        }
        return row, timer_deltas, optimizer.workers.restarts - restarts_before

    def totals(self) -> dict[str, Any]:
        """The cumulative part of a progress row: what stop conditions are checked against."""
        return {
            ITERATION: self.iteration,
            TIMESTEPS_TOTAL: self.timesteps,
            EPISODE_RETURN_MEAN: mean(self.recent_returns),
            EVALUATION_RETURN_MEAN: self.evaluation_return_mean,
            EVALUATION_CONFIRMED: self.evaluation_confirmed,
            TIME_TOTAL_S: self.time_total_s,
        }

    # -- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a copy needs to go on where this one is: the policy (weights and the
        learner's optimizer state), the optimizer's counters, this trainer's counters, the
        process's random generators and, with normalization on, the global normalization
        statistics. Tensors and plain data only (a checkpoint's contents)."""
        optimizer = self.optimizer
        with optimizer.policy_lock:
            policy_state, optimizer_state = optimizer.policy.get_state(), optimizer.save()
        normalization = optimizer.workers.normalization.state()
        return {
            "policy": policy_state,
            "optimizer": optimizer_state,
            **({} if normalization is None else {"normalization": normalization}),
            **({} if self.self_play is None else {"self_play": self.self_play.state()}),
            "driver": {
                "iteration": self.iteration,
                "episodes_total": self.episodes_total,
                "time_total_s": self.time_total_s,
                "recent_returns": list(self.recent_returns),
                "recent_lengths": list(self.recent_lengths),
                "evaluation_return_mean": self.evaluation_return_mean,
                "evaluation_confirmed": self.evaluation_confirmed,
                "seed": self.seed,
                "rng": {
                    "python": random.getstate(),
                    "numpy": np.random.get_state(legacy=False),  # a dict: plain data
                    "torch": torch.get_rng_state(),
                },
            },
        }

    def warm_start(self, state: dict[str, Any]) -> None:
        """Start from another run's trained policy (its checkpoint's state): the policy's
        weights and Adam's moments (see TorchPolicy.warm_start) and, where both runs normalize
        observations, the statistics; this run's counters and random generators stay as they
        are. The workers get them before their next call."""
        optimizer = self.optimizer
        with optimizer.policy_lock:
            optimizer.policy.warm_start(state["policy"])
        if "normalization" in state:
            optimizer.workers.normalization.load(state["normalization"])

    def policy_state(self) -> dict[str, Any]:
        """What acting with the trained policy needs, as a checkpoint's state holds it: the
        policy's state and, with normalization on, the global statistics."""
        optimizer = self.optimizer
        with optimizer.policy_lock:
            policy = optimizer.policy.get_state()
        normalization = optimizer.workers.normalization.state()
        return {
            "policy": policy,
            **({} if normalization is None else {"normalization": normalization}),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Go on from `state` (see `state`); the workers get the weights (and the normalization
        statistics) before their next call. A state without normalization statistics (saved
        with normalization off) leaves them empty."""
        self.optimizer.policy.set_state(state["policy"])
        self.optimizer.restore(state["optimizer"])
        if "normalization" in state:
            self.optimizer.workers.normalization.load(state["normalization"])
        driver = state["driver"]
        self.iteration = driver["iteration"]
        self.episodes_total = driver["episodes_total"]
        self.time_total_s = driver["time_total_s"]
        self.recent_returns.clear()
        self.recent_returns.extend(driver["recent_returns"])
        self.recent_lengths.clear()
        self.recent_lengths.extend(driver["recent_lengths"])
        self.evaluation_return_mean = driver["evaluation_return_mean"]
        self.evaluation_confirmed = driver.get("evaluation_confirmed")  # older checkpoints lack it
        if self.self_play is not None and "self_play" in state:
            self.self_play.restore(state["self_play"])
        random.setstate(driver["rng"]["python"])
        np.random.set_state(driver["rng"]["numpy"])
        torch.set_rng_state(driver["rng"]["torch"])


def mean(values) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def samples_on_a_cpu_copy(learner_device: str) -> bool:
    """Whether the driver's local worker acts with a CPU copy of the learner's policy: where the
    learner is off the CPU. Acting is one small forward pass per env step, which a GPU makes
    slower, not faster (kernel launches and a device-to-host copy each step: CartPole PPO sampled
    at half the speed with its learner on an H200); the copy takes the learner's weights as the
    remote workers do, once per learning step at most, never per env step. On the CPU the local
    worker acts with the learner's policy itself: no copy, no cost."""
    return torch.device(learner_device).type != "cpu"


def placement(devices: list[str], local_copy: bool, replicas: int) -> str:
    """Where the learner learns and where sampling runs, for the log at start."""
    learner = ", ".join(dict.fromkeys(devices))
    if len(devices) > 1:
        learner += f" ({len(devices)} towers)"
    workers = f"{replicas} rollout worker{'s' if replicas != 1 else ''}; " if replicas else ""
    driver = (
        "a CPU copy of the policy, refreshed from the learner after each learn step"
        if local_copy
        else "the learner's policy"
    )
    return f"learner on {learner}; sampling on the CPU ({workers}the driver's with {driver})"


def worker_seed(seed: int, index: int, resumed_iteration: int, start: int) -> int:
    """The seed of rollout worker `index` (0: the local one) on its `start`-th start in a run that
    resumed at `resumed_iteration` (0: a new run). Seeds lie far apart per worker, so that workers
    never replay each other's episodes; a worker started again (replacing a lost one, or in a
    resumed run) gets a seed of its own, so that its envs do not replay the episodes of the first
    start."""
    if resumed_iteration == 0 and start == 0:
        return seed + 10_007 * index
    mixed = np.random.SeedSequence([seed, index, resumed_iteration, start]).generate_state(1)
    return int(mixed[0])
