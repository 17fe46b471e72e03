"""Every field of RLJob as a user reads it (type, default, limits, enum, description), and the
field reference docs/reference/rljob.md rendered from them.

The fields are read from the CRD's openAPIV3Schema as kuberl_operator.crd builds it (what the API
server and `kubectl explain` see), with two additions from the same pydantic models: the notes on
`metadata` (the CRD leaves metadata to the API server) and the defaults (the CRD drops them, since
the operator applies them itself). So `kuberl explain rljob.PATH`, the reference and the CRD have
one source.

Run `python -m kuberl_cli.field_reference > docs/reference/rljob.md` after changing the models.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from kuberl_contract.hyperparameters.fields import first_sentence, yaml_value
from kuberl_operator.constants import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from kuberl_operator.crd import rljob_schema, structural
from kuberl_operator.spec import RLJob

HYPERPARAMETERS_POINTER = (
    "`kuberl explain ALGORITHM` lists an algorithm's hyperparameters with their types, ranges and "
    "defaults (`kuberl explain` alone lists the algorithms)."
)
"""Said under `hyperparameters`: the CRD cannot type them, as they depend on the algorithm."""


@dataclass(frozen=True)
class SchemaField:
    """One field of RLJob (the root has the empty path)."""

    path: tuple[str, ...]
    type: str
    """As kubectl explain spells it: string, integer, Object, []Object, map[string]string."""
    description: str
    """On one line."""
    required: bool = False
    enum: tuple[str, ...] = ()
    default: str | None = None
    """As YAML spells it; None where there is none to show (a nested object's, a required
    field's, or one that depends on the algorithm)."""
    limits: tuple[str, ...] = ()
    """Bounds beyond the type: `(0, 1]`, `1-63 characters`, `pattern ^[a-z]+$`."""
    fields: tuple[SchemaField, ...] = ()

    @property
    def name(self) -> str:
        return self.path[-1] if self.path else KIND

    @property
    def dotted(self) -> str:
        """`spec.trainer.stop`; the root is `rljob`."""
        return ".".join(self.path) or SINGULAR

    @property
    def summary(self) -> str:
        return first_sentence(self.description)

    @property
    def about_hyperparameters(self) -> bool:
        return "hyperparameters" in self.path

    def field(self, name: str) -> SchemaField | None:
        return next((child for child in self.fields if child.name == name), None)

    def walk(self) -> list[SchemaField]:
        """This field and every field under it, depth first in the schema's order."""
        return [self, *(field for child in self.fields for field in child.walk())]


@functools.cache
def rljob_fields() -> SchemaField:
    """The RLJob resource as a tree of fields."""
    models = _models_schema()
    return _field((), documented_schema(), True, [models], models["$defs"])


def documented_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema with the fields of `metadata` that kuberl reads."""
    schema = rljob_schema()
    models = _models_schema()
    schema["properties"]["metadata"] = structural(models["properties"]["metadata"], models["$defs"])
    return schema


def _models_schema() -> dict[str, Any]:
    """The models' JSON schema, made as the CRD's is: the same tree, with defaults."""
    return RLJob.model_json_schema(by_alias=True, mode="validation")


def _field(
    path: tuple[str, ...],
    node: dict[str, Any],
    required: bool,
    origins: list[dict[str, Any]],
    defs: dict[str, Any],
) -> SchemaField:
    """A field from its CRD schema node and the models' nodes it was made from (several where a
    union by algorithm merged them), whose references `defs` resolves."""
    objects = [concrete for origin in origins for concrete in _objects(origin, defs)]
    own = _objects_of_crd(node)
    fields = tuple(
        _field(
            (*path, name),
            child,
            required=name in own.get("required", []),
            origins=[o["properties"][name] for o in objects if name in o.get("properties", {})],
            defs=defs,
        )
        for name, child in own.get("properties", {}).items()
    )
    return SchemaField(
        path=path,
        type=kubectl_type(node),
        description=" ".join(node.get("description", "").split()),
        required=required,
        enum=tuple(yaml_value(value) for value in node.get("enum", ())),
        default=_default(origins),
        limits=limits(node),
        fields=fields,
    )


def _objects_of_crd(node: dict[str, Any]) -> dict[str, Any]:
    """The object whose properties are the node's fields: a list's items are explained through
    the list, as kubectl explain does."""
    while node.get("type") == "array":
        node = node["items"]
    return node


def _objects(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a pydantic node stands for: a reference followed, `X | None` unwrapped,
    each variant of a union, a list's items."""
    if "$ref" in node:
        return _objects(defs[node["$ref"].removeprefix("#/$defs/")], defs)
    for union in ("anyOf", "oneOf"):
        if union in node:
            return [found for option in node[union] for found in _objects(option, defs)]
    if node.get("type") == "array" and "items" in node:
        return _objects(node["items"], defs)
    return [node] if "properties" in node else []


def _default(origins: list[dict[str, Any]]) -> str | None:
    """The default every model that has the field agrees on; none where one has none (a required
    field, a nested object's) or where they differ (hyperparameters, by algorithm)."""
    if not origins or any("default" not in origin for origin in origins):
        return None
    # An empty string is quoted: left bare it would read as no default at all.
    defaults = {yaml_value(origin["default"]) or '""' for origin in origins}
    return defaults.pop() if len(defaults) == 1 else None


