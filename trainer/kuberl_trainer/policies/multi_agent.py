"""Several policies in one job, as the RLlib paper's policy graphs are: a multi-agent env's lanes
(envs/multi_agent.py) each act with their agent's policy, and each policy learns on its own
agents' samples. `MultiAgentPolicy` is itself a Policy, so that every policy optimizer drives a
set of policies as it drives one: it acts by handing each member its lanes, postprocesses each
member's lanes with the member, tags every training row with its policy (`POLICY_COLUMN`), and
learns by handing each member its rows.

The lanes' columns have one layout for all members: observations in the lanes' joint shape
(MultiAgentSpaces), actions and recorded columns zero-padded to the widest member's. A member sees
its own shapes only (`fit`).

A job of one policy (parameter sharing, the default) needs none of this, but in a turn-based game:
`MultiAgentFactory` builds that policy itself, and its checkpoints are a single-agent job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.errors import IncompatibleCheckpointError
from kuberl_trainer.policies.interface import Policy, PolicyFactory, Stats, Weights
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.policies.turns import TurnCompactor

POLICY_COLUMN = "policy"
"""A training row's policy: its index among the job's policies."""
SEPARATOR = "/"
"""Between a policy's name and its own weight or statistic names."""


def fit(array: np.ndarray, trailing: tuple[int, ...]) -> np.ndarray:
    """`array` (rows, ...) with its trailing dimensions cut or zero-padded to `trailing`."""
    if array.shape[1:] == trailing:
        return array
    if array.ndim == 1 or not trailing:
        return array.reshape(len(array), *trailing) if array.ndim > 1 else array
    out = np.zeros((len(array), *trailing), dtype=array.dtype)
    width = min(array.shape[1], trailing[0])
    out[:, :width] = array[:, :width]
    return out


def action_shape(spaces: SpaceInfo) -> tuple[int, ...]:
    """One recorded action's shape: () for Discrete actions, (components,) for MultiDiscrete
    ones, (dims,) for Box ones."""
    if spaces.action_nvec is not None:
        return (len(spaces.action_nvec),)
    return () if spaces.discrete_actions else (spaces.action_dim,)


def padded_concat(parts: list[np.ndarray]) -> np.ndarray:
    """The parts, rows after rows, each zero-padded to the widest's trailing width."""
    if all(part.shape[1:] == parts[0].shape[1:] for part in parts):
        return np.concatenate(parts)
    widest = max(parts, key=lambda part: part.shape[1] if part.ndim > 1 else 0)
    return np.concatenate([fit(part, widest.shape[1:]) for part in parts])


@dataclass(frozen=True)
class MultiAgentFactory:
    """How a rollout worker of a multi-agent job builds its policy (a PolicyFactory): `member`
    (the algorithm's class, or ActingOnly) for each policy, with its config from `configs` (the
    job's where a policy sets nothing of its own); one policy alone, not wrapped."""

    member: PolicyFactory
    configs: dict[str, Any]

    def __call__(self, spaces: SpaceInfo, config: Any, seed: int) -> Policy:
        policies = getattr(spaces, "policies", ())
        if len(policies) == 1 and not spaces.turn_based:
            name, own = policies[0]
            return self.member(own, self.configs.get(name, config), seed)
        members = {
            name: self.member(own, self.configs.get(name, config), seed + index)
            for index, (name, own) in enumerate(policies)
        }
        return MultiAgentPolicy(spaces, config, seed, members)

    def worker_start_order(self, num_workers: int) -> list[int]:
        return getattr(self.member, "worker_start_order", Policy.worker_start_order)(num_workers)


