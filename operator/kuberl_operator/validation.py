"""Turning a manifest into an `RLJob`, or into problems that each name a field and say what to do.

Pydantic reports errors in its own terms (a location tuple with union tags, "Input should be ...").
Users read manifests, so every problem here is a dotted path in the manifest's own field names
(`spec.learner.tolerations[0].effect`) and a message with the fix, including near-miss suggestions
for misspelt field names and values. How an error's location leads through the models to that
path: manifest_fields.py.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import ValidationError
from pydantic.alias_generators import to_camel, to_snake
from pydantic.fields import FieldInfo

from kuberl_contract.config import ALGORITHMS, PBT, TRAINER_CONFIGS, PBTConfig
from kuberl_contract.hyperparameters import PBTHyperparameters
from kuberl_contract.hyperparameters.known_names import known_name_hint
from kuberl_operator.bounded import (
    MAX_MANIFEST_BYTES,
    InvalidManifest,
    Problem,
    document_problems,
    format_path,
    load_yaml_documents,
    too_large,
)
from kuberl_operator.constants import API_VERSION, KIND
from kuberl_operator.manifest_fields import (
    allowed_values,
    field_by_any_name,
    field_names,
    follow_location,
    tagged_variants,
    unwrap,
    variant_field,
)
from kuberl_operator.spec import PATTERN_HINTS, RLJob

# --- Entry points -------------------------------------------------------------------------------


def load_rljob(path: str | Path) -> RLJob:
    """Reads and validates the RLJob manifest in a YAML file."""
    try:
        text = read_manifest_file(Path(path))
    except FileNotFoundError:
        raise InvalidManifest([Problem("", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidManifest([Problem("", f"cannot read the file: {exc}")]) from None
    return parse_rljob_text(text)


def parse_rljob_text(text: str) -> RLJob:
    """Validates the RLJob manifest in YAML (or JSON) text holding exactly one document."""
    return validate_rljob(parse_yaml_document(text))


def read_manifest_file(path: Path) -> str:
    """The text of a manifest file, read no further than MAX_MANIFEST_BYTES (a device or a huge
    file is refused, not read whole). InvalidManifest when larger; OSError and UnicodeDecodeError
    as reading raises them."""
    with path.open("rb") as file:
        data = file.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise too_large()
    return data.decode("utf-8")


def parse_yaml_document(text: str) -> Any:
    """The one YAML document in the text, or InvalidManifest saying where the YAML breaks or which
    of the bounds of `kuberl_operator.bounded` it passes."""
    documents = load_yaml_documents(text)
    if not documents:
        raise InvalidManifest([Problem("", "empty: expected one RLJob manifest")])
    if len(documents) > 1:
        raise InvalidManifest(
            [Problem("", f"{len(documents)} YAML documents: put exactly one RLJob in the file")]
        )
    return documents[0]


def validate_rljob(document: Any) -> RLJob:
    """The RLJob the parsed manifest describes, or InvalidManifest listing every problem."""
    if not isinstance(document, dict):
        raise InvalidManifest(
            [
                Problem(
                    "",
                    f"the document is {_yaml_type(document)}, not a mapping: an RLJob manifest "
                    f"starts with apiVersion: {API_VERSION} and kind: {KIND}",
                )
            ]
        )
    # A manifest of another kind would fail on every field; say only what it is.
    if problems := type_meta_problems(document):
        raise InvalidManifest(problems)
    # Values no Kubernetes object can hold, before the models see (and might coerce) them.
    if problems := document_problems(document):
        raise InvalidManifest(problems)
    try:
        # by_name=False: the manifest must use camelCase names, as the API server would require.
        return RLJob.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems = [_problem(error) for error in exc.errors()]
        raise InvalidManifest(list(dict.fromkeys(problems))) from None


def type_meta_problems(document: dict[str, Any]) -> list[Problem]:
    """Problems with kind and apiVersion: none for an RLJob of the served version."""
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if kind is None:
        return [Problem("kind", f"missing: set kind: {KIND}")]
    if kind != KIND:
        return [
            Problem(
                "kind",
                f"this is a {kind}, not an {KIND}: kuberl reads manifests with kind: {KIND} and "
                f"apiVersion: {API_VERSION}",
            )
        ]
    if api_version is None:
        return [Problem("apiVersion", f"missing: set apiVersion: {API_VERSION}")]
    if api_version != API_VERSION:
        return [Problem("apiVersion", f"{api_version!r} is not served; use {API_VERSION}")]
    return []


# --- From a pydantic error to a problem ---------------------------------------------------------


def _problem(error: dict[str, Any]) -> Problem:
    parts, node, field = follow_location(error["loc"])
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")

    if kind == "extra_forbidden":
        _, parent, _ = follow_location(error["loc"][:-1])
        key, accepted = str(parts[-1]), field_names(parent)
        return Problem(
            format_path(parts),
            _unknown_field(key, accepted, _elsewhere(key, parts[:-1], unwrap(parent))),
        )
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        discriminator = ctx["discriminator"].strip("'\"")
        path = format_path([*parts, discriminator])
        tags = list(tagged_variants(unwrap(node)))
        if kind == "union_tag_not_found":
            return Problem(path, f"missing: set it to one of {', '.join(tags)}")
        return Problem(path, _unknown_value(ctx["tag"], tags))
    if kind == "value_error":
        return _relocated(parts, node, str(ctx["error"]))
    if kind == "missing":
        return Problem(format_path(parts), _missing(field))
    return Problem(format_path(parts), _message(kind, ctx, value, node, error["msg"]))


def _relocated(parts: list[str | int], node: Any, message: str) -> Problem:
    """Model validators say which field they mean ("optimizer: ...", "spot.provider: ..."); put
    the problem at that field."""
    segment = r"[A-Za-z_]\w*(?:\[\d+\])?"
    match = re.fullmatch(rf"({segment}(?:\.{segment})*): (.+)", message, flags=re.DOTALL)
    if match:
        inner_parts: list[str | int] = []
        for name, index in re.findall(r"([A-Za-z_]\w*)(?:\[(\d+)\])?", match.group(1)):
            node = unwrap(node)
            if get_origin(node) is dict:  # a key of a mapping (hyperparameters.mutations.<name>)
                inner_parts.append(name)
                node = get_args(node)[1]
            elif found := field_by_any_name(node, name) or variant_field(node, name):
                inner_parts.append(found[0])
                node = found[1].annotation
            else:
                break
            if index:  # an item of a list (hyperparameters.trials[3])
                inner_parts.append(int(index))
                node = get_args(unwrap(node))[0] if get_args(unwrap(node)) else Any
        else:
            return Problem(format_path([*parts, *inner_parts]), match.group(2))
    return Problem(format_path(parts), message)


def _missing(field: FieldInfo | None) -> str:
    description = (field.description or "") if field else ""
    first_sentence = " ".join(description.split()).split(". ")[0].rstrip(".")
    return f"missing required field ({first_sentence})" if first_sentence else "missing"


_COMPARISONS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}
_TYPE_WORDS = {
    "dict_type": "a mapping (key: value lines)",
    "model_type": "a mapping (key: value lines)",
    "model_attributes_type": "a mapping (key: value lines)",
    "list_type": "a list (lines starting with '- ')",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "datetime_type": "a date-time like 2025-01-31T12:00:00Z",
    "datetime_parsing": "a date-time like 2025-01-31T12:00:00Z",
    "datetime_from_date_parsing": "a date-time like 2025-01-31T12:00:00Z",
}


def _message(kind: str, ctx: dict[str, Any], value: Any, node: Any, fallback: str) -> str:
    if kind in _COMPARISONS:
        symbol, key = _COMPARISONS[kind]
        return f"must be {symbol} {ctx[key]}, got {value!r}"
    if kind == "finite_number":
        return f"{value!r} is not a finite number: Kubernetes (JSON) stores only finite ones"
    if kind in ("literal_error", "enum"):
        return _unknown_value(value, allowed_values(unwrap(node)))
    if kind == "string_pattern_mismatch":
        hint = PATTERN_HINTS.get(ctx["pattern"], f"a string matching {ctx['pattern']}")
        return f"{value!r} is not {hint}"
    if kind in _TYPE_WORDS:
        message = f"must be {_TYPE_WORDS[kind]}, got {_yaml_type(value)}"
        if kind == "string_type" and isinstance(value, bool | int | float):
            message += f"; quote it: '{_yaml_scalar(value)}'"
        return message
    return fallback[0].lower() + fallback[1:]


def _unknown_field(key: str, accepted: list[str], elsewhere: str | None = None) -> str:
    """Did-you-mean for an unknown field: the same name in the section's case, then where the
    name belongs when it is another library's or another section's (`elsewhere`), and only then
    the closest spelling, which would mislead there (RLlib's train_batch_size is not PPO's
    minibatch_size)."""
    for candidate, style in ((to_camel(key), "camelCase"), (to_snake(key), "snake_case")):
        if candidate != key and candidate in accepted:
            return f"unknown field; did you mean {candidate!r}? (these fields are {style})"
    if elsewhere:
        return elsewhere
    close = difflib.get_close_matches(key, accepted, n=1)
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    return f"unknown field; allowed here: {', '.join(accepted)}"


_HYPERPARAMETERS = "hyperparameters"


def _elsewhere(key: str, section: list[str | int], model: Any) -> str | None:
    """Where an unknown field of a trainer or of its hyperparameters belongs: a Stable-Baselines3
    or RLlib name (see kuberl_contract.hyperparameters.known_names), a hyperparameter written in
    the trainer itself, or a trial's hyperparameter written in PBT's. None for anything else."""
    name = to_snake(key)
    if section and section[-1] == _HYPERPARAMETERS and model in _ALGORITHM_OF_HYPERPARAMETERS:
        algorithm = _ALGORITHM_OF_HYPERPARAMETERS[model]
        trainer_path = format_path(section[:-1])
        if hint := known_name_hint(name, algorithm, trainer_path):
            return hint
        if algorithm == PBT and name in _TRIAL_HYPERPARAMETERS:
            return (
                f"unknown field; {name} is a trial's hyperparameter: PBT's are the population's, "
                f"and the trials' own go in {trainer_path}.trainer.hyperparameters"
            )
    elif model in _ALGORITHM_OF_TRAINER:
        algorithm, trainer_path = _ALGORITHM_OF_TRAINER[model], format_path(section)
        hyperparameters = f"{trainer_path}.{_HYPERPARAMETERS}"
        if name in model.model_fields[_HYPERPARAMETERS].annotation.model_fields:
            return f"unknown field; {name} is a hyperparameter: set {hyperparameters}.{name}"
        return known_name_hint(name, algorithm, trainer_path, hyperparameters)
    return None


_ALGORITHM_OF_HYPERPARAMETERS: dict[Any, str] = {
    row.hyperparameters: name for name, row in ALGORITHMS.items()
} | {PBTHyperparameters: PBT}
_ALGORITHM_OF_TRAINER: dict[Any, str] = {
    config: name for name, config in TRAINER_CONFIGS.items()
} | {PBTConfig: PBT}
_TRIAL_HYPERPARAMETERS = {
    name for row in ALGORITHMS.values() for name in row.hyperparameters.model_fields
}


def _unknown_value(value: Any, allowed: list[str]) -> str:
    listing = ", ".join(allowed)
    by_upper = {name.upper(): name for name in allowed}
    close = difflib.get_close_matches(str(value).upper(), list(by_upper), n=1)
    hint = f"; did you mean {by_upper[close[0]]!r}?" if close else ""
    return f"{value!r} is not one of {listing}{hint}"


_YAML_TYPES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


def _yaml_type(value: Any) -> str:
    """What the user wrote, in YAML's words: `an integer (3)`, `a mapping`."""
    if value is None:
        return "null (an empty value)"
    word = _YAML_TYPES.get(type(value), type(value).__name__)
    if isinstance(value, bool | int | float | str):
        return f"{word} ({_yaml_scalar(value)})"
    return word


def _yaml_scalar(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
