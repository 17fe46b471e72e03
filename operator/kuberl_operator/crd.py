"""The RLJob CustomResourceDefinition, generated from the pydantic models in kuberl_operator.spec.

Kubernetes only accepts *structural* schemas: every node typed, no $ref, no `anyOf: [X, null]`,
no `properties` next to `additionalProperties`. Pydantic emits JSON Schema 2020-12, so
`structural()` rewrites it node by node. `spec.trainer` is a union discriminated by `algorithm`;
the CRD keeps the fields the algorithms share, and lists under `hyperparameters` every algorithm's
fields with the algorithms that take them, free-form: the operator (and its admission webhook)
validates them per algorithm.

Run `python -m kuberl_operator.crd > deploy/crds/kuberl.io_rljobs.yaml` (`make crds`).
"""

from __future__ import annotations

from typing import Any

import yaml

from kuberl_operator.constants import (
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from kuberl_operator.spec import RLJob

HEADER = "# Generated from kuberl_operator/spec/ by `make crds`; do not edit.\n"

# Keywords Kubernetes' JSONSchemaProps understands and that carry meaning for users; pydantic's
# title and default are dropped (the operator applies the models' defaults itself).
_KEPT = (
    "description",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Algorithm", "type": "string", "jsonPath": ".spec.trainer.algorithm"},
    {"name": "Env", "type": "string", "jsonPath": ".spec.trainer.env"},
    {"name": "Iteration", "type": "integer", "jsonPath": ".status.progress.iteration"},
    {"name": "Return", "type": "number", "jsonPath": ".status.progress.episodeReturnMean"},
    {"name": "Eval", "type": "number", "jsonPath": ".status.progress.evaluationReturnMean"},
    {"name": "Timesteps", "type": "integer", "jsonPath": ".status.progress.timesteps"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # Dollars so far: with -o wide only (priority 1), as kubectl shows a pod's node.
    {"name": "Cost", "type": "number", "jsonPath": ".status.cost.dollars", "priority": 1},
]


# `kubectl scale rljob/NAME --replicas=N`, KEDA and an HPA set the rollout workers' desired count;
# the status says how many exist and which pods they are.
SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.rolloutWorkers.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def rljob_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of RLJob, as a dict ready to dump to YAML."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": SCALE_SUBRESOURCE},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": rljob_schema()},
                }
            ],
        },
    }


