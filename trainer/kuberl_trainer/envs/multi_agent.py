"""Multi-agent envs (PettingZoo's Parallel API) as a rollout worker steps them: every agent of every
copy of the env is a lane of one vector env, so sampling, postprocessing and every optimizer work
on lanes as they do on a single-agent job's envs, and each policy acts for its own lanes
(policies/multi_agent.py).

Which envs are multi-agent ones, and how they are made, is envs/pettingzoo.py's.

Lanes are copy-major: lane `copy * A + k` is agent k (of the env's `possible_agents`, A of them) in
copy `copy`. A lane acts only while its agent is in the episode (`active`): agents that are done
before the others, or that appear later, leave their lanes inactive meanwhile, and inactive steps
are no transitions (the rollout worker marks them invalid). A copy whose episode ended (no agent
left) resets on its next step, as single-agent envs do (making.py's NEXT_STEP).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from kuberl_trainer.envs.making import EPISODE_ENDED, EnvError
from kuberl_trainer.envs.pettingzoo import is_multi_agent, make_parallel_env
from kuberl_trainer.envs.spaces import SpaceInfo, encode_obs, space_info

__all__ = [
    "MultiAgentSpaces",
    "MultiAgentVectorEnv",
    "agent_policies",
    "is_multi_agent",
    "make_multi_agent_vector_env",
    "make_parallel_env",
    "multi_agent_policy_spaces",
]

SHARED_POLICY = "shared"  # kuberl_contract.config.multi_agent's: this module imports no config
MAPPING_FIELD = "multiAgent.policyMapping"
MIXED_NORMALIZATION = (
    "one set of statistics would mix the observations of several policies' agents; normalize "
    "them in the env for now, or train one shared policy"
)
"""Why observation normalization is refused in a job of several policies."""


def agent_policies(agents: list[str], multi_agent: Any) -> dict[str, str]:
    """The policy each agent acts with, by `multi_agent` (the config's multiAgent section, or
    None: one shared policy). An agent no rule maps is an EnvError naming it."""
    if multi_agent is None:
        return dict.fromkeys(agents, SHARED_POLICY)
    if multi_agent.policy_per_agent:
        return {agent: agent for agent in agents}
    if not multi_agent.policy_mapping:
        return dict.fromkeys(agents, next(iter(multi_agent.policies), SHARED_POLICY))
    mapping, unmapped = {}, []
    for agent in agents:
        rule = next((rule for rule in multi_agent.policy_mapping if _matches(rule, agent)), None)
        if rule is None:
            unmapped.append(agent)
        else:
            mapping[agent] = rule.policy
    if unmapped:
        raise EnvError(
            f"no rule maps agent{'s' if len(unmapped) > 1 else ''} {', '.join(unmapped)} "
            f"to a policy (the env's agents: {', '.join(agents)})",
            MAPPING_FIELD,
        )
    return mapping


def _matches(rule: Any, agent: str) -> bool:
    if rule.regex is not None:
        return re.fullmatch(rule.regex, agent) is not None
    return fnmatch.fnmatchcase(agent, rule.agents)


@dataclass(frozen=True)
class MultiAgentSpaces(SpaceInfo):
    """The lanes' spaces as one SpaceInfo (every policy's observations fit its shape: the widest
    flat one, zero-padded, or the one image shape they share), and each policy's own."""

    policies: tuple[tuple[str, SpaceInfo], ...] = ()
    """Each policy's name and spaces, in the order of first appearance among the agents."""
    lane_policies: tuple[int, ...] = ()
    """The index (into `policies`) of each agent's policy: lane l's is lane_policies[l % A]."""
    policies_to_train: tuple[str, ...] = ()
    """The policies that learn; the others act frozen."""
    turn_based: bool = False
    """Whether one agent moves at a time (a turn-based AEC env): its turns' transitions span the
    others' moves (policies/turns.py)."""

    def lanes_of(self, policy: int, lanes: int) -> np.ndarray:
        """The indices of `policy`'s lanes among `lanes` (copy-major)."""
        return np.flatnonzero(np.resize(np.array(self.lane_policies) == policy, lanes))


