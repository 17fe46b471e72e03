"""PettingZoo envs for tests, importable as `multi_agent_envs:Class` (module:Class env names)."""

import functools

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv


class Matching(ParallelEnv):
    """Each agent sees a one-hot target among `actions` and is paid 1 for choosing it (0
    otherwise): a few thousand steps teach it. Agents come and go: `late` joins on the episode's
    third step, `early` is done (terminated) after its third, and the episode ends (truncated)
    after `length` steps. The hunters (`hunter_0`, `hunter_1`) see one more input (a constant 1)
    than the others, so that a job mapping them apart has policies of two shapes."""

    metadata = {"name": "matching_v0"}

    def __init__(self, length: int = 6, actions: int = 3, hunters: bool = True):
        self.length = length
        self.actions = actions
        self.possible_agents = ["early", "late", *(["hunter_0", "hunter_1"] if hunters else [])]
        self.rng = np.random.default_rng()
        self.targets: dict[str, int] = {}
        self.t = 0

    @functools.cache  # noqa: B019 (PettingZoo's own envs cache their spaces alike)
    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (self.actions + agent.startswith("hunter"),))

    @functools.cache  # noqa: B019
    def action_space(self, agent):
        return gym.spaces.Discrete(self.actions)

    def _observe(self, agent):
        obs = np.zeros(self.observation_space(agent).shape, dtype=np.float32)
        obs[self.targets[agent]] = 1.0
        if agent.startswith("hunter"):
            obs[-1] = 1.0
        return obs

    def _draw(self, agents):
        self.targets = {agent: int(self.rng.integers(self.actions)) for agent in agents}
        return {agent: self._observe(agent) for agent in agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = [agent for agent in self.possible_agents if agent != "late"]
        return self._draw(self.agents), {agent: {} for agent in self.agents}

    def step(self, actions):
        rewards = {agent: float(actions[agent] == self.targets[agent]) for agent in self.agents}
        self.t += 1
        terminations = {agent: agent == "early" and self.t == 3 for agent in self.agents}
        truncations = {agent: self.t >= self.length for agent in self.agents}
        acted = list(self.agents)
        self.agents = [agent for agent in acted if not (terminations[agent] or truncations[agent])]
        if self.t == 2 and "late" in self.possible_agents:
            self.agents.append("late")
        observations = self._draw(sorted(set(acted) | set(self.agents)))
        infos = {agent: {} for agent in observations}
        return observations, rewards, terminations, truncations, infos
