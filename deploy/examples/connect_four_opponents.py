"""A fixed connect-four opponent to measure a self-play policy against
(`multiAgent.selfPlay.baselines: [random, connect_four_opponents:Blocker]` in
connect-four-selfplay.yaml, which finds this module next to it).

An opponent is made as Class(spaces, seed) and answers compute_actions(obs) for a batch of
observations as kuberl encodes them: connect_four's Dict observation flattened, its
`observation` (6 rows x 7 columns x 2 planes: the player's own pieces, then the other's) first and
its `action_mask` (the 7 columns not yet full) in the last 7 columns.
"""

import numpy as np

ROWS, COLUMNS = 6, 7


class Blocker:
    """Wins where one move wins, blocks where the other player's next move would win, and
    otherwise drops a piece in a legal column at random, nearer the centre more often."""

    def __init__(self, spaces, seed: int):
        self.rng = np.random.default_rng(seed)
        self.centre = np.array([1, 2, 3, 4, 3, 2, 1], dtype=float)

    def compute_actions(self, obs: np.ndarray, explore: bool = True):
        actions = np.array([self._move(row) for row in obs])
        return actions, {"actions": actions}

    def _move(self, encoded: np.ndarray) -> int:
        boards = encoded[: ROWS * COLUMNS * 2].reshape(ROWS, COLUMNS, 2) > 0.5
        legal = np.flatnonzero(encoded[-COLUMNS:] > 0.5)
        if not len(legal):
            return 0  # not this player's turn: the move is ignored
        occupied = boards[:, :, 0] | boards[:, :, 1]
        for plane in (0, 1):  # a win of its own first, then the other's to block
            for column in legal:
                if _wins(boards[:, :, plane], occupied, int(column)):
                    return int(column)
        weights = self.centre[legal] / self.centre[legal].sum()
        return int(self.rng.choice(legal, p=weights))


def _wins(pieces: np.ndarray, occupied: np.ndarray, column: int) -> bool:
    """Whether a piece dropped in `column` (it falls to the lowest free row) gives `pieces` four
    in a row."""
    row = int(np.flatnonzero(~occupied[:, column])[-1])
    for step_row, step_column in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * step_row, column + sign * step_column
            while 0 <= r < ROWS and 0 <= c < COLUMNS and pieces[r, c]:
                count += 1
                r, c = r + sign * step_row, c + sign * step_column
        if count >= 4:
            return True
    return False