def joint_spaces(
    policy_spaces: dict[str, SpaceInfo],
    lane_policies: list[int],
    to_train: list[str],
    turn_based: bool = False,
) -> MultiAgentSpaces:
    """Every policy's spaces as one SpaceInfo for the lanes (see MultiAgentSpaces); policies whose
    actions or images differ in kind are refused."""
    infos = list(policy_spaces.values())
    first = infos[0]
    if len({info.discrete_actions for info in infos}) > 1:
        raise EnvError(
            "its agents' actions are Discrete for some policies and Box for others; "
            "kuberl's policies of one job take one kind",
            MAPPING_FIELD,
        )
    images = {info.image for info in infos}
    if len(images) > 1:
        raise EnvError("its policies' image observations differ in shape", MAPPING_FIELD)
    widest = max(infos, key=lambda info: info.obs_dim)
    flat = first.image is None
    base = (
        first
        if len(infos) == 1
        else SpaceInfo(
            widest.obs_dim if flat else first.obs_dim,
            None,
            max(info.action_discrete_n for info in infos) if first.discrete_actions else None,
            max(info.action_dim for info in infos),
            None,
            None,
            first.image,
        )
    )
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    # The lanes' observations come encoded already (MultiAgentVectorEnv._encoded): flat floats,
    # an action mask still last where one policy has one.
    fields |= {"structured": None, "obs_discrete_n": None, "obs_discrete_start": 0}
    return MultiAgentSpaces(
        **fields,
        policies=tuple(policy_spaces.items()),
        lane_policies=tuple(lane_policies),
        policies_to_train=tuple(to_train),
        turn_based=turn_based,
    )


@dataclass
class _Copy:
    """One copy of the env and where its episode is."""

    env: Any
    resetting: bool = False  # its episode ended: the next step resets it
    agents: set[str] = field(default_factory=set)  # in the episode now


