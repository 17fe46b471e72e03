"""Reading a manifest nobody vouches for, within bounds: its size, its nesting, YAML's aliases, and
numbers Kubernetes can carry.

Manifests enter through the REST API, the CLI and the Kubernetes API; each goes through here, so a
hostile one costs at most a bounded parse and gets one problem line naming what is wrong:
- **size**: MAX_MANIFEST_BYTES, checked before the text is read whole where the caller can;
- **nesting**: MAX_DEPTH levels of mappings and lists (PyYAML's composer and every walk over the
  document recurse per level; beyond Python's recursion limit they would crash);
- **aliases**: a YAML alias repeats a node by reference, so nine levels of nine aliases fit in 1 KiB
  and expand to 9^9 nodes when the document is stored or validated. Aliases are kept (kubectl
  accepts them), but the document as expanded may hold at most MAX_NODES nodes, and an alias inside
  its own anchor (a cycle) is refused;
- **numbers**: JSON has no infinity or NaN, and Kubernetes stores integers as int64; a manifest
  holding others could be stored nowhere and would fail later, far from the mistake.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import yaml

MAX_MANIFEST_BYTES = 1024 * 1024
"""The largest manifest accepted, in bytes (Kubernetes' own limit on a request is 3 MiB; an RLJob
is a few KiB)."""

MAX_DEPTH = 64
"""Mappings and lists nested deeper than this are refused (an RLJob needs about ten)."""

MAX_NODES = 100_000
"""A document expanding to more mappings, lists and scalars than this is refused (an RLJob has a
few hundred; PBT trials with long value lists a few thousand)."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Problem(NamedTuple):
    """One thing wrong with a manifest: where (a dotted field path, empty for the whole document)
    and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidManifest(ValueError):
    """The manifest is not a valid RLJob; `problems` lists every reason found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = problems


def format_path(parts: Sequence[str | int]) -> str:
    """`spec.learner.tolerations[0].effect`; keys that are not identifiers go in brackets."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][\w-]*", part):
            path += f".{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path


def too_large() -> InvalidManifest:
    return InvalidManifest(
        [Problem("", f"larger than {MAX_MANIFEST_BYTES} bytes, the most a manifest may hold")]
    )


# --- YAML ---------------------------------------------------------------------------------------


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with its recursive composer held to MAX_DEPTH levels."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InvalidManifest([Problem("", _where(mark) + _TOO_DEEP)])
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"


def load_yaml_documents(text: str) -> list[Any]:
    """The non-empty YAML documents in `text`, each within the bounds above, or InvalidManifest
    saying where the YAML breaks or which bound it passes."""
    if len(text) > MAX_MANIFEST_BYTES:  # characters: a bound on the bytes too, give or take UTF-8
        raise too_large()
    loader = _BoundedLoader(text)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            _check_expansion(node)
            if (document := loader.construct_document(node)) is not None:
                documents.append(document)
    except InvalidManifest:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InvalidManifest(
            [Problem("", f"{_where(mark)}not valid YAML: {exc.problem}")]
        ) from None
    except yaml.YAMLError as exc:
        raise InvalidManifest([Problem("", f"not valid YAML: {exc}")]) from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise InvalidManifest([Problem("", f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return documents


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def _check_expansion(root: yaml.Node) -> None:
    """Counts the nodes of the document as its aliases expand it, without expanding it: each
    node's expanded size is computed once (aliases share nodes), children before parents."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # nodes whose children are being counted: their ancestors
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_counted = stack.pop()
        key = id(node)
        if children_counted:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_NODES:
                raise InvalidManifest(
                    [
                        Problem(
                            "",
                            f"{_where(node.start_mark)}the document expands to over {MAX_NODES} "
                            "values (YAML aliases repeat what they name): write it out, smaller",
                        )
                    ]
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise InvalidManifest(
                [Problem("", f"{_where(node.start_mark)}a YAML alias refers to itself")]
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


# --- JSON ---------------------------------------------------------------------------------------


def load_json(text: str) -> Any:
    """The JSON value in `text` (strict JSON: no NaN or Infinity), or InvalidManifest."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise too_large()
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidManifest([Problem("", f"{where}: not valid JSON: {exc.msg}")]) from None
    except RecursionError:  # deeper than Python's recursion limit: far past MAX_DEPTH
        raise InvalidManifest([Problem("", _TOO_DEEP)]) from None
    except ValueError as exc:  # NaN, Infinity, or an integer of over 4,300 digits
        raise InvalidManifest([Problem("", f"not valid JSON: {exc}")]) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# --- The parsed document ------------------------------------------------------------------------


def document_problems(document: Any) -> list[Problem]:
    """What no RLJob may hold, wherever it is: nesting beyond MAX_DEPTH, non-finite numbers,
    integers beyond int64, and mapping keys that are not strings (JSON and Kubernetes have only
    string keys). Walked without recursion, so any parsed document can be checked."""
    problems: list[Problem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        value, parts = stack.pop()
        path = format_path(parts)
        if len(parts) > MAX_DEPTH:
            problems.append(Problem(path, _TOO_DEEP))
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str):
                    stack.append((item, (*parts, key)))
                else:
                    problems.append(
                        Problem(
                            format_path((*parts, str(key))),
                            f"a key must be a string, got {type(key).__name__}: quote it",
                        )
                    )
        elif isinstance(value, list):
            stack.extend((item, (*parts, index)) for index, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(
                Problem(
                    path,
                    f"{value} is not a finite number: Kubernetes (JSON) stores only finite ones",
                )
            )
        elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            problems.append(
                Problem(path, f"{value} does not fit in the 64-bit integers Kubernetes stores")
            )
    return sorted(problems)
