"""Self-play (spec.trainer.multiAgent.selfPlay): a policy learns against frozen snapshots of
itself. The learning policy's weights join a pool every snapshotEveryIterations iterations; before
each iteration the opponent policy takes one snapshot of the pool (the newest half the time, or
weighted by how seldom the policy beats it), which the next weight sync hands the rollout
workers. Each snapshot's games are counted, and the row reports the policy's recent win rate, the
opponent's snapshot, and, whenever a snapshot is taken, the greedy policy's win rate against fixed
opponents (`baseline_win_rates`): one moving at random among its legal actions, or your own.

A game counts as won when the learning policy's agents' return in it is above 0, lost below 0,
drawn at 0: two-player zero-sum games' +1, -1 and 0 (connect four, chess, go).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from kuberl_contract.progress_row import BASELINE_WIN_RATES, OPPONENT_SNAPSHOT, WIN_RATE
from kuberl_trainer.envs.making import EPISODE_ENDED, imported
from kuberl_trainer.envs.multi_agent import make_multi_agent_vector_env
from kuberl_trainer.policies.interface import Weights, memory_of_its_own


@dataclass
class Snapshot:
    """The learning policy's weights at `iteration`, and the games played against them."""

    iteration: int
    weights: Weights
    games: int = 0
    wins: int = 0

    @property
    def win_rate(self) -> float:
        return self.wins / self.games if self.games else 0.0


class SelfPlay:
    def __init__(self, config: Any, seed: int):
        self.config = config
        self.settings = config.multi_agent.self_play
        self.pool: deque[Snapshot] = deque(maxlen=self.settings.pool_size)
        self.opponent: Snapshot | None = None
        self.recent: deque[bool] = deque(maxlen=config.metrics_window)  # the policy's wins
        self.rng = np.random.default_rng([seed, 7])
        self.baselines: dict[str, float] | None = None

    def before_step(self, iteration: int, optimizer: Any) -> None:
        """Before iteration `iteration` (1, 2, ...): a snapshot when one is due, and the
        opponent's weights for the iteration."""
        policy = optimizer.policy
        settings = self.settings
        with optimizer.policy_lock:
            if not self.pool or (iteration - 1) % settings.snapshot_every_iterations == 0:
                weights = policy.members[settings.policy].get_weights()
                self.pool.append(Snapshot(iteration - 1, weights))
                self.baselines = None  # measured again for the policy that learns on
            self.opponent = self._draw()
            policy.members[settings.opponent].set_weights(self.opponent.weights)

    def _draw(self) -> Snapshot:
        pool = list(self.pool)
        if self.settings.sampling == "winRate":
            weights = np.array([(1.0 - snapshot.win_rate) ** 2 for snapshot in pool]) + 1e-3
            return pool[self.rng.choice(len(pool), p=weights / weights.sum())]
        if len(pool) == 1 or self.rng.random() < 0.5:
            return pool[-1]
        return pool[self.rng.integers(len(pool) - 1)]

    def after_step(self, policy_returns: dict | None, worker: Any, seed: int) -> dict[str, Any]:
        """The row's self-play entries, from the iteration's returns of each policy's agents."""
        returns = (policy_returns or {}).get(self.settings.policy, np.zeros(0))
        wins = (returns > 0).tolist()
        self.recent.extend(wins)
        if self.opponent is not None:
            self.opponent.games += len(wins)
            self.opponent.wins += sum(wins)
        if self.baselines is None and self.settings.baseline_episodes:
            self.baselines = {
                name: baseline_win_rate(
                    worker.acting_policy, self.config, self.settings, opponent_maker(name), seed
                )
                for name in self.settings.baselines
            }
        return {
            WIN_RATE: float(np.mean(self.recent)) if self.recent else None,
            OPPONENT_SNAPSHOT: None if self.opponent is None else self.opponent.iteration,
            BASELINE_WIN_RATES: self.baselines,
        }

    def state(self) -> dict[str, Any]:
        return {
            "pool": [vars(snapshot) for snapshot in self.pool],
            "recent": list(self.recent),
            "baselines": self.baselines,
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.pool.extend(Snapshot(**snapshot) for snapshot in state["pool"])
        self.recent.extend(state["recent"])
        self.baselines = state["baselines"]
        self.rng.bit_generator.state = state["rng"]


class RandomLegal:
    """An opponent moving uniformly at random among its legal actions (the action mask's, or all
    of a Discrete space's), or uniformly within a Box's bounds."""

    def __init__(self, spaces: Any, seed: int):
        self.spaces = spaces
        self.rng = np.random.default_rng(seed)

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        spaces = self.spaces
        if not spaces.discrete_actions:
            draws = self.rng.uniform(
                spaces.action_low, spaces.action_high, (len(obs), spaces.action_dim)
            )
            return draws.astype(np.float32), {"actions": draws.astype(np.float32)}
        n = spaces.action_discrete_n
        legal = obs[:, -n:] > 0.5 if spaces.action_mask_n else np.ones((len(obs), n), dtype=bool)
        scores = np.where(legal, self.rng.random((len(obs), n)), -1.0)
        actions = scores.argmax(axis=1)
        return actions, {"actions": actions}


class StandIn:
    """A baseline in the opponent's seat, with the opponent's spaces (which MultiAgentPolicy
    reads) whatever the baseline holds."""

    def __init__(self, baseline: Any, spaces: Any):
        self.baseline = baseline
        self.spaces = spaces

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        actions = np.asarray(self.baseline.compute_actions(obs, explore)[0])
        return actions, {"actions": actions}

    # a baseline keeps no memory (MultiAgentPolicy hands these on to every member)
    def begin_episodes(self, starts: np.ndarray) -> None:
        return None

    def get_memory(self) -> None:
        return None

    def set_memory(self, memory: Any) -> None:
        return None


def opponent_maker(name: str) -> Any:
    """What makes the baseline `name` (selfPlay.baselines): RandomLegal, or a module:Class."""
    return RandomLegal if name == "random" else imported(name, "multiAgent.selfPlay.baselines")


def baseline_win_rate(policy: Any, config: Any, settings: Any, make: Any, seed: int) -> float:
    """The share of `settings.baseline_episodes` games the learning policy, greedy, wins against
    the opponent `make(spaces, seed)` makes in the opponent's seats (each copy of the env plays
    one game)."""
    envs = make_multi_agent_vector_env(config, settings.baseline_episodes)
    names = policy.names
    opponent = policy.members[settings.opponent]
    policy.members[settings.opponent] = StandIn(make(opponent.spaces, seed), opponent.spaces)
    agents, copies = envs.num_agents, settings.baseline_episodes
    games = np.repeat(np.arange(copies), agents)  # each lane's game: one per copy
    returns = np.zeros(envs.num_envs)
    try:
        # a recurrent policy plays with a memory of its own, and sampling's is left be
        with memory_of_its_own(policy) as follow:
            obs, _ = envs.reset(seed=seed)
            playing = np.ones(copies, dtype=bool)
            while playing.any():
                follow(games)
                actions, _ = policy.compute_actions(obs, explore=False)
                obs, rewards, _, _, info = envs.step(actions)
                returns += rewards * np.repeat(playing, agents)
                playing &= ~info[EPISODE_ENDED].reshape(copies, agents).any(axis=1)
    finally:
        policy.members[settings.opponent] = opponent
        envs.close()
    mine = np.zeros(envs.num_envs, dtype=bool)
    mine[policy.lanes(names.index(settings.policy), envs.num_envs)] = True
    own_returns = np.where(mine, returns, 0.0).reshape(copies, agents).sum(axis=1)
    return float(np.mean(own_returns > 0))
