"""`kuberl explain rljob.PATH` answers for every field of RLJob from the CRD the models generate,
and docs/reference/rljob.md is the reference those fields render."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from kuberl_cli.explain import HYPERPARAMETERS
from kuberl_cli.explain_paths import explain_lines, field_at
from kuberl_cli.field_reference import (
    HYPERPARAMETERS_POINTER,
    SchemaField,
    documented_schema,
    markdown_section,
    reference_markdown,
    rljob_fields,
)
from kuberl_contract.config import CheckpointConfig
from kuberl_contract.hyperparameters.fields import yaml_value
from kuberl_operator.crd import crd_yaml
from kuberl_operator.spec.job import ObjectMeta
from kuberl_operator.spec.learner import Learner
from kuberl_operator.spec.restart import RestartPolicy
from testkit import ROOT, run_kuberl

COMMITTED_REFERENCE = ROOT / "docs" / "reference" / "rljob.md"
FIELDS = rljob_fields().walk()[1:]


def _crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema as `python -m kuberl_operator.crd` writes it (test_crd holds the
    committed CRD to it)."""
    (version,) = yaml.safe_load(crd_yaml())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _crd_paths(node: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict]:
    """Every field of a CRD schema by its path, a list's items reached through the list."""
    while node.get("type") == "array":
        node = node["items"]
    found: dict[tuple[str, ...], dict] = {}
    for name, child in node.get("properties", {}).items():
        found[(*path, name)] = child
        found |= _crd_paths(child, (*path, name))
    return found


def test_the_committed_reference_is_generated_from_the_models():
    assert COMMITTED_REFERENCE.read_text() == reference_markdown(), (
        f"{COMMITTED_REFERENCE.relative_to(ROOT)} is out of date with the RLJob models: run "
        "`python -m kuberl_cli.field_reference > docs/reference/rljob.md` and commit the result"
    )


def test_explain_reads_the_crd_the_operator_emits_and_metadata_from_the_same_models():
    crd, read = _crd_schema(), documented_schema()

    assert {k: v for k, v in read["properties"].items() if k != "metadata"} == {
        k: v for k, v in crd["properties"].items() if k != "metadata"
    }
    assert crd["properties"]["metadata"] == {"type": "object"}
    aliases = {info.alias or name for name, info in ObjectMeta.model_fields.items()}
    assert set(read["properties"]["metadata"]["properties"]) == aliases


def test_every_field_of_the_crd_is_a_field_explain_knows_with_its_description_and_enum():
    fields = {field.path: field for field in FIELDS}
    crd = _crd_paths(_crd_schema())

    # metadata's fields are the models' notes: the CRD leaves metadata to the API server
    assert {path for path in fields if path[:1] != ("metadata",) or len(path) == 1} == set(crd)
    for path, node in crd.items():
        if path == ("metadata",):
            continue  # its description too is the models'
        assert fields[path].description == node.get("description", ""), path
        assert fields[path].enum == tuple(yaml_value(value) for value in node.get("enum", ()))


@pytest.mark.parametrize("field", FIELDS, ids=lambda field: field.dotted)
def test_every_field_is_explained_by_its_path(field: SchemaField):
    lines = explain_lines(field_at(f"rljob.{field.dotted}"))

    assert f"FIELD: {field.name} <{field.type}>" in lines[4]
    assert " ".join(field.description.split()) in " ".join(" ".join(lines).split())
    for child in field.fields:
        assert any(line.startswith(f"  {child.name}\t<{child.type}>") for line in lines)


@pytest.mark.parametrize(
    ("model", "section"),
    [
        (Learner, "spec.learner"),
        (RestartPolicy, "spec.restartPolicy"),
        (CheckpointConfig, "spec.trainer.checkpoint"),
    ],
)
def test_defaults_and_limits_are_the_models(model, section):
    for name, info in model.model_fields.items():
        field = field_at(f"rljob.{section}.{info.alias or name}")
        if info.default_factory is None and not info.is_required():
            assert field.default == yaml_value(info.default), field.dotted
    assert field_at("rljob.spec.trainer.checkpoint.keep").limits == (">= 1",)
    assert field_at("rljob.spec.trainer.algorithm").enum == tuple(HYPERPARAMETERS)


def test_kuberl_explain_prints_a_field_as_kubectl_explain_does():
    for resource in ("rljobs", "RLJob"):  # and rljob: the tests above
        result = run_kuberl("explain", f"{resource}.spec.trainer.checkpoint")

        assert result.returncode == 0, result.stderr
        head, fields = result.stdout.split("\nFIELDS:\n")
        assert head.startswith("GROUP:      kuberl.io\nKIND:       RLJob\nVERSION:    v1alpha1\n")
        assert "\nFIELD: checkpoint <Object>\n" in head
        assert "  keep\t<integer>\n    Number of newest checkpoints kept" in fields

    keep = run_kuberl("explain", "rljob.spec.trainer.checkpoint.keep").stdout
    assert "FIELD: keep <integer>\n\nDEFAULT: 3\nLIMITS: >= 1\n\nDESCRIPTION:\n" in keep


def test_recursive_lists_the_whole_subtree_indented_by_depth():
    result = run_kuberl("explain", "rljob.spec.rolloutWorkers", "--recursive")

    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("FIELDS:\n")[1].splitlines()
    expected = [
        f"{'  ' * (len(field.path) - 2)}{field.name}\t<{field.type}>"
        for field in field_at("rljob.spec.rolloutWorkers").walk()[1:]
    ]
    assert [line.removesuffix(" -required-") for line in listed] == expected
    assert "    provider\t<string>" in listed


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "rljob.spec.trainer.stp",
            "unknown field 'stp' in rljob.spec.trainer; did you mean stop? (fields: algorithm, ",
        ),
        (
            "RLJob.spec.trainer.envconfig",
            "unknown field 'envconfig' in RLJob.spec.trainer; did you mean envConfig? (fields: ",
        ),
        (
            "rljob.spec.trainer.seed.low",
            "unknown field 'low': rljob.spec.trainer.seed is <integer> and has no fields",
        ),
        ("rljobz.spec", "unknown resource 'rljobz'; did you mean rljob? ("),
    ],
)
def test_an_unknown_segment_is_named_with_the_closest_fields_and_exit_status_2(path, message):
    result = run_kuberl("explain", path)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message), result.stderr


def test_hyperparameters_point_at_kuberl_explain_algorithm():
    result = run_kuberl("explain", "rljob.spec.trainer.hyperparameters")

    assert result.returncode == 0, result.stderr
    assert " ".join(HYPERPARAMETERS_POINTER.split()) in " ".join(result.stdout.split())
    assert "  learning_rate\t<any>\n    PG, A2C, " in result.stdout


def test_recursive_needs_a_path_not_an_algorithm():
    result = run_kuberl("explain", "PPO", "--recursive")

    assert result.returncode == 2
    assert result.stderr.startswith("--recursive lists the fields under a path of RLJob")


def test_every_link_of_the_reference_has_its_anchor_and_every_field_its_section():
    text = reference_markdown()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))

    assert anchors == {field.dotted for field in FIELDS}
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= anchors


def test_markdown_prints_the_reference_sections_of_the_path_and_of_the_fields_under_it():
    result = run_kuberl("explain", "rljob.spec.trainer.stop", "--markdown")

    stop = field_at("rljob.spec.trainer.stop")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n\n".join(map(markdown_section, stop.walk())) + "\n"
    assert result.stdout in reference_markdown()
