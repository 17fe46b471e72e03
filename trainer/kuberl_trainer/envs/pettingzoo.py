"""PettingZoo, the one module that speaks to it: which `env` names a PettingZoo env, and making
one as the lanes step it (envs/multi_agent.py).

`spec.trainer.env: pettingzoo:ID` names an env of PettingZoo's registry
(`pettingzoo:classic/connect_four-v3`), and `pettingzoo:MODULE` a PettingZoo env module
(`pettingzoo:mpe2.simple_spread_v3`), whose `parallel_env(**envConfig)` makes the env, or whose
AEC `env(**envConfig)` does: converted by PettingZoo's `aec_to_parallel` where its metadata says it
is parallelizable, stepped a move at a time otherwise (`TurnBased`: connect_four, chess).
`module:Class` may name a ParallelEnv or AECEnv subclass too.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from kuberl_trainer.envs.making import MULTI_AGENT_PREFIX, EnvError, did_you_mean, imported
from kuberl_trainer.envs.search_path import import_env_module

PETTINGZOO = MULTI_AGENT_PREFIX


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
        make = _pettingzoo_maker(env[len(PETTINGZOO) :])
    else:
        make = imported(env, "env")
    try:
        made = make(**env_config)
    except Exception as exc:  # any constructor failure is the job's problem to report
        raise EnvError(f"cannot make {env!r} with envConfig {env_config}: {exc}") from exc
    if isinstance(made, AECEnv):
        made = aec_to_parallel(made) if made.metadata.get("is_parallelizable") else TurnBased(made)
    if not isinstance(made, ParallelEnv | TurnBased):
        raise EnvError(f"{env!r} made a {type(made).__name__}, not a PettingZoo ParallelEnv")
    return made


def _pettingzoo_maker(name: str) -> Any:
    """What makes the env `pettingzoo:NAME` names: PettingZoo's registry's (`classic/chess-v6`),
    or a module's `parallel_env` or else `env` (`mpe2.simple_spread_v3`)."""
    import pettingzoo

    for kind, registry in (
        ("parallel", pettingzoo.parallel_registry),
        ("aec", pettingzoo.aec_registry),
    ):
        if name in registry:
            return lambda **kwargs: pettingzoo.make(kind, name, **kwargs)
    if "/" in name:
        known = [*pettingzoo.parallel_registry, *pettingzoo.aec_registry]
        raise EnvError(f"{name!r} is not in PettingZoo's registry" + did_you_mean(name, known))
    try:
        module = import_env_module(name)
    except (ImportError, ValueError) as exc:
        raise EnvError(f"cannot import module {name!r}: {exc}") from exc
    make = getattr(module, "parallel_env", None) or getattr(module, "env", None)
    if make is None:
        raise EnvError(f"pettingzoo:{name}: the module has neither parallel_env() nor env()")
    return make


class TurnBased:
    """A turn-based AEC env (one agent moves at a time: connect_four, chess) stepped as the lanes
    step a ParallelEnv: `agents` are those about to act (the one whose turn it is), a step is its
    move, and every agent's observation, reward, termination and truncation comes back (the
    others' too, as their turns' transitions need them: policies/turns.py). Agents done are
    stepped out of the game with PettingZoo's None actions."""

    turn_based = True

    def __init__(self, aec: Any):
        self.aec = aec
        self.possible_agents = list(aec.possible_agents)
        self.metadata = getattr(aec, "metadata", {})

    def observation_space(self, agent: str) -> gym.Space:
        return self.aec.observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self.aec.action_space(agent)

    @property
    def agents(self) -> list[str]:
        return [self.aec.agent_selection] if self.aec.agents else []

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.aec.reset(seed=seed, options=options)
        return {agent: self.aec.observe(agent) for agent in self.aec.agents}, {}

    def step(self, actions: dict[str, Any]):
        aec = self.aec
        aec.step(actions[aec.agent_selection])
        rewards, terminations = dict(aec.rewards), dict(aec.terminations)
        truncations = dict(aec.truncations)
        observations = {agent: aec.observe(agent) for agent in aec.agents}
        while aec.agents and (
            aec.terminations[aec.agent_selection] or aec.truncations[aec.agent_selection]
        ):
            aec.step(None)
        return observations, rewards, terminations, truncations, {}

    def close(self) -> None:
        self.aec.close()
