"""Turn-based games' transitions: an agent's turn lasts from its move to its next one.

In a turn-based game (a PettingZoo AEC env such as connect_four, envs/multi_agent.py) a lane acts
only on its agent's turns, and what befalls it in between (the opponent's winning move, the game's
end) arrives on steps where it does not act. `TurnCompactor` rewrites a window's lanes into each
agent's own transitions: its move's row, the rewards up to its next move summed into it, ended by
the first termination or truncation in between, with the observation of its next move (or the
episode's last) as the next observation. The rows then read as a single-agent rollout does, so
every postprocessing (GAE, V-trace, n-step) applies unchanged:

- rows are consecutive transitions, each next observation the following row's observation;
- after an episode's last transition comes an invalid row holding its final observation (as the
  reset step of a single-agent rollout does), and the following episode's first;
- the window's last transition that is not done is marked truncated: its return bootstraps from
  its next observation, and no estimate runs on past it.

A transition still open when the window ends (its agent has not moved again, nor is the game
over) waits for the next window, with whatever rows do not fit in this one: nothing is lost at
window boundaries. Lanes that act on every step (simultaneous moves) come out as they went in.
"""

from __future__ import annotations

import numpy as np

from kuberl_trainer.policies.sample_batch import VALID

_STEP = ("obs", "next_obs", "rewards", "terminateds", "truncateds", VALID)
"""The rollout's own columns; the others are what the policy recorded when it acted."""


class _Turn:
    """One transition of a lane: its move's columns, then the rewards and the end it met."""

    __slots__ = ("done", "next_obs", "recorded", "reward", "terminated", "truncated")

    def __init__(self, recorded: dict[str, np.ndarray]):
        self.recorded = recorded  # obs and the policy's columns at the move
        self.reward = 0.0
        self.terminated = self.truncated = False
        self.next_obs: np.ndarray | None = None

    @property
    def closed(self) -> bool:
        return self.next_obs is not None


class TurnCompactor:
    """Rewrites windows of turn-based lanes into their agents' transitions (see the module's
    docstring), keeping each lane's transitions that did not fit or are still open."""

    def __init__(self) -> None:
        self.waiting: dict[int, list[_Turn]] = {}  # lane -> its transitions not yet handed on

    def compact(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The window's (T, N) columns as each lane's transitions, T rows per lane. Recorded
        columns of values the policy computed while acting are left out (values of the rows
        moved need computing again)."""
        horizon, lanes = rollout[VALID].shape
        recorded = [key for key in rollout if key not in _STEP and key != "values"]
        out = {
            key: np.zeros_like(rollout[key])
            for key in ("obs", "next_obs", *recorded, "rewards", "terminateds", "truncateds")
        }
        out[VALID] = np.zeros((horizon, lanes), dtype=bool)
        for lane in range(lanes):
            turns = self._turns(rollout, recorded, lane)
            self.waiting[lane] = self._write(out, lane, turns, horizon, recorded)
        return out

    def _turns(self, rollout, recorded: list[str], lane: int) -> list[_Turn]:
        """The lane's transitions: those waiting from earlier windows, then this window's."""
        turns = self.waiting.get(lane, [])
        open_turn = turns[-1] if turns and not turns[-1].closed else None
        for t in range(len(rollout[VALID])):
            if rollout[VALID][t, lane]:
                if open_turn is not None:  # its agent moves again: the last move's turn ends
                    open_turn.next_obs = rollout["obs"][t, lane]
                move = {key: rollout[key][t, lane] for key in ("obs", *recorded)}
                open_turn = _Turn(move)
                turns.append(open_turn)
            if open_turn is None:
                continue  # befalls no move of this lane (before its first, after its last)
            open_turn.reward += float(rollout["rewards"][t, lane])
            terminated, truncated = rollout["terminateds"][t, lane], rollout["truncateds"][t, lane]
            if terminated or truncated:
                open_turn.terminated, open_turn.truncated = bool(terminated), bool(truncated)
                open_turn.next_obs = rollout["next_obs"][t, lane]
                open_turn = None
        return turns

    @staticmethod
    def _write(out, lane: int, turns: list[_Turn], horizon: int, recorded: list[str]):
        """Writes the lane's closed transitions that fit into its `horizon` rows; returns those
        that wait for the next window (the rest, and the open one)."""
        row, written = 0, 0
        for turn in turns:
            done = turn.terminated or turn.truncated
            needs = 2 if done else 1  # an episode's end is followed by its final observation
            if not turn.closed or row + needs > horizon:
                break
            for key in ("obs", *recorded):
                out[key][row, lane] = turn.recorded[key]
            out["next_obs"][row, lane] = turn.next_obs
            out["rewards"][row, lane] = turn.reward
            out["terminateds"][row, lane] = turn.terminated
            out["truncateds"][row, lane] = turn.truncated
            out[VALID][row, lane] = True
            row += 1
            written += 1
            if done:
                out["obs"][row, lane] = out["next_obs"][row, lane] = turn.next_obs
                out["truncateds"][row, lane] = True  # an invalid row no estimate runs across
                row += 1
        if row and not (out["terminateds"][row - 1, lane] or out["truncateds"][row - 1, lane]):
            out["truncateds"][row - 1, lane] = True  # the window's last: bootstrap, go no further
        if row < horizon:  # the rest: invalid rows holding the last next observation
            if row:
                out["obs"][row:, lane] = out["next_obs"][row:, lane] = out["next_obs"][
                    row - 1, lane
                ]
            out["truncateds"][row:, lane] = True
        return turns[written:]
