"""`kuberl train FILE --set PATH=VALUE --seed N`: changes to a manifest made on the command line,
as `helm --set` makes them to values, so that a sweep needs no copies of the YAML.

PATH is dotted below the manifest (`spec.trainer.hyperparameters.learning_rate`), or below `spec`
when it does not start at one of the manifest's top-level fields (`trainer.stop.timesteps`); a
number picks an item of a list, and `\\.` is a dot inside a key (`metadata.labels.kuberl\\.io/x`).
VALUE is YAML, read with the bounds every manifest is read with: `0.001`, `true`, `[64, 64]`,
`{a: 1}`, or a string; `null` clears the field (its default applies), as `helm --set` does.
Missing mappings on the way are made; the changed manifest, as parsed, is
then checked as a whole, so an unknown or ill-typed field gets the usual problem line naming it.
A PATH and its VALUE together nest at most as deep as any manifest may (bounded.MAX_DEPTH), so
that no PATH, however long, makes the manifest too deep: its problem line names the --set.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from kuberl_operator.bounded import MAX_DEPTH
from kuberl_operator.validation import InvalidManifest, parse_yaml_document

TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
"""A manifest's own fields: a PATH starting elsewhere is read below `spec`."""

SEED_PATH = "spec.trainer.seed"
"""What --seed sets (kuberl_contract.config.trainer's `seed`)."""

YAML_NULLS = frozenset({"null", "Null", "NULL", "~"})

_UNESCAPED_DOT = re.compile(r"(?<!\\)\.")

_SHOWN_KEYS = 8
"""How many of a PATH's keys a problem line repeats: a PATH may be arbitrarily long."""


class OverrideError(ValueError):
    """An override that cannot be applied; the message names it and says why."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """The path's keys (from the manifest's top) and the value of `PATH=VALUE`."""
    path, equals, raw = text.partition("=")
    if not equals or not path.strip():
        raise OverrideError(f"--set {text}: expected PATH=VALUE, as in trainer.seed=3")
    keys = [key.replace("\\.", ".") for key in _UNESCAPED_DOT.split(path.strip())]
    if any(not key for key in keys):
        raise OverrideError(f"--set {text}: {path!r} has an empty key between dots")
    if keys[0] not in TOP_LEVEL:
        keys = ["spec", *keys]
    if len(keys) >= MAX_DEPTH:  # the manifest's own mapping is a level too
        raise OverrideError(
            f"--set {_shown(keys)}: {len(keys)} keys, and a PATH has at most {MAX_DEPTH - 1} (a "
            f"manifest nests at most {MAX_DEPTH} levels)"
        )
    if not raw.strip():
        raise OverrideError(f"--set {text}: no value: write {path}=null, or {path}='' for ''")
    if raw.strip() in YAML_NULLS:  # a document of null alone reads as no document at all
        return keys, None
    try:
        value = parse_yaml_document(raw)
    except InvalidManifest as exc:
        reasons = "; ".join(problem.message for problem in exc.problems)
        raise OverrideError(f"--set {text}: the value is not YAML: {reasons}") from None
    if (levels := 1 + len(keys) + _nesting(value)) > MAX_DEPTH:
        raise OverrideError(
            f"--set {_shown(keys)}: its value would nest the manifest {levels} levels deep, and a "
            f"manifest nests at most {MAX_DEPTH}"
        )
    return keys, value


def _shown(keys: list[str]) -> str:
    """The PATH of `keys` for a problem line, its middle left out when it is long."""
    if len(keys) <= _SHOWN_KEYS:
        return ".".join(keys)
    return f"{'.'.join(keys[: _SHOWN_KEYS - 1])}...{keys[-1]}"


def _nesting(value: Any) -> int:
    """How many levels `value` holds below itself (0 for a scalar, 1 for a list of scalars), as
    the bounded YAML reader counts them. The value was parsed within bounds, so this walk is
    too."""
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    )
    return max((1 + _nesting(child) for child in children), default=0)


def with_overrides(document: Any, overrides: list[str], seed: int | None = None) -> Any:
    """A copy of the parsed manifest with each override applied in order, then the seed."""
    changes = [parse_override(text) for text in overrides]
    if seed is not None:
        changes.append((SEED_PATH.split("."), seed))
    if not changes:
        return document
    if not isinstance(document, dict):
        raise OverrideError("the manifest is not a mapping: --set and --seed cannot change it")
    changed = copy.deepcopy(document)
    for keys, value in changes:
        _set(changed, keys, value)
    return changed


def _set(document: dict[str, Any], keys: list[str], value: Any) -> None:
    """Sets document[k1][k2]... = value, making the missing mappings on the way; a null value
    removes the key instead (nothing is made for it)."""
    node: Any = document
    for depth, key in enumerate(keys):
        where = ".".join(keys[: depth + 1])
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise OverrideError(
                    f"--set {'.'.join(keys)}: {'.'.join(keys[:depth])} is a list of "
                    f"{len(node)} items: {key!r} is not one of its indexes (0 to {len(node) - 1})"
                )
            index = int(key)
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            parent = ".".join(keys[:depth])
            raise OverrideError(
                f"--set {'.'.join(keys)}: {parent} is {_kind(node)}, not a mapping: "
                f"{where} cannot be set"
            )
        if last and value is None:
            node.pop(key, None)
            return
        if last:
            node[key] = value
            return
        if node.get(key) is None and value is None:  # nothing there to clear
            return
        if node.get(key) is None:  # missing (or null): made, as helm --set makes it
            node[key] = {}
        node = node[key]


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), "null" if value is None else type(value).__name__)
