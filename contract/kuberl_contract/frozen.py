"""A job's config as plain read-only values, for the processes that only read it.

A remote rollout worker that acts in numpy (policy/acting.py) reads a few dozen of its job's
settings: the env and its wrappers, the network's sizes, gamma, the normalization switches. The
config itself is pydantic models, and defining them in a fresh process costs 0.065 CPU-seconds
(pydantic builds their validators and schemas, docstrings.py reads their fields' docstrings; 0.1
when pydantic read those), a sixth of such a worker's start, paid once per worker, from the
learner's cores where workers share them. So the driver sends those workers `config.frozen(...)`, a
`Frozen` copy that unpickles without the config package: the same attribute names with the same
values (the properties' values included), enums as their strings. (Ray's workers import pydantic
itself anyway, for serializers of their own: the models are the cost.) Where a worker needs the
config itself after all (a policy that falls back to torch), `config.thawed` validates the document
it carries back into the config.

This module imports nothing of kuberl's (an import-linter contract holds that of the modules a
remote worker imports).
"""

from __future__ import annotations

from typing import Any


class Frozen:
    """Read-only attributes: a config model's fields and properties, nested models frozen too.
    `document` is the whole config's manifest document (camelCase, as `kuberl validate` reads
    it) on the top level, None below it."""

    def __init__(self, values: dict[str, Any], document: dict[str, Any] | None = None):
        self.__dict__.update(values)
        self.__dict__["document"] = document

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name}: a frozen config is read-only")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if k != "document")
        return f"Frozen({fields})"
