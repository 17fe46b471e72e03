"""`kuberl explain` and the known-name pointers of `kuberl validate`, run as users run them: the
CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kuberl_cli.explain import HYPERPARAMETERS
from kuberl_contract.hyperparameters import PPOHyperparameters
from kuberl_contract.hyperparameters.fields import field_docs
from testkit import ROOT, edited, run_kuberl

BASE = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text())


def test_explain_ppo_lists_every_field_with_its_default_and_where_to_set_it():
    result = run_kuberl("explain", "PPO")

    assert result.returncode == 0, result.stderr
    headings = [line for line in result.stdout.splitlines() if line and not line[0].isspace()]
    for doc in field_docs(PPOHyperparameters):
        default = PPOHyperparameters.model_fields[doc.name].get_default(call_default_factory=True)
        shown = json.dumps(default) if not isinstance(default, str) else default
        heading = next(line for line in headings if line.startswith(f"{doc.name}: "))
        assert heading.endswith(f", default {shown}"), heading
        assert f"    set: spec.trainer.hyperparameters.{doc.name}\n" in result.stdout
    assert "learning_rate: float, (0, 1], default 0.0003" in headings


def test_explain_names_the_other_libraries_names_under_the_field_they_map_to():
    result = run_kuberl("explain", "PPO")

    block = result.stdout.split("\nvf_coeff: ")[1].split("\n\n")[0]
    assert "    Stable-Baselines3: vf_coef\n" in block + "\n"
    assert "    RLlib: vf_loss_coeff\n" in block + "\n"


def test_explain_prints_first_sentences_and_with_full_each_docstring_whole():
    short = " ".join(run_kuberl("explain", "IMPALA").stdout.split())
    full = " ".join(run_kuberl("explain", "IMPALA", "--full").stdout.split())

    for doc in field_docs(HYPERPARAMETERS["IMPALA"]):
        assert f"{doc.summary}." in short
        assert doc.description in full
    lag = next(doc for doc in field_docs(HYPERPARAMETERS["IMPALA"]) if doc.name == "lag_sgd_steps")
    assert lag.description not in short


def test_explain_without_an_algorithm_lists_them():
    result = run_kuberl("explain")

    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.splitlines()[: len(HYPERPARAMETERS)]]
    assert listed == list(HYPERPARAMETERS)


def test_an_unknown_algorithm_gets_a_did_you_mean_and_exit_status_2():
    result = run_kuberl("explain", "PP0")

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("unknown algorithm 'PP0'; did you mean PPO? (algorithms: PG,")


def test_explain_imports_neither_torch_nor_ray_nor_gymnasium():
    program = (
        "import runpy, sys\n"
        "sys.argv = ['kuberl', 'explain', 'PPO']\n"
        "try:\n"
        "    runpy.run_module('kuberl_cli.main', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "heavy = {'torch', 'ray', 'gymnasium'}\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=120
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("name", "pointer"),
    [
        ("n_steps", "this is Stable-Baselines3's name: kuberl's is rollout_length ("),
        ("train_batch_size", "this is RLlib's name: kuberl's is rollout_length ("),
        ("vf_loss_coeff", "this is RLlib's name: kuberl's is vf_coeff ("),
        ("net_arch", "this is Stable-Baselines3's name: kuberl's is hidden_sizes ("),
    ],
)
def test_kuberl_validate_points_a_known_name_at_kubers_field(tmp_path: Path, name, pointer):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(edited(BASE, **{f"spec.trainer.hyperparameters.{name}": 64}))
    )

    result = run_kuberl("validate", "--no-env", manifest)

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"{manifest}: spec.trainer.hyperparameters.{name}: unknown field; {pointer}"
    )