class MultiAgentVectorEnv:
    """`num_copies` copies of a ParallelEnv, stepped in turn, as a vector env of their agents'
    lanes (see the module's docstring). Observations come encoded for the networks (each lane's
    by its policy's spaces, see encode_obs) into the lanes' joint layout, so `encode_obs` with the
    joint spaces leaves them as they are."""

    def __init__(self, make, num_copies: int, multi_agent: Any, model: Any, images: bool):
        self.copies = [_Copy(make()) for _ in range(num_copies)]
        first = self.copies[0].env
        self.agents: list[str] = list(first.possible_agents)
        self.policy_of = agent_policies(self.agents, multi_agent)
        names = list(dict.fromkeys(self.policy_of.values()))
        # each policy's agents, with their index among the copy's lanes (the encoding's, per step)
        self.lanes_of_policy = {
            name: [
                (k, agent) for k, agent in enumerate(self.agents) if self.policy_of[agent] == name
            ]
            for name in names
        }
        self.obs_spaces = {agent: first.observation_space(agent) for agent in self.agents}
        self.act_spaces = {agent: first.action_space(agent) for agent in self.agents}
        policy_spaces = {
            name: self._policy_spaces(name, multi_agent, model, images) for name in names
        }
        trained = None if multi_agent is None else multi_agent.trained_policies
        if trained is not None and (unknown := [name for name in trained if name not in names]):
            raise EnvError(
                f"{unknown[0]!r} acts for no agent (the policies: {', '.join(names)})",
                "multiAgent.policiesToTrain",
            )
        pattern = [names.index(self.policy_of[agent]) for agent in self.agents]
        self_play = None if multi_agent is None else multi_agent.self_play
        if self_play is not None:
            pattern = self._seats(pattern, names, self_play)
        self.spaces = joint_spaces(
            policy_spaces,
            pattern,
            names if trained is None else trained,
            getattr(first, "turn_based", False),
        )
        self.num_agents = len(self.agents)
        self.num_envs = num_copies * self.num_agents
        self.single_observation_space = self.obs_spaces[self.agents[0]]
        self.single_action_space = self.act_spaces[self.agents[0]]
        self.action_space = _ZeroActions(self.num_envs, self.spaces)
        self.active = np.zeros(self.num_envs, dtype=bool)
        self.metadata = getattr(first, "metadata", {})

    def _seats(self, pattern: list[int], names: list[str], self_play: Any) -> list[int]:
        """The lanes' policies over a copy (two copies, with alternate seats: the second swaps
        the learning policy's agents and the opponent's). The opponent's agents must take the
        learning policy's spaces, as its snapshots act for them."""
        learner, opponent = names.index(self_play.policy), names.index(self_play.opponent)
        seats = {
            index: [a for a, p in zip(self.agents, pattern, strict=True) if p == index]
            for index in (learner, opponent)
        }
        mine, theirs = seats[learner][0], seats[opponent][0]
        if (self.obs_spaces[mine], self.act_spaces[mine]) != (
            self.obs_spaces[theirs],
            self.act_spaces[theirs],
        ):
            raise EnvError(
                f"the opponent's agent {theirs} acts with snapshots of {self_play.policy!r}, "
                f"whose agent {mine} has other spaces",
                "multiAgent.selfPlay.opponent",
            )
        if not self_play.alternate_seats:
            return pattern
        swap = {learner: opponent, opponent: learner}
        return pattern + [swap.get(index, index) for index in pattern]

    def _policy_spaces(self, name: str, multi_agent: Any, model: Any, images: bool) -> SpaceInfo:
        """The spaces of policy `name`: its agents' (which must all be the same)."""
        agents = [agent for _, agent in self.lanes_of_policy[name]]
        first = agents[0]
        for agent in agents[1:]:
            if (self.obs_spaces[agent], self.act_spaces[agent]) != (
                self.obs_spaces[first],
                self.act_spaces[first],
            ):
                raise EnvError(
                    f"agents {first} and {agent} act with policy {name!r}, and their spaces "
                    f"differ ({self.obs_spaces[first]} and {self.obs_spaces[agent]}, "
                    f"{self.act_spaces[first]} and {self.act_spaces[agent]}): map them to "
                    "policies of their own",
                    MAPPING_FIELD,
                )
        spec = multi_agent.policies.get(name) if multi_agent is not None else None
        own_model = spec.model if spec is not None and spec.model is not None else model
        return space_info(self.obs_spaces[first], self.act_spaces[first], own_model, images)

    # -- the vector env's API ------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations = []
        for index, copy in enumerate(self.copies):
            obs, _ = copy.env.reset(seed=None if seed is None else seed + index)
            copy.agents, copy.resetting = set(copy.env.agents), False
            observations.append(obs)
        self.active = self._active()
        return self._encoded(observations), {}

    def step(self, actions: np.ndarray):
        lanes, n = self.num_envs, self.num_agents
        rewards = np.zeros(lanes, dtype=np.float32)
        terminated = np.zeros(lanes, dtype=bool)
        truncated = np.zeros(lanes, dtype=bool)
        observations = []
        for index, copy in enumerate(self.copies):
            if copy.resetting:  # the step after its episode ended only resets it
                obs, _ = copy.env.reset()
                copy.agents, copy.resetting = set(copy.env.agents), False
                observations.append(obs)
                continue
            acting = {
                agent: self._env_action(agent, actions[index * n + k])
                for k, agent in enumerate(self.agents)
                if agent in copy.agents
            }
            obs, reward, term, trunc, _ = copy.env.step(acting)
            for k, agent in enumerate(self.agents):
                lane = index * n + k
                rewards[lane] = reward.get(agent, 0.0)
                terminated[lane] = term.get(agent, False)
                truncated[lane] = trunc.get(agent, False)
            done = {agent for agent in acting if term.get(agent) or trunc.get(agent)}
            copy.agents = set(copy.env.agents) - done
            copy.resetting = not copy.agents
            observations.append(obs)
        self.active = self._active()
        ended = np.repeat([copy.resetting for copy in self.copies], n)
        return self._encoded(observations), rewards, terminated, truncated, {EPISODE_ENDED: ended}

    def close(self) -> None:
        for copy in self.copies:
            copy.env.close()

    # -- lanes ---------------------------------------------------------------------------------

    def _active(self) -> np.ndarray:
        """Which lanes act on the next step: their agent is in its copy's episode."""
        return np.array(
            [
                not copy.resetting and agent in copy.agents
                for copy in self.copies
                for agent in self.agents
            ]
        )

    def _env_action(self, agent: str, action: np.ndarray) -> Any:
        """A lane's action as its agent's space takes it (the lanes' actions are padded)."""
        space = self.act_spaces[agent]
        if isinstance(space, gym.spaces.Discrete):
            return int(action)
        values = np.asarray(action).ravel()[: int(np.prod(space.shape))].reshape(space.shape)
        return values.astype(space.dtype) if isinstance(space, gym.spaces.MultiDiscrete) else values

    def _encoded(self, observations: list[dict[str, Any]]) -> np.ndarray:
        """The copies' observations (agent -> observation dicts) as the lanes' joint array: each
        policy's lanes encoded by its spaces, zeros where an agent has no observation."""
        spaces = self.spaces
        out = np.zeros((self.num_envs, *spaces.obs_shape), dtype=spaces.obs_dtype)
        for name, info in spaces.policies:
            agents = self.lanes_of_policy[name]
            space = self.obs_spaces[agents[0][1]]
            rows, items = [], []
            for copy_index, obs in enumerate(observations):
                for k, agent in agents:
                    if agent in obs:
                        rows.append(copy_index * self.num_agents + k)
                        items.append(obs[agent])
            if not rows:
                continue
            batch = gym.vector.utils.concatenate(
                space, items, gym.vector.utils.create_empty_array(space, len(items))
            )
            encoded = encode_obs(batch, info)
            if info.image is None:
                out[rows, : encoded.shape[1]] = encoded
            else:
                out[rows] = encoded
        return out


