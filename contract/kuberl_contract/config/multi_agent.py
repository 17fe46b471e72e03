"""`spec.trainer.multiAgent`: the policies of a multi-agent env (a PettingZoo env) and which agent
each one acts for, as the RLlib paper's policy graphs: several policies in one job, each learning
on its own agents' samples.

Without the section, every agent of a multi-agent env acts with one policy, `shared` (parameter
sharing). The agents themselves are known once the env is made: the trainer checks the mapping
against them when the job is validated (`kuberl validate`), naming any agent no rule maps.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

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


class SelfPlayConfig(Spec):
    """A policy that learns against frozen snapshots of itself: `opponent` (a policy of the
    mapping, which never learns) acts with one of them at a time."""

    policy: PolicyName
    """The policy that learns."""

    opponent: PolicyName
    """The policy whose agents act with a snapshot of `policy`: a key of policies, mapped to the
    opponents' agents (its own hyperparameters and model are `policy`'s)."""

    snapshot_every_iterations: int = Field(10, ge=1, le=1_000_000)
    """How often the learning policy's weights join the pool of snapshots (also once at the
    start, so that there is an opponent)."""

    pool_size: int = Field(10, ge=1, le=1000)
    """Snapshots kept; the oldest leave first."""

    sampling: Literal["recency", "winRate"] = "recency"
    """How each iteration's opponent is drawn from the pool. recency: the newest snapshot half the
    time, any other uniformly the rest. winRate: snapshots weighted by how seldom the policy beats
    them, (1 - win rate)^2 (prioritized fictitious self-play, as AlphaStar's league)."""

    alternate_seats: bool = True
    """Every other copy of the env swaps the two policies' agents, so that the policy plays both
    sides (first and second player) equally often."""

    baselines: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=lambda: ["random"], max_length=8
    )
    """Fixed opponents the policy's win rate is measured against whenever a snapshot is taken
    (the row's baseline_win_rates): `random` moves uniformly among the legal actions, and
    `module:Class` names an opponent of your own (a heuristic), made as Class(spaces, seed), whose
    compute_actions(obs) returns (actions, {}) for a batch of encoded observations (the action
    mask in their last columns), found as a module:Class env is."""

    baseline_episodes: int = Field(50, ge=0, le=10_000)
    """Greedy games against each baseline whenever a snapshot is taken. 0: none."""


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
    null: all of them (but a self-play opponent)."""

    self_play: SelfPlayConfig | None = None
    """A policy that learns against frozen snapshots of itself (see SelfPlayConfig)."""

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
        if self.self_play is not None:
            self._check_self_play(self.self_play)
        if not self.policy_per_agent:
            unused = [name for name in self.policies if name not in self.mapped_policies]
            if unused:
                raise ValueError(
                    f"policies.{unused[0]}: no rule of policyMapping maps agents to it"
                )
        return self

    def _check_self_play(self, self_play: SelfPlayConfig) -> None:
        names = self.mapped_policies
        for field in ("policy", "opponent"):
            if getattr(self_play, field) not in names:
                raise ValueError(
                    f"selfPlay.{field}: {getattr(self_play, field)!r} is no policy of the mapping "
                    f"({', '.join(names)})"
                )
        for index, baseline in enumerate(self_play.baselines):
            if baseline != "random" and ":" not in baseline:
                raise ValueError(
                    f"selfPlay.baselines[{index}]: {baseline!r} is neither random nor module:Class"
                )
        if self_play.policy == self_play.opponent:
            raise ValueError("selfPlay.opponent: the opponent is a policy of its own")
        if self_play.opponent in (self.policies_to_train or []):
            raise ValueError(
                f"policiesToTrain: {self_play.opponent!r} acts with snapshots, and never learns"
            )
        if self.policies.get(self_play.opponent, PolicySpec()) != PolicySpec():
            raise ValueError(
                f"policies.{self_play.opponent}: the opponent's networks are "
                f"{self_play.policy!r}'s snapshots: it sets no hyperparameters or model of its own"
            )

    @property
    def trained_policies(self) -> list[str] | None:
        """The policies that learn: policiesToTrain, or all but a self-play opponent (None: all
        the env's agents' policies, known once the env is made)."""
        if self.policies_to_train is not None:
            return list(self.policies_to_train)
        if self.self_play is not None:
            return [name for name in self.mapped_policies if name != self.self_play.opponent]
        return None

    @property
    def mapped_policies(self) -> list[str]:
        """The policies the mapping names (all of them where there is no mapping), in order."""
        if not self.policy_mapping:
            return list(self.policies) or [SHARED_POLICY]
        return list(dict.fromkeys(rule.policy for rule in self.policy_mapping))
