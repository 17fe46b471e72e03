"""Replay buffers for the off-policy learners: uniform, and prioritized (Schaul et al. 2016).

Transitions are stored column by column in preallocated numpy arrays (allocated on the first add,
when the shapes and dtypes are known), so adding a batch is a slice copy and sampling is one fancy
index per column. The prioritized buffer keeps its priorities in sum and min trees held as flat
arrays; batch updates and batch sampling walk the trees level by level for the whole batch at
once, so the Python loop runs over the tree depth (~17 levels for 100k items), never over items.

Images are kept compressed. Columns whose rows are uint8 arrays of rank 2 or more (image
observations and their next observations, the frames the CNN takes) are stored together as one
LZ4 block per transition, compressed when added and decompressed when sampled, as RLlib's
`compress_observations` does: a stack of 4 Atari frames and the next stack share 3 frames, and
frames are mostly background, so Pong's 56 KB of `obs` and `next_obs` take about 0.8 KB, and a
million transitions 0.8-3.4 GB (Pong to MsPacman) where they would take 56 GB as arrays. It costs
about 20 us per transition added and as much per transition sampled.
"""

from __future__ import annotations

from typing import Any

import lz4.block
import numpy as np

Columns = dict[str, np.ndarray]

# Python's own size of a bytes object (without its data) and of the array slot pointing at it:
# what each compressed transition costs besides its LZ4 block.
_BLOB_OVERHEAD = 33 + 8


def packs(value: np.ndarray) -> bool:
    """Whether a column (rows first) is kept compressed: uint8 rows of rank 2 or more, images."""
    return value.dtype == np.uint8 and value.ndim >= 3


