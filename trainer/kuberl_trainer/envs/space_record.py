"""The observation and action spaces a policy was trained on, written down as JSON: checkpoints
record them in their meta and exported files in their metadata, so that acting with a loaded
policy (`predict`, `kuberl export`) needs no env, and none is made from what a file says.

    {"observation": {"type": "Box", "shape": [4], "dtype": "float32",
                     "low": [-4.8, "-inf", -0.42, "-inf"], "high": [4.8, "inf", 0.42, "inf"]},
     "action": {"type": "Discrete", "n": 2, "start": 0}}

A Box's bounds are one number when they are all the same (an image's 0 and 255), else one per
value in C order; JSON has no infinities, so they are written as the strings "inf" and "-inf".
The other spaces kuberl takes:

    {"type": "MultiDiscrete", "shape": [2], "nvec": [3, 2], "start": [0, 0]}   (C order)
    {"type": "MultiBinary", "shape": [4]}
    {"type": "Dict", "spaces": [["board", {...}], ["action_mask", {...}]]}   (in the space's order)
    {"type": "Tuple", "spaces": [{...}, {...}]}

Reading a record back checks it as data from anywhere: these types only, numeric dtypes, at most
MAX_VALUES values in all, bounds that fit the shape, at most MAX_DEPTH levels of Dict and Tuple.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

SPACES = "spaces"
"""The key of a checkpoint's meta and of an exported file's metadata that holds the record."""
MAX_VALUES = 1 << 24
"""The most values a recorded Box (or a Discrete's n) may have: far above any env kuberl trains
(an Atari frame stack has 28,224), far below what would exhaust memory."""
MAX_DIMENSIONS = 32
MAX_DEPTH = 8
"""The most levels of Dict and Tuple a recorded space may nest."""
MAX_PARTS = 1024
"""The most sub-spaces a recorded Dict or Tuple may hold."""


def spaces_record(observation: gym.Space, action: gym.Space) -> dict[str, Any]:
    """Both spaces as JSON values."""
    return {"observation": space_record(observation), "action": space_record(action)}


def spaces_from_record(record: Any) -> tuple[gym.Space, gym.Space]:
    """(observation space, action space) of a record; ValueError saying what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"the recorded spaces are a {type(record).__name__}, not a mapping")
    return space_from_record(record.get("observation")), space_from_record(record.get("action"))


def space_record(space: gym.Space) -> dict[str, Any]:
    """One space as a JSON value; ValueError for spaces kuberl's policies do not take."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "shape": list(space.shape),
            "nvec": space.nvec.ravel().tolist(),
            "start": np.broadcast_to(space.start, space.shape).ravel().tolist(),
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "shape": list(space.shape)}
    if isinstance(space, gym.spaces.Dict):
        parts = [[key, space_record(sub)] for key, sub in space.spaces.items()]
        return {"type": "Dict", "spaces": parts}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_record(sub) for sub in space.spaces]}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.name,
            "low": _bounds(space.low),
            "high": _bounds(space.high),
        }
    raise ValueError(f"{space} cannot be recorded: {SUPPORTED}")


SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple only"


def space_from_record(record: Any, depth: int = 0) -> gym.Space:
    """The space a record describes; ValueError saying what is wrong with it."""
    space = _space_from_record(record, depth)
    if depth == 0 and _values_in(space) > MAX_VALUES:
        raise ValueError(f"a recorded space holds more than {MAX_VALUES} values")
    return space


def _space_from_record(record: Any, depth: int) -> gym.Space:
    if not isinstance(record, dict):
        raise ValueError(f"a recorded space is a {type(record).__name__}, not a mapping")
    kind = record.get("type")
    try:
        if kind in ("Dict", "Tuple"):
            return _composite(kind, record.get("spaces"), depth)
        if kind == "MultiDiscrete":
            shape = _shape(record.get("shape"))
            nvec = _array(record.get("nvec"), shape, np.dtype(np.int64))
            start = _array(record.get("start"), shape, np.dtype(np.int64))
            if not nvec.size or np.any(nvec < 1):
                raise ValueError("nvec must hold sizes of at least 1")
            return gym.spaces.MultiDiscrete(nvec, start=start)
        if kind == "MultiBinary":
            shape = _shape(record.get("shape"))
            return gym.spaces.MultiBinary(shape[0] if len(shape) == 1 else list(shape))
        if kind == "Discrete":
            n, start = _integer(record, "n", 1, MAX_VALUES), _integer(record, "start")
            return gym.spaces.Discrete(n, start=start)
        if kind == "Box":
            shape, dtype = _shape(record.get("shape")), _dtype(record.get("dtype"))
            low = _array(record.get("low"), shape, dtype)
            high = _array(record.get("high"), shape, dtype)
            return gym.spaces.Box(low, high, shape, dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"a recorded {kind} space is not one: {exc}") from None
    raise ValueError(f"a recorded space has type {kind!r}: {SUPPORTED}")


def _composite(kind: str, parts: Any, depth: int) -> gym.Space:
    """A recorded Dict (a list of [key, space] pairs, in its order) or Tuple (a list)."""
    if depth >= MAX_DEPTH:
        raise ValueError(f"Dict and Tuple spaces nest more than {MAX_DEPTH} levels")
    if not isinstance(parts, list) or not 0 < len(parts) <= MAX_PARTS:
        raise ValueError(f"spaces must be a list of 1 to {MAX_PARTS} parts")
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_record(part, depth + 1) for part in parts])
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in parts):
        raise ValueError("a Dict's spaces must be [key, space] pairs")
    if len({key for key, _ in parts}) != len(parts):
        raise ValueError("a Dict's keys must differ")
    # From pairs, in their order: gymnasium sorts the keys of a plain dict, not of these.
    return gym.spaces.Dict([(key, space_from_record(part, depth + 1)) for key, part in parts])


def _values_in(space: gym.Space) -> int:
    """How many numbers a space's record made arrays of."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return sum(_values_in(sub) for sub in subs)
    return math.prod(space.shape)