class MultiAgentPolicy(Policy):
    """The policies of a multi-agent job as one (see the module's docstring)."""

    def __init__(self, spaces: Any, config: Any, seed: int, members: dict[str, Policy]):
        super().__init__(spaces, config, seed)
        self.members = members
        self.names = list(members)
        self.trained = [i for i, name in enumerate(self.names) if name in spaces.policies_to_train]
        first = members[self.names[0]]
        self.STAT_KEYS = first.STAT_KEYS
        self.LEARNS_ON_WHOLE_ROLLOUTS = first.LEARNS_ON_WHOLE_ROLLOUTS
        self.towers = None
        self._lanes: dict[tuple[int, int], np.ndarray] = {}
        self._widths: dict[str, dict[str, tuple[int, ...]]] = {name: {} for name in members}
        # a turn-based game's lanes: each agent's turns as its transitions (policies/turns.py)
        self.turns = TurnCompactor() if spaces.turn_based else None

    # -- lanes and rows --------------------------------------------------------------------------

    def lanes(self, index: int, count: int) -> np.ndarray:
        """Member `index`'s lanes among `count`."""
        key = (index, count)
        if key not in self._lanes:
            self._lanes[key] = self.spaces.lanes_of(index, count)
        return self._lanes[key]

    def _own(self, name: str, key: str, column: np.ndarray, lead: int = 1) -> np.ndarray:
        """A column of member `name`'s rows (`lead` 1) or time-major lanes (`lead` 2) in the
        member's own shape."""
        member = self.members[name]
        if key in ("obs", "next_obs"):
            trailing = member.spaces.obs_shape
        elif key == "actions":
            trailing = action_shape(member.spaces)
        elif key in self._widths[name]:
            trailing = self._widths[name][key]
        else:
            return column
        if lead == 1:
            return fit(column, trailing)
        rows = column.reshape(-1, *column.shape[2:])
        return fit(rows, trailing).reshape(*column.shape[:2], *trailing)

    # -- acting ----------------------------------------------------------------------------------

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        count = len(obs)
        results = []
        for index, name in enumerate(self.names):
            lanes = self.lanes(index, count)
            own = self._own(name, "obs", obs[lanes])
            env_actions, columns = self.members[name].compute_actions(own, explore)
            self._widths[name] = {key: value.shape[1:] for key, value in columns.items()}
            results.append((lanes, env_actions, columns))
        env_actions = _scatter(count, [(lanes, actions) for lanes, actions, _ in results])
        columns = {
            key: _scatter(count, [(lanes, cols[key]) for lanes, _, cols in results])
            for key in results[0][2]
            if all(key in cols for _, _, cols in results)  # a stand-in opponent records less
        }
        return env_actions, columns

    def begin_episodes(self, starts: np.ndarray) -> None:
        for index, name in enumerate(self.names):
            self.members[name].begin_episodes(starts[self.lanes(index, len(starts))])

    def get_memory(self) -> Any:
        return {name: member.get_memory() for name, member in self.members.items()}

    def set_memory(self, memory: Any) -> None:
        for name, member in self.members.items():
            member.set_memory(None if memory is None else memory[name])

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.turns is not None:
            rollout = self.turns.compact(rollout)
        count = rollout["obs"].shape[1]
        parts = []
        for index in self.trained:
            name = self.names[index]
            lanes = self.lanes(index, count)
            own = {key: self._own(name, key, value[:, lanes], 2) for key, value in rollout.items()}
            rows = self.members[name].postprocess_trajectory(own)
            rows[POLICY_COLUMN] = np.full(len(next(iter(rows.values()))), index, np.int16)
            parts.append(rows)
        return {key: padded_concat([part[key] for part in parts]) for key in parts[0]}

    # -- learning --------------------------------------------------------------------------------

    def _member_rows(self, columns: dict[str, np.ndarray]):
        """(index, name, rows, the member's columns) of each trained member with rows."""
        policy = columns[POLICY_COLUMN]
        for index in self.trained:
            rows = np.flatnonzero(policy == index)
            if len(rows):
                name = self.names[index]
                own = {
                    key: self._own(name, key, value[rows])
                    for key, value in columns.items()
                    if key != POLICY_COLUMN
                }
                yield index, name, rows, own

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        learned = {
            name: self.members[name].learn_on_batch(SampleBatch(own, policy_lag=batch.policy_lag))
            for _, name, _, own in self._member_rows(batch.columns)
        }
        return merged_stats(learned)

    def learn_on_replay_batch(self, columns: dict[str, np.ndarray]) -> tuple[Stats, np.ndarray]:
        td_errors = np.zeros(len(columns[POLICY_COLUMN]), dtype=np.float32)
        learned = {}
        for _, name, rows, own in self._member_rows(columns):
            learned[name], td_errors[rows] = self.members[name].learn_on_replay_batch(own)
        return merged_stats(learned), td_errors

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Stats]:
        by_member = {name: own for _, name, _, own in self._member_rows(batch.columns)}
        gradients, learned = [], {}
        for index in self.trained:
            name = self.names[index]
            member = self.members[name]
            if name in by_member:
                member_gradients, learned[name] = member.compute_gradients(
                    SampleBatch(by_member[name])
                )
            else:  # no rows of its agents in this batch: nothing to change
                member_gradients = [
                    np.zeros(tuple(w.shape), np.float32) for w in _parameters(member)
                ]
            gradients += member_gradients
        return gradients, merged_stats(learned)

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        start = 0
        for index in self.trained:
            member = self.members[self.names[index]]
            count = len(_parameters(member))
            member.apply_gradients(gradients[start : start + count])
            start += count

    def exploration_stats(self) -> Stats:
        member = self.members[self.names[self.trained[0]]]
        return member.exploration_stats() if hasattr(member, "exploration_stats") else {}

    # -- weights and state -----------------------------------------------------------------------

    def get_weights(self) -> Weights:
        return {
            f"{name}{SEPARATOR}{key}": value
            for name, member in self.members.items()
            for key, value in member.get_weights().items()
        }

    def set_weights(self, weights: Weights) -> None:
        for name, own in _by_policy(weights).items():
            self.members[name].set_weights(own)

    def get_state(self) -> dict[str, Any]:
        return {"policies": {name: member.get_state() for name, member in self.members.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        for name, own in self._member_states(state).items():
            self.members[name].set_state(own)

    def warm_start(self, state: dict[str, Any]) -> None:
        for name, own in self._member_states(state).items():
            self.members[name].warm_start(own)

    def _member_states(self, state: dict[str, Any]) -> dict[str, Any]:
        """Each member's part of a checkpoint's state; IncompatibleCheckpointError where the
        checkpoint's policies are not this job's."""
        policies = state.get("policies")
        if policies is None:
            raise IncompatibleCheckpointError(
                f"the checkpoint holds one policy, and this job has {len(self.names)} "
                f"({', '.join(self.names)})"
            )
        if set(policies) != set(self.names):
            raise IncompatibleCheckpointError(
                f"the checkpoint's policies are {', '.join(policies)}, and this job's "
                f"{', '.join(self.names)}"
            )
        return policies

    # -- what the policy's holders set and ask -----------------------------------------------

    def set_global_timesteps(self, timesteps: int) -> None:
        super().set_global_timesteps(timesteps)
        for member in self.members.values():
            member.set_global_timesteps(timesteps)

    def limit_threads(self, threads: int) -> None:
        for member in self.members.values():
            member.limit_threads(threads)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in ("worker_index", "num_workers") and "members" in self.__dict__:
            for member in self.members.values():
                setattr(member, name, value)

    def to(self, device: Any) -> MultiAgentPolicy:
        for member in self.members.values():
            member.to(device)
        return self

    @property
    def device(self) -> Any:
        return self.members[self.names[0]].device

    def to_towers(self, devices: list[Any]) -> MultiAgentPolicy:
        for member in self.members.values():
            member.to_towers(devices)
        return self

    def sampling_copy(self) -> MultiAgentPolicy:
        copies = {name: member.sampling_copy() for name, member in self.members.items()}
        return MultiAgentPolicy(self.spaces, self.config, 0, copies)

    def set_learning_rate(self, lr: float) -> None:
        for member in self.members.values():
            member.set_learning_rate(lr)


def _scatter(count: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """One (count, ...) array from each part's values at its lanes, zero-padded to the widest."""
    widest = max((values for _, values in parts), key=lambda v: v.shape[1] if v.ndim > 1 else 0)
    out = np.zeros((count, *widest.shape[1:]), dtype=widest.dtype)
    for lanes, values in parts:
        out[lanes] = fit(values, widest.shape[1:])
    return out


def _by_policy(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`policy/key` entries grouped by policy."""
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        name, _, own = key.partition(SEPARATOR)
        grouped.setdefault(name, {})[own] = value
    return grouped


def _parameters(member: Policy) -> list[Any]:
    return list(member.model.parameters())  # type: ignore[attr-defined]


def merged_stats(learned: dict[str, Stats]) -> Stats:
    """Each statistic's mean over the policies that learned, and each policy's own under
    `statistic/policy`."""
    merged: Stats = {}
    for key in dict.fromkeys(key for stats in learned.values() for key in stats):
        values = [stats[key] for stats in learned.values() if key in stats]
        merged[key] = float(np.mean(values))
    for name, stats in learned.items():
        merged |= {f"{key}{SEPARATOR}{name}": value for key, value in stats.items()}
    return merged
