"""The flat encoding of the observation spaces that are neither a Box nor a Discrete: MultiDiscrete,
MultiBinary, Dict and Tuple (nested too). The MLP takes one float32 row per observation:

- a Box: its values flattened (C order);
- a Discrete: one-hot over start..start+n-1;
- a MultiDiscrete: one one-hot per component (each over start..start+nvec-1), concatenated in C
  order of its components;
- a MultiBinary: its 0/1 values as floats;
- a Dict: each sub-space encoded so, concatenated in the space's own key order; a Tuple the same
  in its order.

A top-level Dict's `action_mask` (PettingZoo's classic games: 1 where an action is legal) is no
feature: it comes last, its n values as they are, the **last n columns** of the row, where the
policies find it (`SpaceInfo.action_mask_n`). Exported graphs of such spaces take this flat row
(export.py), which `encode_structured` computes from the env's own observations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

ACTION_MASK = "action_mask"
"""The key of a Dict observation that holds the legal actions (PettingZoo's classic games)."""

STRUCTURED = (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Dict, gym.spaces.Tuple)
"""The observation spaces this module encodes (Box and Discrete are spaces.py's own)."""


def is_structured(space: gym.Space) -> bool:
    """Whether the space is encoded here (flat, for the MLP)."""
    return isinstance(space, STRUCTURED)


def mask_space(space: gym.Space) -> gym.Space | None:
    """The `action_mask` sub-space of a top-level Dict, None for any other space."""
    if isinstance(space, gym.spaces.Dict):
        return space.spaces.get(ACTION_MASK)
    return None


def encoded_width(space: gym.Space) -> int:
    """Columns of the flat encoding of one observation of `space` (mask included)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return sum(encoded_width(sub) for sub in _subspaces(space))
    raise ValueError(f"observation space {space} has no flat encoding")


def encode_structured(space: gym.Space, obs: Any) -> np.ndarray:
    """A (batch, encoded_width(space)) float32 array of a batch of observations as a vector env
    returns them (a Dict's: a mapping of batched arrays), the mask last (see the module)."""
    parts = list(_encoded_parts(space, obs, top=True))
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces:
        mask = obs[ACTION_MASK]
        parts.append(np.asarray(mask, dtype=np.float32).reshape(len(mask), -1))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def _encoded_parts(space: gym.Space, obs: Any, top: bool = False) -> Iterator[np.ndarray]:
    """Each leaf's encoded (batch, columns) block, in order, a top-level mask left out."""
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            if not (top and key == ACTION_MASK):
                yield from _encoded_parts(sub, obs[key])
    elif isinstance(space, gym.spaces.Tuple):
        for sub, value in zip(space.spaces, obs, strict=True):
            yield from _encoded_parts(sub, value)
    elif isinstance(space, gym.spaces.Discrete):
        indices = np.asarray(obs, dtype=np.int64) - int(space.start)
        yield np.eye(int(space.n), dtype=np.float32)[indices]
    elif isinstance(space, gym.spaces.MultiDiscrete):
        values = np.asarray(obs, dtype=np.int64).reshape(len(obs), -1)
        starts, sizes = np.ravel(space.start), np.ravel(space.nvec)
        # One one-hot per component, all at once: component i's block starts at offsets[i].
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        encoded = np.zeros((len(values), int(sizes.sum())), dtype=np.float32)
        np.put_along_axis(encoded, values - starts + offsets, 1.0, axis=1)
        yield encoded
    else:  # Box, MultiBinary
        array = np.asarray(obs, dtype=np.float32)
        yield array.reshape(len(array), -1)


def _subspaces(space: gym.Dict | gym.spaces.Tuple) -> list[gym.Space]:
    return list(space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces)


def structure_problem(space: gym.Space, depth: int = 0) -> str | None:
    """Why a structured space cannot be encoded (a leaf kuberl does not know, an image), or None."""
    if depth > 0 and isinstance(space, gym.spaces.Box):
        return None
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiBinary):
        return None
    if isinstance(space, gym.spaces.MultiDiscrete):
        return None
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        for sub in _subspaces(space):
            if problem := structure_problem(sub, depth + 1):
                return problem
        return None
    return f"its part {space} is not supported: Box, Discrete, MultiDiscrete, MultiBinary only"


def holds_image(space: gym.Space) -> bool:
    """Whether a Dict or Tuple holds a uint8 Box of rank 2 or 3 (an image) somewhere."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return any(holds_image(sub) for sub in _subspaces(space))
    return (
        isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)
    )


# -- the env's own observations: batches of them, and draws ---------------------------------------


def as_structured_batch(space: gym.Space, obs: Any) -> tuple[Any, bool]:
    """`obs` as a batch (a leading axis on every leaf), and whether it was one observation; a
    ValueError naming the part whose shape fits neither."""
    single = _is_single(space, obs)
    return (
        _map_leaves(space, obs, lambda value: np.asarray(value)[None]) if single else obs
    ), single


def _is_single(space: gym.Space, obs: Any, where: str = "observation") -> bool:
    """Whether `obs` is one observation of `space` (judged on its first leaf), else a batch."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            raise ValueError(f"predict: {where} must be a mapping of keys {list(space.spaces)}")
        key = next(iter(space.spaces))
        return _is_single(space.spaces[key], obs[key], f"{where}[{key!r}]")
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            raise ValueError(f"predict: {where} must be a tuple of {len(space.spaces)} parts")
        return _is_single(space.spaces[0], obs[0], f"{where}[0]")
    shape, expected = np.shape(obs), tuple(space.shape)
    if shape != expected and shape[1:] != expected:
        raise ValueError(
            f"predict: {where} has shape {expected} (a batch of N: {(-1, *expected)}), got {shape}"
        )
    return shape == expected


def _map_leaves(space: gym.Space, obs: Any, function: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _map_leaves(sub, obs[key], function) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            _map_leaves(sub, value, function) for sub, value in zip(space, obs, strict=True)
        )
    return function(obs)


def sample_observations(space: gym.Space, count: int, seed: int) -> Any:
    """`count` observations of `space`, seeded: uniform within a Box's bounds, except along axes
    whose bounds are infinite or beyond +-1000 (CartPole's velocities go to float32's largest
    value), where they are standard normal: uniform draws there would overflow the networks.
    The structured spaces' are the space's own draws, batched as a vector env batches them."""
    if is_structured(space):
        return _sample_structured(space, count, seed)
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return space.start + rng.integers(0, space.n, size=count)
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"observations of {space} cannot be drawn: Box and Discrete only")
    low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
    if np.issubdtype(space.dtype, np.integer):
        pixels = rng.integers(low, high, size=(count, *space.shape), endpoint=True)
        return pixels.astype(space.dtype)
    low, high = low.astype(np.float64), high.astype(np.float64)
    wide = ~(np.isfinite(low) & np.isfinite(high)) | (np.abs(low) > 1e3) | (np.abs(high) > 1e3)
    uniform = rng.uniform(np.where(wide, 0.0, low), np.where(wide, 1.0, high), (count, *low.shape))
    normal = np.clip(rng.standard_normal((count, *low.shape)), low, high)
    return np.where(wide, normal, uniform).astype(space.dtype)


def _sample_structured(space: gym.Space, count: int, seed: int) -> Any:
    """`count` observations of a structured space as a vector env batches them, seeded."""
    space = _seeded_copy(space, seed)
    draws = [space.sample() for _ in range(count)]
    return _stack(space, draws)


def _seeded_copy(space: gym.Space, seed: int) -> gym.Space:
    import copy

    space = copy.deepcopy(space)
    space.seed(seed)
    return space


def _stack(space: gym.Space, draws: list[Any]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _stack(sub, [d[key] for d in draws]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_stack(sub, [d[i] for d in draws]) for i, sub in enumerate(space.spaces))
    return np.stack([np.asarray(d) for d in draws])
