"""`spec.trainer.wrappers`: gymnasium wrappers put around every env, in order."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kuberl_contract.config.base import Spec


class WrapperConfig(Spec):
    """One gymnasium wrapper put around the env, made as `Wrapper(env, **kwargs)`. The names and
    keyword arguments are checked against gymnasium when the job is validated (`kuberl
    validate`), and the wrapper is made once there."""

    name: str = Field(min_length=1)
    """A class of gymnasium.wrappers (FlattenObservation, TimeLimit, ClipReward, ...), or
    module:Class naming a gymnasium.Wrapper subclass, or a callable taking the env and the keyword
    arguments and returning the wrapped env, importable on every rollout worker."""

    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments after the env, as the wrapper names them (snake_case, passed as given):
    {max_episode_steps: 200} for TimeLimit, {min_reward: -1, max_reward: 1} for ClipReward."""