class _ZeroActions:
    """The lanes' action space as the rollout worker samples it on a step that only resets the
    envs (the actions are ignored): zeros of the lanes' shape."""

    def __init__(self, lanes: int, spaces: SpaceInfo):
        self.shape = (lanes,) if spaces.discrete_actions else (lanes, spaces.action_dim)
        self.dtype = np.int64 if spaces.discrete_actions else np.float32

    def sample(self) -> np.ndarray:
        return np.zeros(self.shape, dtype=self.dtype)


def refuse_wrappers() -> None:
    """A multi-agent job's wrappers: an EnvError, since gymnasium's wrap single envs."""
    raise EnvError(
        "gymnasium wrappers wrap single-agent envs; wrap a PettingZoo env in its module "
        "(SuperSuit's wrappers) and name that module in env",
        "wrappers",
    )


def make_multi_agent_vector_env(config: Any, num_copies: int) -> MultiAgentVectorEnv:
    """`num_copies` copies of the job's multi-agent env as one vector env of lanes."""
    if config.wrappers:
        refuse_wrappers()
    envs = MultiAgentVectorEnv(
        lambda: make_parallel_env(config.env, config.env_config),
        num_copies,
        config.multi_agent,
        config.model,
        config.image_observations,
    )
    if config.normalization.observations and len(envs.spaces.policies) > 1:
        envs.close()
        raise EnvError(
            MIXED_NORMALIZATION,
            "normalization.observations",
        )
    return envs


def multi_agent_policy_spaces(
    env: str,
    env_config: dict[str, Any],
    multi_agent: Any,
    model: Any,
    images: bool,
) -> tuple[tuple[SpaceInfo, gym.Space], ...]:
    """Each policy's spaces and action space in the multi-agent job (for validation): the env made
    once, its agents mapped to policies by `multi_agent` (the config's multiAgent section), their
    spaces checked as the rollout workers check them. Raises EnvError naming the field where they
    cannot be."""
    envs = MultiAgentVectorEnv(
        lambda: make_parallel_env(env, env_config), 1, multi_agent, model, images
    )
    envs.close()
    action_spaces = {envs.policy_of[agent]: envs.act_spaces[agent] for agent in envs.agents}
    return tuple((info, action_spaces[name]) for name, info in envs.spaces.policies)
