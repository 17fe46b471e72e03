"""RolloutWorker: the paper's policy evaluator. Vectorized envs plus a policy copy; `sample()`
steps every env together with one batched forward pass per step and returns numpy arrays.

The same class is the driver's local worker and, through `as_remote`, a Ray actor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kuberl_trainer.cpu_quota import cpu_wait_s
from kuberl_trainer.envs.making import episode_steps, make_vector_env
from kuberl_trainer.envs.multi_agent import is_multi_agent, make_multi_agent_vector_env
from kuberl_trainer.envs.normalization import Normalizer, make_normalizer
from kuberl_trainer.envs.spaces import encode_obs, job_space_info
from kuberl_trainer.policies.interface import PolicyFactory, Stats, Weights, memory_of_its_own
from kuberl_trainer.policies.sample_batch import VALID, SampleBatch
from kuberl_trainer.rollouts.episodes import EpisodeTracker

if TYPE_CHECKING:  # a remote worker gets a Frozen copy, the config never imported (frozen.py)
    from kuberl_contract.config import AnyTrainerConfig

Observer = Callable[[object, np.ndarray], None]
"""`run_episodes`'s `observe`: the envs, and the episode each one shows (-1: none)."""


@dataclass
class Gradients:
    """What `compute_gradients()` hands the driver: gradients of one batch of a worker's own
    samples, and the batch's size and finished episodes instead of the batch itself."""

    gradients: list[np.ndarray]
    stats: Stats
    steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    normalization: dict | None = None  # the batch's, as SampleBatch.normalization
    policy_returns: dict[str, np.ndarray] | None = None  # as SampleBatch.policy_returns


@dataclass
class Perturbations:
    """What `evaluate_perturbations()` hands the driver (ES): where each antithetic pair's noise
    starts in the shared table, and the return and length of its two episodes, never the
    parameters or the episodes themselves."""

    noise_indices: np.ndarray  # (pairs,)
    returns: np.ndarray  # (pairs, 2): theta + noise, theta - noise
    lengths: np.ndarray  # (pairs, 2)
    observations: tuple[int, np.ndarray, np.ndarray]  # count, sum, sum of squares of those seen


