"""Hostile manifests through the CLI, as an attacker would hand them to a user: bombs end in one
problem line under a memory cap and a time limit, values Kubernetes cannot store are refused with
the field named, and nothing is imported for a document that is not an RLJob (or with --no-env)."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
import yaml

from kuberl_contract.final_record import EXIT_INVALID_JOB, Outcome, read_final_record
from testkit import ROOT, run_kuberl

EXAMPLE = (ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text()
MEMORY_CAP = 1536 * 1024 * 1024
"""Address space for one CLI process: room for Python, pydantic and numpy, none for a bomb."""


def capped(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kuberl ARGS` with its address space capped and a time limit."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    return run_kuberl(*args, env=env, timeout=60, preexec_fn=cap_memory)


def with_env_config(text: str) -> str:
    indented = "".join(f"      {line}\n" for line in text.splitlines())
    return EXAMPLE.replace("  trainer:\n", "  trainer:\n    envConfig:\n" + indented, 1)


def alias_bomb() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return with_env_config("\n".join(lines))


HOSTILE = {
    "alias-bomb": (alias_bomb(), "expands to over 100000 values"),
    "deep-nesting": (with_env_config("x: " + "[" * 200_000 + "]" * 200_000), "levels deep"),
    "self-alias": (with_env_config("x: &x [*x]"), "a YAML alias refers to itself"),
    "infinite-stop": (
        EXAMPLE.replace("episodeReturnMean: 475", "episodeReturnMean: .inf"),
        "spec.trainer.stop.episodeReturnMean: inf is not a finite number",
    ),
    "nan-in-env-config": (
        with_env_config("scale: .nan"),
        "spec.trainer.envConfig.scale: nan is not a finite number",
    ),
    "beyond-int64": (
        EXAMPLE.replace("timesteps: 100000", "timesteps: 92233720368547758070"),
        "spec.trainer.stop.timesteps: 92233720368547758070 does not fit",
    ),
    "seed-beyond-numpy": (
        EXAMPLE.replace("seed: 0", "seed: 9223372036854775807"),
        "spec.trainer.seed: must be <= 4294967295",
    ),
}


@pytest.mark.parametrize(("text", "expected"), HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("command", ["validate", "render"])
def test_hostile_manifests_get_one_problem_line(tmp_path, command, text, expected):
    path = tmp_path / "job.yaml"
    path.write_text(text)

    result = capped(command, path)

    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert result.stderr.startswith(f"{path}: ") and expected in result.stderr
    assert result.stdout == ""


def test_an_oversized_file_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:  # sparse: 4 GiB that would not fit under the cap
        file.truncate(4 * 1024**3)

    result = capped("validate", path)

    assert result.returncode == 1
    assert result.stderr == f"{path}: larger than 1048576 bytes, the most a manifest may hold\n"


@pytest.mark.parametrize(("text", "expected"), list(HOSTILE.values())[:4], ids=list(HOSTILE)[:4])
def test_train_refuses_them_as_an_invalid_job_with_a_final_record(tmp_path, text, expected):
    path = tmp_path / "job.yaml"
    path.write_text(text)

    result = capped("train", path, "--run-dir", tmp_path / "run")

    assert result.returncode == EXIT_INVALID_JOB, result.stderr[-2000:]
    record = read_final_record(result.stdout)
    assert (record.outcome, record.exit_code) == (Outcome.INVALID_JOB, EXIT_INVALID_JOB)
    assert expected in record.message
    assert not (tmp_path / "run").exists()


# --- What validate may run ----------------------------------------------------------------------

MARKER_MODULE = """
import pathlib, os
pathlib.Path(os.environ["IMPORT_MARKER"]).write_text("imported")
import gymnasium

class Env(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
    action_space = gymnasium.spaces.Discrete(2)
"""


@pytest.fixture
def marker_env(tmp_path):
    """A `module:Class` env whose import leaves a file behind, and the environment that finds it."""
    (tmp_path / "marker_env.py").write_text(MARKER_MODULE)
    marker = tmp_path / "imported"
    python_path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "IMPORT_MARKER": str(marker)}
    return marker, env


def manifest_with_marker_env(tmp_path: Path, **changes: str) -> Path:
    document = yaml.safe_load(EXAMPLE)
    document["spec"]["trainer"]["env"] = "marker_env:Env"
    document.update(changes)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_validate_makes_the_env_of_an_rljob(tmp_path, marker_env):
    marker, env = marker_env

    result = capped("validate", manifest_with_marker_env(tmp_path), env=env)

    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "imported"  # the check below can see an import


@pytest.mark.parametrize(
    "changes",
    [{"kind": "Pod"}, {"apiVersion": "kuberl.io/v1"}, {"kind": None}],
    ids=["another-kind", "unknown-api-version", "no-kind"],
)
@pytest.mark.parametrize("command", ["validate", "render"])
def test_nothing_is_imported_for_a_document_that_is_not_an_rljob(
    tmp_path, marker_env, command, changes
):
    marker, env = marker_env
    path = manifest_with_marker_env(tmp_path, **changes)

    result = capped(command, path, env=env)

    assert result.returncode == 1
    assert "kind" in result.stderr or "apiVersion" in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("command", ["validate", "render"])
def test_no_env_checks_the_manifest_without_importing_the_env(tmp_path, marker_env, command):
    marker, env = marker_env

    result = capped(command, "--no-env", manifest_with_marker_env(tmp_path), env=env)

    assert result.returncode == 0, result.stderr
    assert not marker.exists()