class ReplayBuffer:
    """A circular buffer of transitions sampled uniformly with replacement."""

    def __init__(self, capacity: int, seed: int | list[int] | None = None):
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.columns: Columns = {}  # kept as arrays
        self.packed: dict[str, tuple[int, ...]] = {}  # kept compressed: row shapes, in order
        self.blobs = np.empty(0, dtype=object)  # per slot, the packed columns' LZ4 block
        self.next_index = 0  # where the next transition goes; the oldest one once full
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, columns: Columns) -> np.ndarray:
        """Append a batch of transitions, overwriting the oldest once full; returns the slots
        written (the prioritized buffer gives them priorities)."""
        count = len(next(iter(columns.values())))
        if count > self.capacity:  # only the newest `capacity` rows would survive anyway
            self.next_index = (self.next_index + count - self.capacity) % self.capacity
            columns = {key: value[count - self.capacity :] for key, value in columns.items()}
            count = self.capacity
        if not self.columns and not self.packed:
            self._allocate(columns)
        elif columns.keys() != self.columns.keys() | self.packed.keys():
            raise ValueError(
                f"replay buffer holds columns {sorted(self.columns.keys() | self.packed.keys())}, "
                f"got {sorted(columns)}"
            )
        start = self.next_index
        self._write(start, columns, count)
        self.next_index = (start + count) % self.capacity
        self.size = min(self.size + count, self.capacity)
        return (start + np.arange(count)) % self.capacity

    @property
    def nbytes(self) -> int:
        """The memory the stored transitions take: the arrays as allocated, and the compressed
        blocks of those added so far."""
        arrays = sum(value.nbytes for value in self.columns.values())
        blobs = sum(len(blob) + _BLOB_OVERHEAD for blob in self.blobs[: self.size])
        return arrays + blobs

    def sample(self, batch_size: int) -> Columns:
        """`batch_size` transitions drawn uniformly with replacement."""
        self._check_not_empty()
        return self._gather(self.rng.integers(0, self.size, batch_size))

    def state(self) -> dict[str, Any]:
        """The stored transitions and counters as plain numpy arrays and ints (for checkpoints);
        compressed columns stay compressed: their blocks end to end, and each block's length."""
        state = {
            "columns": {key: value[: self.size].copy() for key, value in self.columns.items()},
            "next_index": self.next_index,
            "size": self.size,
            "rng": self.rng.bit_generator.state,
        }
        if self.packed:
            blobs = self.blobs[: self.size]
            state["packed"] = {
                "shapes": {key: list(shape) for key, shape in self.packed.items()},
                "blocks": np.frombuffer(b"".join(blobs), dtype=np.uint8),
                "lengths": np.array([len(blob) for blob in blobs], dtype=np.int64),
            }
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self.columns, self.packed = {}, {}
        self.size = 0
        size = state["size"]
        if size:
            columns = state["columns"]
            packed = state.get("packed")
            if packed is None:  # written before compression, or with no images
                self._allocate(columns)
                self._write(0, columns, size)
            else:
                self._allocate_arrays(columns)
                self.packed = {key: tuple(shape) for key, shape in packed["shapes"].items()}
                ends = np.cumsum(packed["lengths"])
                blocks = packed["blocks"].tobytes()
                self.blobs[:size] = [
                    blocks[end - length : end]
                    for end, length in zip(ends.tolist(), packed["lengths"].tolist(), strict=True)
                ]
                for key, value in columns.items():
                    self.columns[key][:size] = value
        self.next_index = state["next_index"]
        self.size = size
        self.rng.bit_generator.state = state["rng"]

    def _allocate(self, columns: Columns) -> None:
        self.packed = {key: value.shape[1:] for key, value in columns.items() if packs(value)}
        self._allocate_arrays({k: v for k, v in columns.items() if k not in self.packed})

    def _allocate_arrays(self, columns: Columns) -> None:
        self.columns = {
            key: np.empty((self.capacity, *value.shape[1:]), dtype=value.dtype)
            for key, value in columns.items()
        }
        self.blobs = np.empty(self.capacity, dtype=object)

    def _write(self, start: int, columns: Columns, count: int) -> None:
        """Rows `count` of `columns` into the slots from `start` on, wrapping around the end."""
        # Compressed first: a column of another shape is refused before any slot is written.
        blobs = [lz4.block.compress(row, store_size=False) for row in self._joined(columns, count)]
        until_end = min(count, self.capacity - start)
        for key, value in columns.items():
            if key not in self.packed:
                self.columns[key][start : start + until_end] = value[:until_end]
                self.columns[key][: count - until_end] = value[until_end:]
        if self.packed:
            self.blobs[(start + np.arange(count)) % self.capacity] = blobs

    def _joined(self, columns: Columns, count: int) -> np.ndarray:
        """The packed columns' rows side by side, one contiguous uint8 row per transition, so
        that a stack and the next stack, which share frames, are compressed as one block."""
        if not self.packed:
            return np.empty((0, 0), dtype=np.uint8)
        for key, shape in self.packed.items():
            if columns[key].shape[1:] != shape or columns[key].dtype != np.uint8:
                raise ValueError(
                    f"replay buffer holds {key} of uint8 {shape}, got {columns[key].dtype} "
                    f"{columns[key].shape[1:]}"
                )
        return np.concatenate([columns[key].reshape(count, -1) for key in self.packed], axis=1)

    def _gather(self, indices: np.ndarray) -> Columns:
        gathered = {key: value[indices] for key, value in self.columns.items()}
        if self.packed:
            sizes = [int(np.prod(shape)) for shape in self.packed.values()]
            rows = np.empty((len(indices), sum(sizes)), dtype=np.uint8)
            for row, blob in zip(rows, self.blobs[indices], strict=True):
                row[:] = np.frombuffer(
                    lz4.block.decompress(blob, uncompressed_size=rows.shape[1]), dtype=np.uint8
                )
            offsets = np.cumsum([0, *sizes])
            for (key, shape), begin, end in zip(
                self.packed.items(), offsets[:-1], offsets[1:], strict=True
            ):
                gathered[key] = rows[:, begin:end].reshape(len(indices), *shape)
        return gathered

    def _check_not_empty(self) -> None:
        if not self.size:
            raise ValueError("cannot sample from an empty replay buffer")


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay: transition i is drawn with probability
    p_i^alpha / sum_k p_k^alpha, where p_i = |TD error| + eps.

    New transitions get the largest priority seen so far, so each is replayed at least about
    once before its own TD error can demote it.
    """

    def __init__(
        self, capacity: int, alpha: float, eps: float = 1e-6, seed: int | list[int] | None = None
    ):
        super().__init__(capacity, seed)
        self.alpha = alpha
        self.eps = eps
        self.max_priority = 1.0  # before alpha
        self.sums = SegmentTree(capacity, np.add, 0.0)
        self.mins = SegmentTree(capacity, np.minimum, np.inf)

    def add(self, columns: Columns) -> np.ndarray:
        indices = super().add(columns)
        self._set_priorities(indices, np.full(len(indices), self.max_priority**self.alpha))
        return indices

    def sample(self, batch_size: int, beta: float, count: int = 1) -> Columns:
        """Stratified proportional sampling: one draw from each of `batch_size` equal slices of
        the total priority (lower variance than independent draws), plus `weights`, the
        importance-sampling corrections (N * P(i))^-beta divided by the largest possible one
        (that of the least likely transition in the buffer) so they only ever scale updates
        down, and `indices`, the slots to pass back to update_priorities. With `count`, that many
        such minibatches one after another (minibatch i is rows i * batch_size to
        (i + 1) * batch_size), drawn in one pass down the tree: the same rows as `count` calls."""
        self._check_not_empty()
        total = self.sums.root
        slices = np.tile(np.arange(batch_size), count)
        targets = (slices + self.rng.random(batch_size * count)) * (total / batch_size)
        indices = self.sums.find_prefix_sum(targets)
        priorities = self.sums.leaves(indices)
        # (N P(i))^-beta / (N P_min)^-beta: N and the total cancel out.
        weights = (self.mins.root / priorities) ** beta
        return self._gather(indices) | {
            "weights": weights.astype(np.float32),
            "indices": indices,
        }

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        priorities = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        self._set_priorities(np.asarray(indices), priorities**self.alpha)

    def state(self) -> dict[str, Any]:
        return super().state() | {
            "priorities": self.sums.leaves(np.arange(self.size)),  # already raised to alpha
            "max_priority": self.max_priority,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.sums = SegmentTree(self.capacity, np.add, 0.0)
        self.mins = SegmentTree(self.capacity, np.minimum, np.inf)
        self._set_priorities(np.arange(self.size), state["priorities"])
        self.max_priority = state["max_priority"]

    def _set_priorities(self, indices: np.ndarray, scaled_priorities: np.ndarray) -> None:
        self.sums.update(indices, scaled_priorities)
        self.mins.update(indices, scaled_priorities)


class SegmentTree:
    """A complete binary tree over `capacity` leaves in one flat array (node i has children 2i
    and 2i+1, the root is node 1), each inner node holding `combine` of its children. Leaves
    past the capacity hold `neutral`, so they never change a sum or a minimum."""

    def __init__(self, capacity: int, combine: np.ufunc, neutral: float):
        self.num_leaves = 1 << max(0, capacity - 1).bit_length()  # the next power of two
        self.depth = self.num_leaves.bit_length() - 1
        self.combine = combine
        self.nodes = np.full(2 * self.num_leaves, neutral, dtype=np.float64)

    @property
    def root(self) -> float:
        return float(self.nodes[1])

    def leaves(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[self.num_leaves + indices]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Write leaves, then recompute their ancestors one level at a time. A repeated index
        takes one of its values; a parent reached twice is just written twice with the same
        result, which is cheaper than deduplicating every level."""
        nodes = self.num_leaves + np.asarray(indices, dtype=np.int64)
        self.nodes[nodes] = values
        for _ in range(self.depth):
            nodes //= 2
            self.nodes[nodes] = self.combine(self.nodes[2 * nodes], self.nodes[2 * nodes + 1])

    def find_prefix_sum(self, targets: np.ndarray) -> np.ndarray:
        """For each target in [0, root), the leaf where the running sum of leaves passes it: a
        draw proportional to the leaf values (a sum tree only)."""
        targets = np.array(targets, dtype=np.float64)
        nodes = np.ones(len(targets), dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sums = self.nodes[left]
            # Rounding can leave a target just above a subtree's sum; never descend into an
            # empty right subtree (the slots past the stored transitions) because of it.
            go_right = (targets > left_sums) & (self.nodes[left + 1] > 0.0)
            targets = np.where(go_right, targets - left_sums, targets)
            nodes = np.where(go_right, left + 1, left)
        return nodes - self.num_leaves