class RolloutWorker:
    def __init__(
        self,
        policy_class: PolicyFactory,
        config: AnyTrainerConfig,
        num_envs: int,
        seed: int,
        worker_index: int = 0,
        num_workers: int = 0,
        cpus: int | None = None,
    ):
        """`worker_index` is 0 for the driver's local worker and 1..`num_workers` for the remote
        ones (Ape-X gives each its own exploration rate from them). `cpus`: a remote worker's
        CPUs (WorkerSet), which its policy and its vector env compute on; the local worker has
        the driver's. `policy_class` builds the policy: the algorithm's class, or for a remote
        worker that only acts `ActingOnly` (kuberl_trainer.policies.acting), with which its
        process never imports torch; `config` is then the job's config as a Frozen copy
        (kuberl_contract.frozen), with which it never imports the config package either.

        `policy` is the worker's policy (on the local worker, the learner's); `acting_policy` is
        the one that acts in the envs (sampling, evaluation, ES's perturbations): `policy`
        itself, or on the local worker of a learner off the CPU a CPU copy of it
        (`act_with_a_cpu_copy`)."""
        self.config = config
        self.cpus = cpus
        self.multi_agent = is_multi_agent(config.env)
        self.envs = self._make_envs(num_envs)
        self.spaces = self.envs.spaces if self.multi_agent else job_space_info(self.envs, config)
        self.policy = policy_class(self.spaces, config, seed)
        if cpus is not None:
            self.policy.limit_threads(cpus)
        # Where this copy of the policy acts: Ape-X's exploration rate depends on it.
        self.policy.worker_index = worker_index
        self.policy.num_workers = num_workers
        self.acting_policy = self.policy
        obs, _ = self.envs.reset(seed=seed)
        self.obs = encode_obs(obs, self.spaces)  # as the envs return it: not normalized
        self.num_envs = self.envs.num_envs  # lanes: a multi-agent env's agents in every copy
        self.seed = seed
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.episodes = self._episode_tracker()
        # Envs whose episode ended on the last step: their next step only resets them.
        self.resetting = np.zeros(self.num_envs, dtype=bool)
        # Its filter (spec.trainer.normalization; passes everything through when off); the
        # driver's local worker's holds the global statistics (see WorkerSet).
        self.normalizer: Normalizer = make_normalizer(config, self.spaces, self.num_envs)
        self._eval_envs: dict[int, Any] = {}  # evaluation envs by their number (one episode each)

    def _make_envs(self, count: int):
        """`count` copies of the job's env as one vector env (of their agents' lanes, for a
        multi-agent env)."""
        config = self.config
        if self.multi_agent:
            return make_multi_agent_vector_env(config, count)
        return make_vector_env(config.env, config.env_config, count, config.wrappers, self.cpus)

    def _episode_tracker(self) -> EpisodeTracker:
        if not self.multi_agent:
            return EpisodeTracker(self.num_envs)
        policies = [name for name, _ in self.spaces.policies]
        lane_policies = [policies[index] for index in self.spaces.lane_policies]
        return EpisodeTracker(
            self.num_envs, self.envs.num_agents, lane_policies if len(policies) > 1 else None
        )

    def _acting(self) -> np.ndarray:
        """Which lanes act on the next step: all but the envs' reset steps, and for a
        multi-agent env the lanes of agents in their episode."""
        if self.multi_agent:
            return self.envs.active & ~self.resetting
        return ~self.resetting

    @classmethod
    def as_remote(cls, num_cpus: float, num_gpus: float = 0):
        """This class as a Ray actor with declared resources. Ray does not restart it: the
        WorkerSet recreates dead workers itself so it can count them and resend weights."""
        import ray

        return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(cls)

    def act_with_a_cpu_copy(self) -> None:
        """From now on act with a CPU copy of the policy, which `refresh_acting_policy` brings up
        to date. Called before the policy moves to the learner's device: sampling makes one
        small forward pass per env step, which costs more on a GPU than on the CPU (launches and
        a device-to-host copy per step), so a learner on a GPU would sample slower than one on
        the CPU."""
        self.acting_policy = self.policy.sampling_copy()

    def refresh_acting_policy(
        self, weights: Weights | None = None, lock: AbstractContextManager | None = None
    ) -> None:
        """The CPU copy takes the policy's weights (and timesteps, for schedules such as
        epsilon): `weights` when the caller has them already (those sent to the remote workers),
        else fetched under `lock` (held while a learner thread changes the policy). Nothing
        without a copy."""
        if self.acting_policy is self.policy:
            return
        if weights is None:
            with lock or nullcontext():
                weights = self.policy.get_weights()
        self.acting_policy.set_weights(weights)
        self.acting_policy.set_global_timesteps(self.policy.global_timesteps)

    def sample(self, steps: int | None = None) -> SampleBatch:
        """`steps` (rollout_length if None) steps of every env, postprocessed by the policy (GAE,
        n-step, ...). The synchronous optimizers choose `steps` so that their batch's size does
        not depend on the number of workers sampling it (see WorkerSet.sample).

        The envs reset on the step after an episode's end (see `make_vector_env`); that step is
        marked invalid, so the policy learns nothing from it and it counts as no env step."""
        start, waited_before = time.perf_counter(), cpu_wait_s()
        if not self._acting().any():  # a window opening with every env's reset step could be empty
            raw_obs, *_ = self.envs.step(self.envs.action_space.sample())  # actions are ignored
            self.obs = self._observed(raw_obs)
            self.acting_policy.begin_episodes(self.resetting)
            self.resetting[:] = False
        horizon = self.config.hyperparameters.rollout_length if steps is None else steps
        n = self.num_envs
        # obs[t] is what the envs act on at step t and obs[t + 1] what that step returned: the
        # next observation, also at an episode's end, since the reset comes a step later.
        # uint8 images stay uint8 (see encode_obs): 4x less memory and bandwidth than float32
        obs = np.empty((horizon + 1, n, *self.spaces.obs_shape), dtype=self.spaces.obs_dtype)
        obs[0] = self.normalizer.normalize_obs(self.obs)
        rewards = np.empty((horizon, n), dtype=np.float32)
        terminateds = np.empty((horizon, n), dtype=bool)
        truncateds = np.empty((horizon, n), dtype=bool)
        valid = np.empty((horizon, n), dtype=bool)
        recorded: list[dict[str, np.ndarray]] = []  # the policy's columns, stacked at the end

        acting = self._acting()
        for t in range(horizon):
            env_actions, step_columns = self.acting_policy.compute_actions(obs[t])
            recorded.append(step_columns)
            raw_obs, rewards[t], terminateds[t], truncateds[t], info = self.envs.step(env_actions)
            self.obs = self._observed(raw_obs)
            obs[t + 1] = self.normalizer.normalize_obs(self.obs)
            # the lanes whose step was a reset step begin an episode (a recurrent policy's memory)
            self.acting_policy.begin_episodes(self.resetting)
            valid[t] = acting
            game_rewards, self.resetting = episode_steps(
                rewards[t], terminateds[t], truncateds[t], info
            )
            self.episodes.step(game_rewards, valid[t], self.resetting)  # 0 on a reset step
            acting = self._acting()

        rollout = {
            "obs": obs[:horizon],
            "next_obs": obs[1:],
            # the episode returns above are the env's own rewards', the learner's are scaled
            "rewards": self.normalizer.scale_rewards(rewards, terminateds | truncateds, valid),
            "terminateds": terminateds,
            "truncateds": truncateds,
            VALID: valid,
            **{key: np.stack([step[key] for step in recorded]) for key in recorded[0]},
        }
        episode_returns, episode_lengths, policy_returns = self.episodes.take()
        return SampleBatch(
            self.acting_policy.postprocess_trajectory(rollout),
            episode_returns,
            episode_lengths,
            sample_s=time.perf_counter() - start,
            cpu_wait_s=cpu_wait_s() - waited_before,
            normalization=self.normalizer.hand_over(),
            policy_returns=policy_returns or None,
        )

    def _observed(self, raw_obs) -> np.ndarray:
        """Observations the envs returned, encoded, and counted in the normalizer's statistics."""
        obs = encode_obs(raw_obs, self.spaces)
        self.normalizer.observe(obs)
        return obs

    def compute_gradients(self) -> Gradients:
        """Sample, then the policy's gradients on that batch (A3C: the driver applies them)."""
        batch = self.sample()
        gradients, stats = self.policy.compute_gradients(batch)
        return Gradients(
            gradients,
            stats,
            batch.env_steps,
            batch.episode_returns,
            batch.episode_lengths,
            batch.normalization,
            batch.policy_returns,
        )

    def evaluate_perturbations(self, noise: np.ndarray, pairs: int) -> Perturbations:
        """ES: one episode with each policy of `pairs` antithetic pairs of perturbations drawn
        from the shared noise table `noise`, as many at once as the worker has envs. The envs are
        left reset, so a sample() after it begins fresh episodes."""
        policy = self.acting_policy
        indices = policy.draw_noise_indices(len(noise), pairs)
        candidates = policy.perturbed_parameters(noise, indices)
        returns, lengths = self._run_episodes(
            self.envs,
            len(candidates),
            lambda obs, episodes: policy.act_perturbed(obs, candidates[episodes]),
        )
        self.obs = encode_obs(self.envs.reset()[0], self.spaces)
        self.episodes.reset()
        self.resetting[:] = False
        return Perturbations(
            indices,
            returns.reshape(pairs, 2),
            lengths.reshape(pairs, 2),
            policy.take_observation_stats(),
        )

    def evaluate(self, episodes: int, seed: int) -> float:
        """Mean return of `episodes` greedy episodes on envs of their own (one episode each,
        env k reset with `seed + k`)."""
        returns, _ = self.evaluation_episodes(episodes, seed)
        return float(returns.mean())

    def evaluation_episodes(
        self,
        episodes: int,
        seed: int,
        explore: bool = False,
        envs=None,
        observe: Observer | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The returns and lengths of `episodes` episodes on envs of their own (one episode each,
        env k reset with `seed + k`), greedy unless `explore`, normalized with the statistics as
        they are, which evaluation never updates. `envs`: the caller's to play on instead of the
        worker's evaluation envs (a video's, which render), `episodes` of them; `observe`: as
        `run_episodes`."""
        if envs is None:
            if episodes not in self._eval_envs:  # kept: a stop's confirmation reuses its own
                self._eval_envs[episodes] = self._make_envs(episodes)
            envs = self._eval_envs[episodes]
        with memory_of_its_own(self.acting_policy) as follow:  # leaves sampling's memory be

            def act(obs: np.ndarray, lane_episodes: np.ndarray) -> np.ndarray:
                follow(lane_episodes)
                return self.acting_policy.compute_actions(
                    self.normalizer.normalize_obs(obs), explore=explore
                )[0]

            return self._run_episodes(envs, episodes, act, seed=seed, observe=observe)

    def _run_episodes(
        self,
        envs,
        count: int,
        act: Callable[[np.ndarray, np.ndarray], np.ndarray],
        seed: int | None = None,
        observe: Observer | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`run_episodes`, with `act` given the observations encoded (see `encode_obs`)."""
        return run_episodes(
            envs,
            count,
            lambda obs, episodes: act(encode_obs(obs, self.spaces), episodes),
            seed,
            observe,
        )

    def set_weights(
        self, weights: Weights, global_timesteps: int, normalization: dict | None = None
    ) -> None:
        """The learner's weights and, with normalization on, the global statistics sent with
        them, which this worker normalizes with until the next ones come."""
        self.policy.set_weights(weights)
        self.policy.set_global_timesteps(global_timesteps)
        if normalization is not None:
            self.normalizer.set_stats(normalization)

    def get_weights(self) -> Weights:
        return self.policy.get_weights()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.envs.close()
        for envs in self._eval_envs.values():
            envs.close()


