"""The spaces a policy file records: written as JSON and read back as the same spaces, and a record
from anywhere is read as data, checked, never trusted."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from kuberl_trainer.envs.space_record import (
    MAX_VALUES,
    space_from_record,
    space_kind,
    space_record,
    spaces_from_record,
    spaces_record,
)

SPACES = {
    "CartPole": gym.make("CartPole-v1").observation_space,  # infinite bounds among finite ones
    "Discrete": gym.spaces.Discrete(2),
    "Discrete-start": gym.spaces.Discrete(5, start=-2),
    "Pendulum-actions": gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
    "image": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
    "int64": gym.spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
    "float64": gym.spaces.Box(np.array([0.1, -1e300]), np.array([0.2, np.inf]), (2,), np.float64),
}


@pytest.mark.parametrize("name", SPACES)
def test_a_space_reads_back_as_it_was_written(name):
    space = SPACES[name]
    record = json.loads(json.dumps(space_record(space), allow_nan=False))  # strict JSON

    assert space_from_record(record) == space
    if isinstance(space, gym.spaces.Box):
        read = space_from_record(record)
        assert read.dtype == space.dtype
        np.testing.assert_array_equal(read.low, space.low)
        np.testing.assert_array_equal(read.high, space.high)


def test_equal_bounds_are_written_once_and_infinities_as_strings():
    assert space_record(SPACES["image"])["low"] == 0
    assert space_record(SPACES["image"])["high"] == 255
    assert space_record(SPACES["CartPole"])["high"][1] == "inf"


def test_both_spaces_travel_together():
    observation, action = SPACES["CartPole"], SPACES["Discrete"]
    assert spaces_from_record(spaces_record(observation, action)) == (observation, action)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"type": "Text"}, "MultiBinary, Dict and Tuple only"),
        ({"type": "Dict"}, "spaces must be a list of 1 to 1024 parts"),
        ({"type": "Discrete", "n": 0, "start": 0}, "n must be an integer from 1"),
        ({"type": "Discrete", "n": True, "start": 0}, "n must be an integer"),
        ({"type": "Discrete", "n": MAX_VALUES + 1, "start": 0}, "n must be an integer"),
        ({"type": "Box", "shape": [4], "dtype": "object", "low": 0, "high": 1}, "not a boolean"),
        ({"type": "Box", "shape": [4], "dtype": "float32", "low": [0, 1], "high": 1}, "2 bounds"),
        ({"type": "Box", "shape": [1 << 30], "dtype": "uint8", "low": 0, "high": 1}, "holds more"),
        ({"type": "Box", "shape": "4", "dtype": "float32", "low": 0, "high": 1}, "list of sizes"),
        ({"type": "Box", "shape": [1], "dtype": "float32", "low": "x", "high": 1}, "not one"),
        ({"type": "Box", "shape": [1], "dtype": "float32", "low": 2, "high": 1}, "not one"),
        ([], "not a mapping"),
    ],
)
def test_a_record_that_is_no_space_is_refused_saying_why(record, reason):
    with pytest.raises(ValueError, match=reason):
        space_from_record(record)


def test_the_kind_is_what_the_networks_depend_on_not_the_bounds():
    wider = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
    assert space_kind(wider) == space_kind(SPACES["Pendulum-actions"]) == "Box(1,) float32"
    assert space_kind(SPACES["image"]) != space_kind(gym.spaces.Box(0, 1, (4, 84, 84)))
    assert space_kind(SPACES["Discrete"]) == "Discrete(2)"
