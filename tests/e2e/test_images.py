"""The container images (deploy/docker/): built for real with buildah from a debootstrapped Debian
base, as `make images` builds them, then run as a cluster would run them: the operator's command,
the API answering over HTTP, and the trainer training CartPole, each as the images' non-root
user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from kuberl_operator.constants import DEFAULT_RAY_VERSION
from testkit import ROOT, edited, free_port, locked_versions, rljob, wait_until

BUILD_SCRIPT = ROOT / "deploy" / "docker" / "build.sh"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
IMAGES = {name: f"ghcr.io/kuberl/{name}:{VERSION}" for name in ("operator", "api", "trainer")}
# The images' user (the chart's podSecurity runs the operator and the API with the same IDs).
USER = "10001:10001"
OCI_LABELS = ("title", "description", "version", "source", "licenses", "revision", "created")
# What KubeRay's start command and probes, and the head's preStop hook, run in the trainer image.
RAY_POD_TOOLS = ("bash", "sh", "wget", "grep", "pkill", "pgrep", "sleep", "ray", "kuberl")


def test_the_trainer_images_ray_is_the_operators_default_ray_version():
    # The trainer image installs kuberl[trainer] at the lock's versions; RayClusters ask for
    # DEFAULT_RAY_VERSION unless a job says otherwise.
    assert locked_versions()["ray"] == DEFAULT_RAY_VERSION


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["trainer", "bogus"], {}, "unknown image 'bogus': choose from operator, api, trainer"),
        (["--fast"], {}, "unknown option '--fast'"),
        (
            ["--debootstrap"],
            {"BASE_IMAGE": "python:3.11"},
            "BASE_IMAGE=python:3.11 and --debootstrap",
        ),
    ],
)
def test_build_script_refuses_bad_arguments_naming_them(args, env, message):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **env},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


# --- Built and run for real -------------------------------------------------------------------


def missing_requirement() -> str | None:
    if os.geteuid() != 0:
        return "needs root: buildah builds and runs the images as root"
    for tool in ("buildah", "debootstrap"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian package {tool})"
    return None


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    """The operator, API and CPU trainer images, built as `make images` builds them, from a
    Debian base made by debootstrap (kept in buildah's storage and reused by later runs)."""
    if reason := missing_requirement():
        pytest.skip(reason)
    command = ["bash", str(BUILD_SCRIPT), "--debootstrap", *IMAGES]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return IMAGES


@contextmanager
def container(image: str) -> Iterator[str]:
    """A working container of `image`, removed afterwards."""
    name = subprocess.run(
        ["buildah", "from", "--pull=never", "--quiet", image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True, check=False)


def in_container(name: str, *command: str, volume: str | None = None) -> list[str]:
    """The command line running `command` in container `name`, as the image's user. chroot
    isolation shares this machine's network, so servers inside answer on its loopback."""
    options = ["--volume", volume] if volume else []
    return ["buildah", "run", "--isolation", "chroot", *options, name, "--", *command]


def run_in(name: str, *command: str, volume: str | None = None, timeout: float = 120) -> str:
    result = subprocess.run(
        in_container(name, *command, volume=volume),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("component", list(IMAGES))
def test_images_run_as_non_root_and_carry_the_oci_labels(images, component):
    image = images[component]
    inspected = subprocess.run(
        ["buildah", "inspect", "--type", "image", image], capture_output=True, text=True, check=True
    )
    config = json.loads(inspected.stdout)
    oci = config["OCIv1"]["config"]
    assert oci["User"] == USER
    labels = oci["Labels"]
    for key in OCI_LABELS:
        assert labels.get(f"org.opencontainers.image.{key}"), f"{image} lacks the {key} label"
    assert labels["org.opencontainers.image.title"] == f"kuberl-{component}"
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == PROJECT["license"]
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0:
        assert labels["org.opencontainers.image.revision"] == head.stdout.strip()
    datetime.fromisoformat(labels["org.opencontainers.image.created"])
    with container(image) as name:
        assert run_in(name, "id", "-u").strip() == USER.split(":")[0]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_operator_image_runs_kuberl_operator(images):
    with container(images["operator"]) as name:
        output = run_in(name, "kuberl-operator", "--help")
    assert "Reconcile RLJobs into KubeRay RayClusters" in output


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_api_image_serves_healthz_over_http(images):
    port = free_port()
    with container(images["api"]) as name:
        server = subprocess.Popen(
            in_container(name, "kuberl", "serve", "--port", str(port), "--data-dir", "/tmp/api"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:

            def healthy() -> bool:
                assert server.poll() is None, server.stdout.read()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                        return r.status == 200
                except (urllib.error.URLError, ConnectionError):
                    return False

            wait_until(healthy, timeout=60, what=f"the API's /healthz on port {port}")
        finally:
            server.terminate()
            server.communicate(timeout=30)
    # Stopping `buildah run` ended the server inside.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_trainer_image_trains_cartpole_and_holds_what_ray_pods_run(images, tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    job = edited(rljob("cartpole"), **{"spec.trainer.stop": {"iterations": 1}})
    (job_dir / "job.yaml").write_text(yaml.safe_dump(job))
    # The image's user writes the run directory into the mounted one.
    os.chown(job_dir, *map(int, USER.split(":")))
    volume = f"{job_dir}:/job"
    with container(images["trainer"]) as name:
        output = run_in(
            name, "kuberl", "train", "/job/job.yaml", "--run-dir", "/job/run", volume=volume
        )
        assert "stopped at iterations>=1" in output
        [row] = [
            json.loads(line)
            for line in (job_dir / "run" / "progress.jsonl").read_text().splitlines()
        ]
        assert row["iteration"] == 1 and row["timesteps_total"] > 0
        assert (job_dir / "run" / "checkpoints" / "checkpoint-00000001").is_dir()

        assert run_in(name, "ray", "--version").split()[-1] == DEFAULT_RAY_VERSION
        found = run_in(
            name, "sh", "-c", 'for tool; do command -v "$tool" || true; done', "sh", *RAY_POD_TOOLS
        )
        assert [Path(path).name for path in found.split()] == list(RAY_POD_TOOLS), found
        # The CPU variant: a torch without CUDA.
        torch = run_in(name, "python", "-c", "import torch; print(torch.version.cuda)")
        assert torch.strip() == "None"