def run_episodes(
    envs,
    count: int,
    act: Callable[[np.ndarray, np.ndarray], np.ndarray],
    seed: int | None = None,
    observe: Observer | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The return and length of `count` whole episodes on `envs`, reset first: env k starts
    with episode k and, whenever its episode ends, takes the first one not yet started.
    `act(obs, episodes)` gives the actions for the envs' observations (as the envs return them),
    env k being on episode `episodes[k]` (an env with none left acts as the last episode; its
    steps count nowhere). An env whose episode ended resets on its next step (see
    `make_vector_env`): that step belongs to no episode.

    `observe(envs, episodes)`, when given, is called once the envs are reset and after every
    step, with the episode whose state env k shows now, `episodes[k]` (-1: none): the first
    state of an episode, then one per step the episode counts (a video records them)."""
    obs, _ = envs.reset(seed=seed)
    # A multi-agent env's lanes are its agents, `agents` per copy: a copy plays an episode, its
    # return the sum of its agents' rewards.
    agents = getattr(envs, "num_agents", 1)
    copies = envs.num_envs // agents
    returns = np.zeros(count)
    lengths = np.zeros(count, dtype=np.int64)
    current = np.arange(copies)  # the episode each env is on; count and above: none
    resetting = np.zeros(copies, dtype=bool)
    if observe is not None:
        observe(envs, np.where(current < count, current, -1))
    while (running := current < count).any():
        actions = act(obs, np.repeat(np.minimum(current, count - 1), agents))
        obs, reward, terminated, truncated, info = envs.step(actions)
        if observe is not None:
            # An env shows the state its step led to: of the episode it is on, which begins
            # with this step's state when the step reset the env.
            observe(envs, np.where(running, current, -1))
        reward, episode_ended = episode_steps(reward, terminated, truncated, info)
        if agents > 1:
            reward = reward.reshape(copies, agents).sum(axis=1)
            episode_ended = episode_ended.reshape(copies, agents).any(axis=1)
        counted = running & ~resetting
        returns[current[counted]] += reward[counted]
        lengths[current[counted]] += 1
        resetting = episode_ended
        ended = np.flatnonzero(counted & resetting)
        current[ended] = current.max() + 1 + np.arange(len(ended))
    return returns, lengths