def space_kind(space: gym.Space) -> str:
    """What the networks depend on, shown as such: `Discrete(2)`, `Box(4,) float32`,
    `Dict('a': Box(2,) float32, 'b': Discrete(3))`. Two spaces of the same kind feed and take the
    same tensors, whatever their bounds."""
    if isinstance(space, gym.spaces.Box):
        return f"Box{tuple(space.shape)} {space.dtype}"
    if isinstance(space, gym.spaces.Dict):
        parts = ", ".join(f"{key!r}: {space_kind(sub)}" for key, sub in space.spaces.items())
        return f"Dict({parts})"
    if isinstance(space, gym.spaces.Tuple):
        return f"Tuple({', '.join(space_kind(sub) for sub in space.spaces)})"
    return str(space)


def _bounds(values: np.ndarray) -> Any:
    """A Box's low or high: one number when all are equal, else one per value."""
    flat = [_number(value) for value in np.asarray(values).ravel()]
    return flat[0] if flat and all(value == flat[0] for value in flat) else flat


def _number(value: Any) -> int | float | str:
    if isinstance(value, np.integer | np.bool_):
        return int(value)
    number = float(value)
    return number if math.isfinite(number) else str(number)  # "inf", "-inf", "nan"


def _integer(record: dict[str, Any], key: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{key} must be an integer from {low} to {high}, got {value!r}")
    return value


def _shape(value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or len(value) > MAX_DIMENSIONS
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
    ):
        raise ValueError(f"shape must be a list of sizes, got {value!r}")
    if math.prod(value) > MAX_VALUES:
        raise ValueError(f"shape {value} holds more than {MAX_VALUES} values")
    return tuple(value)


def _dtype(value: Any) -> np.dtype:
    if not isinstance(value, str):
        raise ValueError(f"dtype must be a string, got {value!r}")
    dtype = np.dtype(value)
    if dtype.kind not in "biuf":
        raise ValueError(f"dtype {value!r} is not a boolean or numeric dtype")
    return dtype


def _array(value: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Bounds of `shape` from one number or one per value."""
    values = value if isinstance(value, list) else [value]
    if len(values) not in (1, math.prod(shape)):
        raise ValueError(f"{len(values)} bounds for shape {shape}")
    if dtype.kind in "fc":
        array = np.array([float(number) for number in values], dtype=np.float64)
    else:  # exact: int64 bounds do not survive a float
        array = np.array([int(number) for number in values], dtype=np.int64)
    # Cast to the space's dtype here: gymnasium warns of a float64 bound for a float32 space.
    whole = array.reshape(shape) if len(values) > 1 else np.broadcast_to(array[0], shape)
    return whole.astype(dtype)
