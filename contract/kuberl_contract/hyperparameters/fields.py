"""Each hyperparameter as a user reads it: type, default, allowed range and meaning, read from
the pydantic model (its constraints and its field docstrings), for `kuberl explain` and the
docs' tables of defaults (docs/reference/algorithms.md)."""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class FieldDoc:
    """One hyperparameter of one algorithm."""

    name: str
    type: str
    """As YAML spells the values: int, float, bool, list[int], tanh | relu, float | null."""
    default: str
    """As YAML spells it: 0.0003, null, true, [64, 64]."""
    range: str
    """The allowed values beyond the type, from the field's constraints: (0, 1], >= 1, 1-8
    items; empty when the type says it all."""
    description: str
    """The field's docstring, on one line."""

    @property
    def summary(self) -> str:
        """The description's first sentence, without its full stop."""
        return first_sentence(self.description)


def field_docs(model: type[BaseModel]) -> list[FieldDoc]:
    """Every field of a hyperparameters model, in the model's order."""
    return [
        FieldDoc(
            name=name,
            type=type_name(field.annotation),
            default=yaml_value(field.get_default(call_default_factory=True)),
            range=value_range(field),
            description=" ".join((field.description or "").split()),
        )
        for name, field in model.model_fields.items()
    ]


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence: one followed by a capital or a digit, as
    the stops in 1.0, e.g. and et al. 2017 are not."""
    return _SENTENCE_END.split(text, maxsplit=1)[0].removesuffix(".")


_SENTENCE_END = re.compile(r"(?<!\bal)\.\s+(?=[A-Z0-9])")


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {yaml_value(item)}" for key, item in value.items()) + "}"
    return str(value)


_TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "string", Any: "any"}


def type_name(annotation: Any) -> str:
    """`int`, `float | null`, `tanh | relu`, `list[int]`, `map[string, Mutation]`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin in (Union, types.UnionType):
        names = [type_name(arg) for arg in args if arg is not type(None)]
        return " | ".join(names + (["null"] if type(None) in args else []))
    if origin is Literal:
        return " | ".join(str(arg) for arg in args)
    if origin is list:
        return f"list[{type_name(args[0])}]"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]"
    if annotation in _TYPE_NAMES:
        return _TYPE_NAMES[annotation]
    return getattr(annotation, "__name__", str(annotation))


def value_range(field: FieldInfo) -> str:
    """The bounds of a number as an interval (`(0, 1]`, `>= 1`), or of a list as its length and
    its items' bounds (`1-8 items, each [1, 4096]`)."""
    annotation = field.annotation
    if get_origin(annotation) is list:
        items = _interval(_annotated_constraints(get_args(annotation)[0]))
        parts = [_length(field.metadata), f"each {items}" if items else ""]
        return ", ".join(part for part in parts if part)
    constraints = list(field.metadata)
    for member in get_args(annotation):  # the number in an optional one (GradClip)
        constraints.extend(_annotated_constraints(member))
    return _interval(constraints)


def _annotated_constraints(annotation: Any) -> list[Any]:
    """The constraints of Annotated[type, Field(...)] (none for a plain type)."""
    if get_origin(annotation) is not Annotated:
        return []
    constraints: list[Any] = []
    for meta in annotation.__metadata__:
        constraints.extend(meta.metadata if isinstance(meta, FieldInfo) else [meta])
    return constraints


def _bounds(constraints: list[Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {
        key: getattr(constraint, key)
        for constraint in constraints
        for key in keys
        if getattr(constraint, key, None) is not None
    }


def _interval(constraints: list[Any]) -> str:
    bounds = _bounds(constraints, ("gt", "ge", "lt", "le"))
    low = next(((f"{b}", bounds[k]) for k, b in (("gt", "("), ("ge", "[")) if k in bounds), None)
    high = next(((f"{b}", bounds[k]) for k, b in (("lt", ")"), ("le", "]")) if k in bounds), None)
    if low and high:
        return f"{low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
    if low:
        return f"{'>' if low[0] == '(' else '>='} {_number(low[1])}"
    if high:
        return f"{'<' if high[0] == ')' else '<='} {_number(high[1])}"
    return ""


def _length(constraints: list[Any]) -> str:
    bounds = _bounds(constraints, ("min_length", "max_length"))
    if not bounds:
        return ""
    least, most = bounds.get("min_length", 0), bounds.get("max_length")
    return f"{least}-{most} items" if most is not None else f">= {least} items"


def _number(value: float) -> str:
    """0 and 1 for 0.0 and 1.0: a bound reads as the docstrings write it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def markdown_table(model: type[BaseModel]) -> list[str]:
    """The docs' table of a model's defaults: name, default and the first sentence of the
    docstring, one row per field."""
    rows = ["| hyperparameter | default | what it sets |", "|---|---|---|"]
    for doc in field_docs(model):
        summary = doc.summary.replace("|", "\\|")
        rows.append(f"| {doc.name} | {doc.default} | {summary} |")
    return rows