def kubectl_type(node: dict[str, Any]) -> str:
    """The node's type as kubectl explain prints it between < and >."""
    if node.get("x-kubernetes-int-or-string"):
        return "IntOrString"
    kind = node.get("type")
    if kind == "array":
        return "[]" + kubectl_type(node["items"])
    if kind == "object":
        values = node.get("additionalProperties")
        return f"map[string]{kubectl_type(values)}" if isinstance(values, dict) else "Object"
    # A hyperparameter's type depends on the algorithm: the CRD leaves it open.
    return kind or "any"


def limits(node: dict[str, Any]) -> tuple[str, ...]:
    """What the schema allows beyond the type, as a user reads it."""
    found = [
        _interval(node),
        _length(node, "minLength", "maxLength", "character"),
        _length(node, "minItems", "maxItems", "item"),
        f"format {node['format']}" if "format" in node else "",
        f"pattern {node['pattern']}" if "pattern" in node else "",
    ]
    return tuple(limit for limit in found if limit)


def _interval(node: dict[str, Any]) -> str:
    """`(0, 1]`, `>= 1`, `< 10` from OpenAPI's minimum, maximum and their exclusive flags."""
    low, high = node.get("minimum"), node.get("maximum")
    low_open, high_open = node.get("exclusiveMinimum", False), node.get("exclusiveMaximum", False)
    if low is not None and high is not None:
        return (
            f"{'(' if low_open else '['}{_number(low)}, {_number(high)}{')' if high_open else ']'}"
        )
    if low is not None:
        return f"{'>' if low_open else '>='} {_number(low)}"
    if high is not None:
        return f"{'<' if high_open else '<='} {_number(high)}"
    return ""


def _length(node: dict[str, Any], least_key: str, most_key: str, unit: str) -> str:
    """`1-63 characters`, `at least 1 item`, `at most 64 items`."""
    least, most = node.get(least_key), node.get(most_key)
    if least is not None and most is not None:
        return f"{least}-{most} {unit}s"
    if least is not None:
        return f"at least {least} {unit}{'s' if least != 1 else ''}"
    if most is not None:
        return f"at most {most} {unit}{'s' if most != 1 else ''}"
    return ""


def _number(value: float) -> str:
    """0 and 1 for 0.0 and 1.0, as the docstrings write bounds."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


# --- The Markdown reference -----------------------------------------------------------------

HEADER = "<!-- Generated by `python -m kuberl_cli.field_reference`; do not edit. -->"


def reference_markdown() -> str:
    """docs/reference/rljob.md: every field of RLJob, one section each, parents before children."""
    root = rljob_fields()
    names = ", ".join(f"`{name}`" for name in (SINGULAR, PLURAL, *SHORT_NAMES))
    introduction = (
        f"Every field of the `{KIND}` resource (`{GROUP}/{VERSION}`; {names} on the command "
        "line), read from the models its CustomResourceDefinition is generated from: type, "
        "default, limits, allowed values and description. `kuberl explain rljob.PATH` prints "
        "one field in a terminal and `kuberl explain rljob.PATH --recursive` the fields under it; "
        f"{HYPERPARAMETERS_POINTER}"
    )
    blocks = [f"# {KIND} field reference", HEADER, introduction, _fields_table(root)]
    blocks += [markdown_section(field) for field in root.walk()[1:]]
    return "\n\n".join(block for block in blocks if block) + "\n"


def markdown_section(field: SchemaField) -> str:
    """One field's section: a heading whose anchor is its path, what it allows, its description,
    and a table of its fields linked to their sections."""
    # Three levels: the top fields, their fields, and all deeper ones (the path says how deep).
    level = "#" * min(len(field.path) + 1, 4)
    facts = [f"`{field.type}`", "required" if field.required else ""]
    facts += [f"default `{field.default}`" if field.default is not None else ""]
    facts += [f"`{limit}`" for limit in field.limits]
    facts += ["one of " + ", ".join(f"`{value}`" for value in field.enum) if field.enum else ""]
    pointer = field.about_hyperparameters and field.name == "hyperparameters"
    blocks = [
        # An anchor of its own: links to it hold whichever slugs the site's headings get.
        f'{level} <a id="{field.dotted}"></a>`{field.dotted}`',
        " · ".join(fact for fact in facts if fact),
        markdown_text(field.description),
        markdown_text(HYPERPARAMETERS_POINTER) if pointer else "",
        _fields_table(field),
    ]
    return "\n\n".join(block for block in blocks if block)


def _fields_table(field: SchemaField) -> str:
    """A field's fields, each linked to its section, with its type and first sentence."""
    if not field.fields:
        return ""
    rows = ["| field | type | what it is |", "|---|---|---|"]
    for child in field.fields:
        summary = markdown_text(child.summary).replace("|", "\\|")
        rows.append(f"| [`{child.name}`](#{child.dotted}) | `{child.type}` | {summary} |")
    return "\n".join(rows)


_CODE_SPAN = re.compile(r"(`[^`]*`)")


def markdown_text(text: str) -> str:
    """Prose as Markdown shows it verbatim: `<job>` is no HTML tag, `a ** b` no emphasis; code
    spans are left as written."""
    parts = _CODE_SPAN.split(text)
    return "".join(
        part
        if part.startswith("`")
        else re.sub(r"([\\*_\[\]])", r"\\\1", part).replace("<", "&lt;")
        for part in parts
    )


def main() -> None:
    print(reference_markdown(), end="")


if __name__ == "__main__":
    main()
