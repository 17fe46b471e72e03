"""Why a job's env cannot be trained on, found when the job is validated rather than mid-run:
the env and its wrappers made as the rollout workers make them, their spaces checked against the
model and the algorithm, and observation normalization against the observations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from kuberl_trainer.envs.making import EnvError, make_vector_env, wrapper_creator
from kuberl_trainer.envs.multi_agent import (
    MIXED_NORMALIZATION,
    is_multi_agent,
    multi_agent_policy_spaces,
    refuse_wrappers,
)
from kuberl_trainer.envs.spaces import SpaceInfo, space_info

if TYPE_CHECKING:
    from kuberl_contract.config import ModelConfig, WrapperConfig

NORMALIZED_OBSERVATIONS = "normalization.observations"
"""The field under spec.trainer that turns observation normalization on."""


class EnvProblem(NamedTuple):
    """Why the job's env cannot be trained on: where in spec.trainer (an EnvError's field) and
    why."""

    field: str
    message: str


def env_problem(
    env: str,
    env_config: dict[str, Any],
    discrete_actions_only: bool = False,
    continuous_actions_only: bool = False,
    wrappers: Sequence[WrapperConfig] = (),
    normalize_observations: bool = False,
    model: ModelConfig | None = None,
    images: bool = True,
    multi_agent: Any = None,
) -> EnvProblem | None:
    """Why this env cannot be trained on, or None when it can (used by validation). The wrappers'
    names and keyword arguments are checked first, then the env is made and wrapped as the rollout
    workers make it, so an envConfig that only the native vector env rejects is caught here too;
    `model` and `images` are checked against its spaces as `space_info` checks them. A
    multi-agent env's agents are mapped to policies by `multi_agent` (the config's multiAgent
    section), and each policy's spaces are checked."""
    try:
        for index, wrapper in enumerate(wrappers):
            wrapper_creator(wrapper, f"wrappers[{index}]")
        if is_multi_agent(env):
            if wrappers:
                refuse_wrappers()
            spaces = multi_agent_policy_spaces(env, env_config, multi_agent, model, images)
        else:
            envs = make_vector_env(env, env_config, 1, wrappers)
            try:
                spaces = (
                    (
                        space_info(
                            envs.single_observation_space, envs.single_action_space, model, images
                        ),
                        envs.single_action_space,
                    ),
                )
            finally:
                envs.close()
    except EnvError as exc:
        return EnvProblem(exc.field, exc.message)
    if normalize_observations and len(spaces) > 1:
        return EnvProblem(
            NORMALIZED_OBSERVATIONS,
            MIXED_NORMALIZATION,
        )
    for info, action_space in spaces:
        problem = _action_problem(
            info, action_space, discrete_actions_only, continuous_actions_only
        )
        if problem is not None:
            return problem
        if normalize_observations and (problem := observation_normalization_problem(info)):
            return EnvProblem(NORMALIZED_OBSERVATIONS, problem)
    return None


def _action_problem(
    info: SpaceInfo, action_space: Any, discrete_actions_only: bool, continuous_actions_only: bool
) -> EnvProblem | None:
    """Why the algorithm cannot take these actions, or None."""
    if discrete_actions_only and not info.discrete_actions:
        return EnvProblem(
            "env",
            f"action space {action_space} is continuous but the algorithm needs "
            "Discrete actions; use PPO, A2C or PG for continuous control",
        )
    if discrete_actions_only and info.multi_discrete_actions:
        return EnvProblem(
            "env",
            f"action space {action_space} is MultiDiscrete but the algorithm needs "
            "Discrete actions (one Q-value per action); use PPO, A2C, IMPALA, APPO, PG or ES",
        )
    if continuous_actions_only and info.discrete_actions:
        return EnvProblem(
            "env",
            f"action space {action_space} is discrete but the algorithm needs "
            "Box (continuous) actions; use DQN or PPO for Discrete actions",
        )
    return None


def observation_normalization_problem(info: SpaceInfo) -> str | None:
    """Why these observations cannot be normalized (only Box ones the MLP encodes are), or
    None."""
    if info.image is not None:
        return (
            f"the observations are images {info.image.shape} that the CNN scales itself; set it "
            "to false (or model.encoder to mlp)"
        )
    if info.obs_discrete_n is None:
        return None
    return (
        f"the observation space is Discrete({info.obs_discrete_n}), and only Box observations "
        "are normalized; set it to false"
    )
