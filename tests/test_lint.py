"""Style and architecture are part of the suite: ruff, and the import contracts (the operator and
the API never import ray or torch; the trainer never imports kopf)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["ruff", "format", "--check", "."], ["ruff", "check", "."], ["lint-imports"]],
    ids=["ruff-format", "ruff-check", "import-contracts"],
)
def test_clean(command):
    out = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
