"""The committed CRD is the one the models generate, Kubernetes would accept it, and the examples
pass it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kuberl_contract.config import ALGORITHMS, PBT
from kuberl_operator.constants import CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES
from kuberl_operator.crd import crd_yaml, rljob_crd
from kuberl_operator.validation import load_rljob
from testkit import as_strict_json_schema

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_CRD = ROOT / "deploy" / "crds" / "kuberl.io_rljobs.yaml"
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    (version,) = rljob_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_committed_crd_is_generated_from_the_models():
    assert COMMITTED_CRD.read_text() == crd_yaml(), (
        f"{COMMITTED_CRD.relative_to(ROOT)} is out of date with kuberl_operator/spec/: "
        "run `make crds` and commit the result"
    )


def test_crd_names_and_version():
    crd = rljob_crd()
    (version,) = crd["spec"]["versions"]

    assert crd["metadata"]["name"] == CRD_NAME == f"{PLURAL}.{GROUP}"
    assert crd["spec"]["names"]["kind"] == KIND
    assert crd["spec"]["names"]["shortNames"] == list(SHORT_NAMES) == ["rlj"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"]["status"] == {}


def test_the_scale_subresource_points_at_the_fields_it_names():
    """kubectl scale, an HPA and KEDA read and write these paths: the API server requires them to
    be an integer, an integer and a string of the schema (and the spec one under .spec)."""
    (version,) = rljob_crd()["spec"]["versions"]
    scale = version["subresources"]["scale"]
    schema = version["schema"]["openAPIV3Schema"]

    def at(json_path: str) -> dict:
        node = schema
        for name in json_path.removeprefix(".").split("."):
            node = node["properties"][name]
        return node

    assert scale["specReplicasPath"] == ".spec.rolloutWorkers.replicas"
    assert at(scale["specReplicasPath"])["type"] == "integer"
    assert at(scale["statusReplicasPath"])["type"] == "integer"
    assert at(scale["labelSelectorPath"])["type"] == "string"


def test_printer_columns():
    (version,) = rljob_crd()["spec"]["versions"]
    columns = {column["name"]: column for column in version["additionalPrinterColumns"]}

    assert list(columns) == [
        "Phase",
        "Algorithm",
        "Env",
        "Iteration",
        "Return",
        "Eval",
        "Timesteps",
        "Restarts",
        "Age",
        "Cost",
    ]
    assert columns["Cost"]["priority"] == 1  # -o wide only
    assert columns["Return"] == {
        "name": "Return",
        "type": "number",
        "jsonPath": ".status.progress.episodeReturnMean",
    }
    assert columns["Age"]["type"] == "date"
    assert columns["Restarts"]["jsonPath"] == ".status.restarts"


def test_kubectl_get_shows_the_training_and_the_evaluation_return():
    """The columns as kubectl renders them for a job: each simple JSONPath followed through the
    object (absent fields print as blank, as kubectl prints <none>)."""
    (version,) = rljob_crd()["spec"]["versions"]
    job = {
        "metadata": {"name": "dqn", "creationTimestamp": "2026-11-27T10:00:00Z"},
        "spec": {"trainer": {"algorithm": "DQN", "env": "CartPole-v1"}},
        "status": {
            "phase": "Succeeded",
            "progress": {
                "iteration": 120,
                "timesteps": 60_000,
                "episodeReturnMean": 33.8,
                "evaluationReturnMean": 500.0,
            },
        },
    }

    def follow(path: str) -> Any:
        value: Any = job
        for key in path.lstrip(".").split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return value

    shown = {c["name"]: follow(c["jsonPath"]) for c in version["additionalPrinterColumns"]}
    assert (shown["Return"], shown["Eval"]) == (33.8, 500.0)
    assert shown["Restarts"] is None


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path, the way Kubernetes' structural check visits them."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


def test_schema_is_structural(schema):
    for path, node in walk(schema):
        assert "$ref" not in node and "$defs" not in node, path
        assert "title" not in node and "default" not in node and "oneOf" not in node, path
        assert "const" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-int-or-string"):
            # The one anyOf Kubernetes allows, on one of the two kinds of node it allows untyped.
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
        elif "type" not in node:
            # The other: a node that keeps any value (a hyperparameter of some algorithms).
            assert node == {
                "description": node["description"],
                "x-kubernetes-preserve-unknown-fields": True,
            }, path
        else:
            assert "anyOf" not in node, path
            assert node.get("type") in (
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            ), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{path}: OpenAPI 3.0 bounds are booleans"


def test_schema_keeps_the_models_constraints_and_docs(schema):
    spec = schema["properties"]["spec"]
    trainer = spec["properties"]["trainer"]
    workers = spec["properties"]["rolloutWorkers"]["properties"]

    assert trainer["properties"]["algorithm"] == {
        "type": "string",
        "description": "The RL algorithm.",
        "enum": [*ALGORITHMS, PBT],  # the table's order: how the CRD documents them
    }
    assert set(trainer["required"]) == {"algorithm", "env", "stop"}
    assert workers["replicas"]["minimum"] == 0 and workers["replicas"]["maximum"] == 10_000
    assert workers["spot"]["properties"]["provider"]["enum"] == [
        "gke",
        "eks",
        "karpenter",
        "aks",
        "custom",
    ]
    assert spec["properties"]["learner"]["properties"]["gpus"]["description"] == (
        "GPUs for the learner; 0 trains on CPU. The learner trains on one of them, except with "
        "the LocalMultiGPU optimizer, which splits every SGD minibatch across all of them."
    )
    assert spec["properties"]["image"]["nullable"] is True
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["required"] == ["spec"]
    assert all("\n" not in node.get("description", "") for _, node in walk(schema))


def test_free_form_objects(schema):
    trainer = schema["properties"]["spec"]["properties"]["trainer"]["properties"]
    labels = schema["properties"]["spec"]["properties"]["learner"]["properties"]["nodeSelector"]

    for name in ("hyperparameters", "envConfig"):
        assert trainer[name]["type"] == "object"
        assert trainer[name]["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in trainer["envConfig"]
    assert labels["additionalProperties"] == {"type": "string"}


def test_hyperparameters_list_every_algorithms_fields_for_kubectl_explain(schema):
    """The union of the algorithms' fields, each saying which algorithms take it; any value passes
    the API server (a field's bounds differ between algorithms): kuberl refuses what is wrong."""
    trainer = schema["properties"]["spec"]["properties"]["trainer"]["properties"]
    hyperparameters = trainer["hyperparameters"]
    fields = hyperparameters["properties"]

    assert "Fields depend on algorithm" in hyperparameters["description"]
    assert "admission webhook" in hyperparameters["description"]
    documented = {name for row in ALGORITHMS.values() for name in row.hyperparameters.model_fields}
    assert documented <= set(fields)
    learning_rate = fields["learning_rate"]["description"]
    assert learning_rate.startswith("PG, A2C") and "PPO" in learning_rate
    assert fields["double_q"]["description"].startswith("DQN, APEX: ")
    assert all(field["x-kubernetes-preserve-unknown-fields"] for field in fields.values())
    # PBT's inner trainer lists its algorithms' fields the same way.
    inner = trainer["trainer"]["properties"]["hyperparameters"]["properties"]
    assert "learning_rate" in inner


def test_conditions_are_a_map_list_keyed_by_type(schema):
    conditions = schema["properties"]["status"]["properties"]["conditions"]

    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_examples_pass_the_crd_schema(example, schema):
    document = yaml.safe_load(example.read_text())

    jsonschema.Draft4Validator(as_strict_json_schema(schema)).validate(document)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_examples_pass_the_models(example):
    assert load_rljob(example).name == example.stem


def test_strict_schema_catches_what_the_api_server_would(schema):
    document = yaml.safe_load(EXAMPLES[0].read_text())
    validator = jsonschema.Draft4Validator(as_strict_json_schema(schema))

    bad_enum = copy.deepcopy(document)
    bad_enum["spec"]["trainer"]["algorithm"] = "PP0"
    bad_quantity = copy.deepcopy(document)
    bad_quantity["spec"]["learner"] = {"memory": "8GB"}
    unknown_field = copy.deepcopy(document)
    unknown_field["spec"]["learnr"] = {}

    for broken in (bad_enum, bad_quantity, unknown_field):
        assert not validator.is_valid(broken)
    assert len(EXAMPLES) >= 3
