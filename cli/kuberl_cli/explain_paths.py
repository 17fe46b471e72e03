"""`kuberl explain rljob.spec.trainer.stop`: any field of RLJob, offline, as `kubectl explain`
prints a CRD's fields, with the defaults and limits kubectl cannot show (field_reference reads
them from the models the CRD is generated from)."""

from __future__ import annotations

import difflib
import sys
import textwrap

from kuberl_cli.field_reference import (
    HYPERPARAMETERS_POINTER,
    SchemaField,
    markdown_section,
    rljob_fields,
)
from kuberl_operator.constants import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION

EXIT_OK, EXIT_UNKNOWN = 0, 2

RESOURCE_NAMES = (SINGULAR, PLURAL, *SHORT_NAMES)
"""What a path may start with, in any case: rljob, rljobs, rlj (and so RLJob)."""

_WIDTH = 100
_INDENT = "    "


class UnknownPath(ValueError):
    """A path that names no field of RLJob; the message says which segment and what is there."""


def is_rljob_path(argument: str) -> bool:
    """Whether `kuberl explain` was given a path of RLJob rather than an algorithm: one that starts
    with rljob (rljob, rljobs, RLJob.spec, rljobz) or is the short name (rlj, rlj.spec)."""
    resource = argument.split(".", 1)[0].lower()
    return resource.startswith(SINGULAR) or resource in SHORT_NAMES


def explain_path_command(
    path: str, recursive: bool = False, full: bool = False, markdown: bool = False
) -> int:
    """Prints the field at `path`; EXIT_UNKNOWN after naming the segment that is not a field."""
    try:
        field = field_at(path)
    except UnknownPath as unknown:
        print(unknown, file=sys.stderr)
        return EXIT_UNKNOWN
    if markdown:
        print("\n\n".join(markdown_section(each) for each in field.walk()))
    else:
        print("\n".join(explain_lines(field, recursive=recursive, full=full)))
    return EXIT_OK


def field_at(path: str) -> SchemaField:
    """The field a kubectl-style path names: `rljob`, `rljobs.spec`, `RLJob.spec.trainer.stop`;
    a list's items are reached through the list (`rljob.status.conditions.type`)."""
    resource, *names = path.split(".")
    if resource.lower() not in RESOURCE_NAMES:
        close = difflib.get_close_matches(resource.lower(), RESOURCE_NAMES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UnknownPath(
            f"unknown resource {resource!r}{hint} (kuberl explain takes a path of "
            f"{', '.join(RESOURCE_NAMES)}, in any case, or an algorithm)"
        )
    field = rljob_fields()
    for name in names:
        child = field.field(name)
        if child is None:
            raise UnknownPath(_unknown_field(name, field, resource))
        field = child
    return field


def _unknown_field(name: str, parent: SchemaField, resource: str) -> str:
    """Which segment is not a field, the closest fields of its parent, and all of them."""
    where = ".".join((resource, *parent.path))
    if not parent.fields:
        return f"unknown field {name!r}: {where} is <{parent.type}> and has no fields"
    names = [child.name for child in parent.fields]
    # Field names are case-sensitive, as Kubernetes' are: envconfig is no field, envConfig is.
    same_but_case = [other for other in names if other.lower() == name.lower()]
    close = same_but_case or difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown field {name!r} in {where}{hint} (fields: {', '.join(names)})"


def explain_lines(field: SchemaField, recursive: bool = False, full: bool = False) -> list[str]:
    """kubectl explain's layout: the resource, the field with its type, what the schema allows,
    its description and its fields (each with its type and first sentence, or with `recursive`
    the whole tree of names and types)."""
    lines = [f"GROUP:      {GROUP}", f"KIND:       {KIND}", f"VERSION:    {VERSION}", ""]
    if field.path:
        lines += [f"FIELD: {field.name} <{field.type}>{_required(field)}", ""]
    lines += _allowed(field)
    lines += ["DESCRIPTION:", *_wrapped(field.description or "(none)", _INDENT), ""]
    if field.about_hyperparameters:
        lines += [*_wrapped(HYPERPARAMETERS_POINTER, ""), ""]
    if field.fields:
        lines.append("FIELDS:")
        lines += _tree(field, "  ") if recursive else _field_list(field, full)
    return lines


def _allowed(field: SchemaField) -> list[str]:
    """The enum, default and limits, each where the schema has one."""
    lines = ["ENUM:", *(f"{_INDENT}{value}" for value in field.enum), ""] if field.enum else []
    bounds = [f"DEFAULT: {field.default}"] if field.default is not None else []
    bounds += [f"LIMITS: {limit}" for limit in field.limits]
    return [*lines, *bounds, ""] if bounds else lines


def _field_list(field: SchemaField, full: bool) -> list[str]:
    lines: list[str] = []
    for child in field.fields:
        lines.append(f"  {child.name}\t<{child.type}>{_required(child)}")
        description = child.description if full else _sentence(child.summary)
        lines += [*_wrapped(description, _INDENT), ""]
    return lines


def _tree(field: SchemaField, indent: str) -> list[str]:
    """Names and types of every field under `field`, indented by depth, as kubectl explain
    --recursive lists them."""
    lines: list[str] = []
    for child in field.fields:
        lines.append(f"{indent}{child.name}\t<{child.type}>{_required(child)}")
        lines += _tree(child, indent + "  ")
    return lines


def _required(field: SchemaField) -> str:
    return " -required-" if field.required and field.path else ""


def _sentence(summary: str) -> str:
    return f"{summary}." if summary else ""


def _wrapped(text: str, indent: str) -> list[str]:
    # whole words only: a name such as Stable-Baselines3 or a pattern is not split at a hyphen
    return textwrap.wrap(
        text,
        _WIDTH,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
