"""The RLJob models walked as a manifest's fields, for the problems validation reports: where a
pydantic error location leads in the manifest's own names (its union tags left out), the type
found there and the field that holds it; the names a model accepts, the values an enum or a
Literal allows, and the variants of a discriminated union (spec.trainer)."""

from __future__ import annotations

import types
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Tag
from pydantic.fields import FieldInfo

from kuberl_operator.spec import RLJob


def follow_location(loc: tuple[str | int, ...]) -> tuple[list[str | int], Any, FieldInfo | None]:
    """The manifest path of a pydantic location (without union tags), the type found there and
    the field that holds it (None where the location leaves the models)."""
    node: Any = RLJob
    field: FieldInfo | None = None
    parts: list[str | int] = []
    for part in loc:
        if part == "[key]":  # pydantic's marker for a bad mapping key
            continue
        unwrapped = unwrap(node)
        variants = tagged_variants(unwrapped)
        if part in variants:  # the tag pydantic inserts for the union member it tried
            node = variants[part]
            continue
        parts.append(part)
        node, field = _child(unwrapped, part)
    return parts, node, field


def _child(node: Any, part: str | int) -> tuple[Any, FieldInfo | None]:
    if _is_model(node):
        found = field_by_any_name(node, str(part))
        return (found[1].annotation, found[1]) if found else (None, None)
    origin, args = get_origin(node), get_args(node)
    if origin is list and args and isinstance(part, int):
        return args[0], None
    if origin is dict and len(args) == 2:
        return args[1], None
    return None, None


def field_by_any_name(node: Any, name: str) -> tuple[str, FieldInfo] | None:
    """The manifest name and the field of the model field called `name` (alias or Python name)."""
    if not _is_model(node):
        return None
    for python_name, field in node.model_fields.items():
        alias = field.alias or python_name
        if name in (alias, python_name):
            return alias, field
    return None


def variant_field(node: Any, name: str) -> tuple[str, FieldInfo] | None:
    """The field called `name` of a discriminated union's variants (PBT's inner trainer)."""
    for variant in tagged_variants(node).values():
        if found := field_by_any_name(unwrap(variant), name):
            return found
    return None


def field_names(node: Any) -> list[str]:
    """The manifest names of a model's fields; none for anything but a model."""
    node = unwrap(node)
    if not _is_model(node):
        return []
    return [field.alias or name for name, field in node.model_fields.items()]


def allowed_values(node: Any) -> list[str]:
    """The values a Literal or an enum allows; none for any other type."""
    if get_origin(node) is Literal:
        return [str(arg) for arg in get_args(node)]
    if isinstance(node, type) and issubclass(node, Enum):
        return [str(member.value) for member in node]
    return []


def unwrap(node: Any) -> Any:
    """The type inside Annotated[...] and Optional[...]."""
    while True:
        if get_origin(node) is Annotated:
            node = get_args(node)[0]
        elif _is_union(node) and len(members := _non_null_members(node)) == 1:
            node = members[0]
        else:
            return node


def tagged_variants(node: Any) -> dict[str, Any]:
    """Tag -> model for a discriminated union (spec.trainer); empty for anything else."""
    if not _is_union(node):
        return {}
    variants = {}
    for member in get_args(node):
        if get_origin(member) is Annotated:
            model, *metadata = get_args(member)
            variants |= {meta.tag: model for meta in metadata if isinstance(meta, Tag)}
    return variants


def _is_union(node: Any) -> bool:
    return get_origin(node) in (Union, types.UnionType)


def _non_null_members(node: Any) -> list[Any]:
    return [member for member in get_args(node) if member is not type(None)]


def _is_model(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, BaseModel)
