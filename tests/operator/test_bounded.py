"""Manifests nobody vouches for are read within bounds: size, nesting, YAML alias expansion, and
numbers Kubernetes can carry; each refusal is one problem naming the place, never a crash."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from kuberl_operator.bounded import (
    INT64_MAX,
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    MAX_NODES,
    document_problems,
    load_json,
    load_yaml_documents,
)
from kuberl_operator.validation import (
    InvalidManifest,
    parse_rljob_text,
    read_manifest_file,
    validate_rljob,
)
from testkit import ROOT, edited

EXAMPLE = (ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text()
BASE = yaml.safe_load(EXAMPLE)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic "billion laughs": each level lists `width` aliases of the one below."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def with_env_config(text: str) -> str:
    """The example with `text` (mapping lines) as its envConfig."""
    indented = "".join(f"      {line}\n" for line in text.splitlines())
    return EXAMPLE.replace("  trainer:\n", "  trainer:\n    envConfig:\n" + indented, 1)


def problems(callable_, *args) -> list[str]:
    with pytest.raises(InvalidManifest) as caught:
        callable_(*args)
    return [str(problem) for problem in caught.value.problems]


def test_an_alias_bomb_is_refused_at_once_without_expanding_it():
    bomb = with_env_config(alias_bomb())
    assert len(bomb) < 2048

    started = time.perf_counter()
    found = problems(parse_rljob_text, bomb)

    assert time.perf_counter() - started < 5
    assert len(found) == 1
    assert f"expands to over {MAX_NODES} values" in found[0]
    assert found[0].startswith("line ")


def test_anchors_and_aliases_within_the_budget_still_work():
    text = with_env_config("base: &base {size: 3}\ncopy: *base")

    job = parse_rljob_text(text)

    assert job.spec.trainer.env_config == {"base": {"size": 3}, "copy": {"size": 3}}


def test_an_alias_inside_its_own_anchor_is_refused():
    found = problems(load_yaml_documents, "loop: &loop {again: *loop}\n")

    assert len(found) == 1 and found[0].endswith("a YAML alias refers to itself")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_yaml_nested_too_deep_is_refused_without_a_recursion_error(depth):
    text = "x: " + "[" * depth + "]" * depth + "\n"

    found = problems(load_yaml_documents, text)

    assert found == [f"line 1, column {MAX_DEPTH + 3}: nested more than {MAX_DEPTH} levels deep"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_json_nested_too_deep_is_refused_without_a_recursion_error(depth):
    document = edited(BASE, **{"spec.trainer.envConfig": {"x": 0}})
    text = json.dumps(document).replace('{"x": 0}', '{"x": ' + "[" * depth + "]" * depth + "}")

    found = problems(lambda: validate_rljob(load_json(text)))

    assert len(found) == 1 and f"nested more than {MAX_DEPTH} levels deep" in found[0]


def test_nesting_up_to_the_bound_is_accepted():
    nested = "[" * (MAX_DEPTH - 5) + "]" * (MAX_DEPTH - 5)
    text = with_env_config(f"x: {nested}")

    assert parse_rljob_text(text).spec.trainer.env_config["x"] == json.loads(nested)


def test_json_has_no_nan_or_infinity():
    for constant in ("NaN", "Infinity", "-Infinity"):
        found = problems(load_json, '{"a": ' + constant + "}")
        assert found == [f"not valid JSON: {constant} is not a JSON number"]


@pytest.mark.parametrize("loader", [load_json, load_yaml_documents])
def test_integers_of_thousands_of_digits_are_refused_not_crashed_on(loader):
    found = problems(loader, '{"a": ' + "9" * 5000 + "}")

    assert len(found) == 1 and "not valid" in found[0]


@pytest.mark.parametrize("loader", [load_json, load_yaml_documents])
def test_text_over_the_size_bound_is_refused(loader):
    found = problems(loader, " " * (MAX_MANIFEST_BYTES + 1))

    assert found == [f"larger than {MAX_MANIFEST_BYTES} bytes, the most a manifest may hold"]


def test_a_manifest_file_is_read_no_further_than_the_bound(tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (3 * MAX_MANIFEST_BYTES))

    assert "larger than" in problems(read_manifest_file, huge)[0]
    # A device never ends: read to the bound and refused all the same.
    assert "larger than" in problems(read_manifest_file, Path("/dev/zero"))[0]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"spec.trainer.stop.episodeReturnMean": float("inf")},
            "spec.trainer.stop.episodeReturnMean: inf is not a finite number",
        ),
        (
            {"spec.trainer.hyperparameters.learning_rate": float("-inf")},
            "spec.trainer.hyperparameters.learning_rate: -inf is not a finite number",
        ),
        (
            {"spec.trainer.envConfig": {"scale": float("nan")}},
            "spec.trainer.envConfig.scale: nan is not a finite number",
        ),
        (
            {"spec.trainer.stop.timesteps": INT64_MAX + 1},
            f"spec.trainer.stop.timesteps: {INT64_MAX + 1} does not fit in the 64-bit integers",
        ),
        (
            {"spec.trainer.envConfig": {"sizes": [1, -(2**64)]}},
            f"spec.trainer.envConfig.sizes[1]: {-(2**64)} does not fit",
        ),
        (
            {"spec.trainer.envConfig": {7: "seven"}},
            "spec.trainer.envConfig['7']: a key must be a string, got int: quote it",
        ),
    ],
    ids=["inf-stop", "inf-hyperparameter", "nan-env-config", "int64-stop", "int64-list", "key"],
)
def test_values_kubernetes_cannot_store_are_refused_naming_the_field(changes, expected):
    found = problems(validate_rljob, edited(BASE, **changes))

    assert len(found) == 1
    assert found[0].startswith(expected)


def test_yaml_spellings_of_infinity_and_overflowing_floats_are_refused():
    for spelling in (".inf", "-.Inf", ".nan", "1e999"):
        text = EXAMPLE.replace("episodeReturnMean: 475", f"episodeReturnMean: {spelling}")
        found = problems(parse_rljob_text, text)
        assert len(found) == 1 and "is not a finite number" in found[0], spelling


def test_every_problem_of_the_walk_is_reported_once_in_order():
    document = {"b": float("nan"), "a": [float("inf"), 2**70]}

    assert [problem.path for problem in document_problems(document)] == ["a[0]", "a[1]", "b"]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("spec.trainer.seed", 2**32, "spec.trainer.seed: must be <= 4294967295"),
        ("spec.trainer.seed", 2**32 - 1, None),
    ],
)
def test_the_seed_is_one_numpy_and_torch_take(field, value, expected):
    document = edited(BASE, **{field: value})
    if expected is None:
        assert validate_rljob(document).spec.trainer.seed == value
    else:
        assert problems(validate_rljob, document)[0].startswith(expected)


def test_a_replay_buffer_larger_than_any_machine_is_refused_before_training():
    document = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-dqn.yaml").read_text())
    document = edited(document, **{"spec.trainer.hyperparameters.buffer_size": 10**12})

    found = problems(validate_rljob, document)

    assert found[0].startswith("spec.trainer.hyperparameters.buffer_size: must be <= 100000000")