def rljob_schema() -> dict[str, Any]:
    """The openAPIV3Schema of RLJob."""
    json_schema = RLJob.model_json_schema(by_alias=True, mode="validation")
    schema = structural(json_schema, json_schema.get("$defs", {}))
    # The API server owns these three; metadata may not be constrained beyond its type.
    schema["properties"] |= {
        "apiVersion": {"type": "string", "description": "kuberl.io/v1alpha1."},
        "kind": {"type": "string", "description": "RLJob."},
        "metadata": {"type": "object"},
    }
    schema["required"] = ["spec"]
    # PBT's inner trainer takes env, envConfig and stop from the outer spec when it leaves them
    # out (PBTConfig's validation fills them in): the API server must not require them there.
    inner = schema["properties"]["spec"]["properties"]["trainer"]["properties"]["trainer"]
    inner["required"] = [name for name in inner["required"] if name not in ("env", "stop")]
    return schema


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes structural schema equivalent to a node of pydantic's JSON schema."""
    if "$ref" in node:
        return _inlined(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        return _optional(node, defs)
    if "oneOf" in node:
        return _discriminated_union(node, defs)
    return _keywords(node) | _children(node, defs)


def _inlined(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` replaced by the definition it points to: Kubernetes resolves no references, a
    structural schema spells every node out."""
    # inline the definition; the field's own keys (its description) win
    target = defs[node["$ref"].removeprefix("#/$defs/")]
    return structural({**target, **_without(node, "$ref")}, defs)


def _optional(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An `anyOf` of one type and null (pydantic's `X | None`) as that type, nullable: Kubernetes
    allows no `anyOf` that sets a node's type, so the only union it can express is with null."""
    options = [option for option in node["anyOf"] if option.get("type") != "null"]
    if len(options) != 1:
        raise ValueError(f"a CRD cannot express this union: {node['anyOf']}")
    inner = structural({**options[0], **_without(node, "anyOf")}, defs)
    # The API server checks enum even on null and never matches it, so an enum stays
    # non-nullable: an explicit null is then pruned, which reads like the field left out.
    if len(options) == len(node["anyOf"]) or "enum" in inner:
        return inner
    return inner | {"nullable": True}


def _discriminated_union(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A `oneOf` discriminated union as one object schema: Kubernetes requires every node to have
    a single type and forbids `oneOf` from setting one, so the variants are merged."""
    variants = [structural(variant, defs) for variant in node["oneOf"]]
    return _merge_variants(variants, node["discriminator"]["propertyName"], node)


def _keywords(node: dict[str, Any]) -> dict[str, Any]:
    """A node's own keywords in the OpenAPI 3.0 dialect of Kubernetes' JSONSchemaProps: those it
    does not know are dropped (the API server rejects them), JSON Schema's `const` becomes a
    one-value enum and its numeric exclusive bounds become OpenAPI's boolean ones."""
    out: dict[str, Any] = {}
    if "type" in node:
        out["type"] = node["type"]
    for key in _KEPT:
        if key in node:
            out[key] = _description(node) if key == "description" else node[key]
    if "const" in node:
        out["enum"] = [node["const"]]
    for bound, keyword in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:  # JSON Schema's numeric form -> OpenAPI 3.0's boolean one
            out[keyword], out[bound] = node[bound], True
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = node["anyOf"]  # Kubernetes allows exactly this anyOf: integer or string
    return out


def _children(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A node's items, properties and additionalProperties, each made structural in turn:
    Kubernetes checks every node of the tree, not only the top one."""
    out: dict[str, Any] = {}
    if "items" in node:
        out["items"] = structural(node["items"], defs)
    if "properties" in node:
        out["properties"] = {k: structural(v, defs) for k, v in node["properties"].items()}
        if node.get("required"):
            out["required"] = node["required"]
    return out | _additional_properties(node, defs)


def _additional_properties(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """What an object accepts beyond its properties: a map's typed values, or unknown fields.
    Kubernetes forbids `additionalProperties` next to `properties` and prunes every field the
    schema does not name, so an object open to any field (a dict[str, Any], or a model that
    allows extra fields) is marked `x-kubernetes-preserve-unknown-fields` instead."""
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):  # a map with typed values
        return {"additionalProperties": structural(extra, defs)}
    if node.get("type") == "object" and (extra is True or "properties" not in node):
        return {"x-kubernetes-preserve-unknown-fields": True}  # free-form: dict[str, Any]
    return {}


def _merge_variants(
    variants: list[dict[str, Any]], discriminator: str, union: dict[str, Any]
) -> dict[str, Any]:
    """One object schema for a discriminated union: fields every variant types alike are kept,
    the discriminator becomes an enum, and fields whose type depends on it become free-form."""
    names = list(dict.fromkeys(name for variant in variants for name in variant["properties"]))
    choices = [
        value for variant in variants for value in variant["properties"][discriminator]["enum"]
    ]
    properties: dict[str, Any] = {}
    for name in [discriminator, *(name for name in names if name != discriminator)]:
        # A field of some variants only (PBT's inner trainer) is kept as those variants type it.
        having = [v for v in variants if name in v["properties"]]
        schemas = [v["properties"][name] for v in having]
        if name == discriminator:
            properties[name] = schemas[0] | {"enum": choices}
        elif all(schema == schemas[0] for schema in schemas):
            properties[name] = schemas[0]
        elif all(schema["type"] == "object" for schema in schemas):
            tags = [v["properties"][discriminator]["enum"] for v in having]
            properties[name] = _union_of_fields(schemas, tags, discriminator, choices)
        else:
            raise ValueError(f"{name} differs between the variants and is not an object")
    required = [
        name for name in names if all(name in variant.get("required", []) for variant in variants)
    ]
    described = {"description": _description(union)} if "description" in union else {}
    return {"type": "object", **described, "properties": properties, "required": required}


def _union_of_fields(
    schemas: list[dict[str, Any]], tags: list[list[str]], discriminator: str, choices: list[str]
) -> dict[str, Any]:
    """An object whose fields depend on the discriminator (`hyperparameters`, by algorithm) as one
    schema: every variant's fields, each described with the values that take it, so that
    `kubectl explain` lists them. A field's type and bounds may differ between variants, and the
    union cannot say which apply, so each field takes any value and unknown fields are kept:
    kuberl (`kuberl validate`, the operator's admission webhook) validates them for the chosen
    value."""
    takers: dict[str, dict[str, list[str]]] = {}  # field -> description -> the values taking it
    for schema, values in zip(schemas, tags, strict=True):
        for field, node in schema.get("properties", {}).items():
            described = takers.setdefault(field, {})
            described.setdefault(node.get("description", ""), []).extend(values)
    fields = {
        field: {
            "description": " ".join(
                f"{', '.join(values)}: {text}" if text else ", ".join(values)
                for text, values in described.items()
            ),
            "x-kubernetes-preserve-unknown-fields": True,
        }
        for field, described in sorted(takers.items())
    }
    return {
        "type": "object",
        "description": f"Fields depend on {discriminator} ({', '.join(choices)}): each field "
        f"below says which values of {discriminator} take it (kuberl_trainer's hyperparameters "
        "classes and the docs' Algorithms and optimizers page document them); `kuberl validate` "
        "and the operator's admission webhook refuse a field the chosen one does not take.",
        "properties": fields,
        "x-kubernetes-preserve-unknown-fields": True,
    }


def _description(node: dict[str, Any]) -> str:
    return " ".join(node["description"].split())  # docstrings wrap; kubectl explain re-wraps


def _without(node: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != key}


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-schemas out in full: `&id001` anchors would puzzle a reader."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd_yaml() -> str:
    """The CRD as the YAML text committed in deploy/crds/."""
    return HEADER + yaml.dump(rljob_crd(), Dumper=_NoAliasDumper, sort_keys=False, width=100)


def main() -> None:
    print(crd_yaml(), end="")


if __name__ == "__main__":
    main()
