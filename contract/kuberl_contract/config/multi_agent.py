"""`spec.trainer.multiAgent`: the policies of a multi-agent env (a PettingZoo env) and which agent
each one acts for, as the RLlib paper's policy graphs: several policies in one job, each learning
on its own agents' samples.

Without the section, every agent of a multi-agent env acts with one policy, `shared` (parameter
sharing). The agents themselves are known once the env is made: the trainer checks the mapping
against them when the job is validated (`kuberl validate`), naming any agent no rule maps.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, model_validator

from kuberl_contract.config.base import Spec
from kuberl_contract.config.model import ModelConfig
from kuberl_contract.hyperparameters.known_as import KnownAs

SHARED_POLICY = "shared"
"""The one policy of a multi-agent job that names none: every agent acts with it."""

POLICY_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
"""A policy's name: it names files (policy-NAME.onnx), metric labels and weight prefixes, so
letters, digits, '_', '.' and '-' only, at most 63, as a Kubernetes label value."""

JOB_WIDE_HYPERPARAMETERS = frozenset(
    {
        "rollout_length",
        "train_batch_size",
        "buffer_size",
        "learning_starts",
        "batch_size",
        "gradient_steps",
        "gradient_steps_per_env_step",
        "training_intensity",
        "prioritized_replay",
        "prioritized_replay_alpha",
        "prioritized_replay_beta",
        "prioritized_replay_eps",
    }
)
"""Hyperparameters of how the job samples and replays, which its policies share: every agent's
lane steps rollout_length steps per window, and one replay buffer holds every policy's rows."""

PolicyName = Annotated[str, Field(pattern=POLICY_NAME_PATTERN)]


class PolicySpec(Spec):
    """One policy: the job's algorithm, with some hyperparameters and the model its own."""

    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    """Hyperparameters of this policy that differ from spec.trainer.hyperparameters (the same
    names, snake_case: {learning_rate: 0.001}); checked as the algorithm's."""

    model: ModelConfig | None = None
    """This policy's encoder of observations, when not spec.trainer.model."""


class MappingRule(Spec):
    """Agents whose id matches `agents` (a glob: `adversary_*`) or `regex` act with `policy`."""

    policy: PolicyName
    """The policy these agents act with: a key of policies."""

    agents: str | None = Field(None, min_length=1, max_length=253)
    """A glob over agent ids (fnmatch: `*`, `?`, `[...]`): `adversary_*`."""

    regex: str | None = Field(None, min_length=1, max_length=253)
    """A regular expression that must match the whole agent id: `adversary_[0-9]+`."""

    @model_validator(mode="after")
    def _one_pattern(self) -> MappingRule:
        if (self.agents is None) == (self.regex is None):
            raise ValueError("give agents (a glob) or regex, one of them")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex: {self.regex!r} is no regular expression: {exc}") from exc
        return self


class MultiAgentConfig(Spec):
    """The policies of a multi-agent job and which agents act with which."""

    policies: dict[PolicyName, PolicySpec] = Field(default_factory=dict, max_length=64)
    """The policies by name, each the job's algorithm with its own networks. Empty: one policy,
    `shared`, for every agent (or one per agent with policyPerAgent)."""

    policy_mapping: Annotated[
        list[MappingRule],
        KnownAs("which policy each agent acts with", rllib="policy_mapping_fn"),
    ] = Field(default_factory=list, max_length=64)
    """Which agents act with which policy: the first rule whose pattern matches an agent's id
    decides. Empty: every agent acts with the one policy (parameter sharing)."""

    policy_per_agent: bool = False
    """One policy per agent, named by its agent id (policies may still set some of them apart)."""

    policies_to_train: Annotated[
        list[PolicyName] | None,
        KnownAs("the policies that learn", rllib="policies_to_train"),
    ] = Field(None, max_length=64)
    """The policies that learn; the others act frozen (their warm start's or initial networks).
    null: all of them."""

    @model_validator(mode="after")
    def _check_names(self) -> MultiAgentConfig:
        if self.policy_per_agent and self.policy_mapping:
            raise ValueError("policyMapping: give a mapping or policyPerAgent, not both")
        if self.policy_mapping and not self.policies:
            raise ValueError("policies: a policyMapping maps agents to policies named here")
        if not self.policy_per_agent and not self.policy_mapping and len(self.policies) > 1:
            raise ValueError(
                f"policyMapping: {len(self.policies)} policies need a mapping saying which "
                "agents act with which (or policyPerAgent: true)"
            )
        for index, rule in enumerate(self.policy_mapping):
            if rule.policy not in self.policies:
                raise ValueError(
                    f"policyMapping[{index}].policy: {rule.policy!r} is no policy of policies "
                    f"({', '.join(self.policies)})"
                )
        for name in self.policies_to_train or []:
            if not self.policy_per_agent and name not in self.mapped_policies:
                raise ValueError(
                    f"policiesToTrain: {name!r} is no policy of this job "
                    f"({', '.join(self.mapped_policies)})"
                )
        if not self.policy_per_agent:
            unused = [name for name in self.policies if name not in self.mapped_policies]
            if unused:
                raise ValueError(
                    f"policies.{unused[0]}: no rule of policyMapping maps agents to it"
                )
        return self

    @property
    def mapped_policies(self) -> list[str]:
        """The policies the mapping names (all of them where there is no mapping), in order."""
        if not self.policy_mapping:
            return list(self.policies) or [SHARED_POLICY]
        return list(dict.fromkeys(rule.policy for rule in self.policy_mapping))
