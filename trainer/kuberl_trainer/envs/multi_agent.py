"""Multi-agent envs (PettingZoo's Parallel API) as a rollout worker steps them: every agent of every
copy of the env is a lane of one vector env, so sampling, postprocessing and every optimizer work
on lanes as they do on a single-agent job's envs, and each policy acts for its own lanes
(policies/multi_agent.py).

`spec.trainer.env: pettingzoo:MODULE` names a PettingZoo env module
(`pettingzoo:mpe2.simple_spread_v3`), whose `parallel_env(**envConfig)` makes the env, or whose
AEC `env(**envConfig)` does, converted by PettingZoo's `aec_to_parallel`; `module:Class` may name
a ParallelEnv subclass too.

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

from kuberl_trainer.envs.making import EPISODE_ENDED, EnvError, imported
from kuberl_trainer.envs.search_path import import_env_module
from kuberl_trainer.envs.spaces import SpaceInfo, encode_obs, space_info

PETTINGZOO = "pettingzoo:"
"""The prefix of `env` naming a PettingZoo env module."""
SHARED_POLICY = "shared"  # kuberl_contract.config.multi_agent's: this module imports no config
MAPPING_FIELD = "multiAgent.policyMapping"


def is_multi_agent(env: str) -> bool:
    """Whether `env` names a multi-agent env: a PettingZoo module, or a ParallelEnv class."""
    if env.startswith(PETTINGZOO):
        return True
    if ":" not in env or env.split(":", 1)[0] in gym.registry:
        return False
    try:
        from pettingzoo import AECEnv, ParallelEnv
    except ImportError:  # without PettingZoo, no class can be one of its envs
        return False
    made = imported(env, "env")
    return isinstance(made, type) and issubclass(made, ParallelEnv | AECEnv)


def make_parallel_env(env: str, env_config: dict[str, Any]) -> Any:
    """The PettingZoo ParallelEnv `env` names, made with `env_config`."""
    try:
        from pettingzoo import AECEnv, ParallelEnv
        from pettingzoo.utils.conversions import aec_to_parallel
    except ImportError as exc:
        raise EnvError(
            f"{env!r} is a PettingZoo env, and PettingZoo is not installed: "
            "pip install 'kuberl[multiagent]'"
        ) from exc
    if env.startswith(PETTINGZOO):
        module_name = env[len(PETTINGZOO) :]
        try:
            module = import_env_module(module_name)
        except (ImportError, ValueError) as exc:
            raise EnvError(f"cannot import module {module_name!r}: {exc}") from exc
        make = getattr(module, "parallel_env", None) or getattr(module, "env", None)
        if make is None:
            raise EnvError(f"{env!r}: the module has neither parallel_env() nor env()")
    else:
        make = imported(env, "env")
    try:
        made = make(**env_config)
    except Exception as exc:  # any constructor failure is the job's problem to report
        raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
    if isinstance(made, AECEnv):
        made = aec_to_parallel(made)
    if not isinstance(made, ParallelEnv):
        raise EnvError(f"{env!r} made a {type(made).__name__}, not a PettingZoo ParallelEnv")
    return made


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

    def lanes_of(self, policy: int, lanes: int) -> np.ndarray:
        """The indices of `policy`'s lanes among `lanes` (copy-major)."""
        return np.flatnonzero(np.resize(np.array(self.lane_policies) == policy, lanes))


def joint_spaces(
    policy_spaces: dict[str, SpaceInfo], lane_policies: list[int], to_train: list[str]
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
    return MultiAgentSpaces(
        **fields,
        policies=tuple(policy_spaces.items()),
        lane_policies=tuple(lane_policies),
        policies_to_train=tuple(to_train),
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
        self.obs_spaces = {agent: first.observation_space(agent) for agent in self.agents}
        self.act_spaces = {agent: first.action_space(agent) for agent in self.agents}
        policy_spaces = {
            name: self._policy_spaces(name, multi_agent, model, images) for name in names
        }
        to_train = names
        if multi_agent is not None and multi_agent.policies_to_train is not None:
            unknown = [name for name in multi_agent.policies_to_train if name not in names]
            if unknown:
                raise EnvError(
                    f"{unknown[0]!r} acts for no agent (the policies: {', '.join(names)})",
                    "multiAgent.policiesToTrain",
                )
            to_train = list(multi_agent.policies_to_train)
        self.spaces = joint_spaces(
            policy_spaces, [names.index(self.policy_of[agent]) for agent in self.agents], to_train
        )
        self.num_agents = len(self.agents)
        self.num_envs = num_copies * self.num_agents
        self.single_observation_space = self.obs_spaces[self.agents[0]]
        self.single_action_space = self.act_spaces[self.agents[0]]
        self.action_space = _ZeroActions(self.num_envs, self.spaces)
        self.active = np.zeros(self.num_envs, dtype=bool)
        self.metadata = getattr(first, "metadata", {})

    def _policy_spaces(self, name: str, multi_agent: Any, model: Any, images: bool) -> SpaceInfo:
        """The spaces of policy `name`: its agents' (which must all be the same)."""
        agents = [agent for agent in self.agents if self.policy_of[agent] == name]
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
            copy.agents, copy.resetting = set(obs), False
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
                copy.agents, copy.resetting = set(obs), False
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
            copy.agents = (set(copy.env.agents) | (set(obs) - set(acting))) - done
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
        return np.asarray(action).ravel()[: int(np.prod(space.shape))].reshape(space.shape)

    def _encoded(self, observations: list[dict[str, Any]]) -> np.ndarray:
        """The copies' observations (agent -> observation dicts) as the lanes' joint array: each
        policy's lanes encoded by its spaces, zeros where an agent has no observation."""
        spaces = self.spaces
        out = np.zeros((self.num_envs, *spaces.obs_shape), dtype=spaces.obs_dtype)
        for name, info in spaces.policies:
            agents = [agent for agent in self.agents if self.policy_of[agent] == name]
            space = self.obs_spaces[agents[0]]
            rows, items = [], []
            for copy_index, obs in enumerate(observations):
                for agent in agents:
                    if agent in obs:
                        rows.append(copy_index * self.num_agents + self.agents.index(agent))
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
    return MultiAgentVectorEnv(
        lambda: make_parallel_env(config.env, config.env_config),
        num_copies,
        config.multi_agent,
        config.model,
        config.image_observations,
    )


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
