"""The Makefile installs torch's CPU build where no NVIDIA GPU is seen, and PyPI's otherwise."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def torch_install_command(path: str, *variables: str) -> str:
    """The command `make` would run to install torch (dry run, the install forced)."""
    printed = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", ".venv/.installed-trainer", *variables],
        cwd=ROOT,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(line for line in printed.splitlines() if " torch" in line)


@pytest.fixture
def bare_path(tmp_path):
    """A PATH with make and the shell's tools, and no nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("make", "sh", "dash", "bash", "env"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_a_gpu_torch_comes_from_its_cpu_index(bare_path):
    assert CPU_INDEX in torch_install_command(bare_path)


def test_with_a_gpu_torch_comes_from_pypi(bare_path):
    nvidia_smi = Path(bare_path) / "nvidia-smi"
    nvidia_smi.write_text("#!/bin/sh\n")
    nvidia_smi.chmod(nvidia_smi.stat().st_mode | stat.S_IEXEC)

    assert "--extra-index-url" not in torch_install_command(bare_path)


def test_torch_index_chooses_the_build(bare_path):
    cuda = "https://download.pytorch.org/whl/cu128"
    assert f"--extra-index-url {cuda}" in torch_install_command(bare_path, f"TORCH_INDEX={cuda}")
    assert "--extra-index-url" not in torch_install_command(bare_path, "TORCH_INDEX=")
