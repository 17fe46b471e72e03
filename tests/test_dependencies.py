"""kuberl's dependencies: compatible ranges in the package's metadata, so that kuberl installs
into an existing environment, and one lock (requirements.lock) that `make`, CI and the images
install from, so that every machine tests and ships the same versions."""

import tomllib
from importlib.metadata import PackageNotFoundError, version

import pytest
from packaging.requirements import Requirement

from testkit import ROOT, locked_versions, normalized_name

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What `make test` installs (bench's baselines are installed by hand: see bench/README.md).
INSTALLED_GROUPS = ("trainer", "operator", "api", "dev")
REQUIREMENTS = [
    Requirement(line)
    for group in [PROJECT["dependencies"]]
    + [PROJECT["optional-dependencies"][name] for name in INSTALLED_GROUPS]
    for line in group
]


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=str)
def test_every_requirement_is_a_range_with_the_locked_version_inside(requirement):
    operators = {spec.operator for spec in requirement.specifier}
    assert "==" not in operators and ">=" in operators, (
        f"{requirement}: declare a range with a floor (>=tested version), pin in the lock"
    )
    locked = locked_versions().get(normalized_name(requirement.name))
    assert locked is not None, f"{requirement.name} is missing from requirements.lock"
    assert requirement.specifier.contains(locked, prereleases=True), (
        f"requirements.lock has {requirement.name}=={locked}, outside {requirement.specifier}"
    )


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=str)
def test_this_environment_was_installed_from_the_lock(requirement):
    try:
        installed = version(requirement.name)
    except PackageNotFoundError:
        pytest.fail(f"{requirement.name} is not installed: run make install")
    # torch's CPU build carries a local label (2.13.0+cpu); the lock has none
    assert installed.split("+")[0] == locked_versions()[normalized_name(requirement.name)]


def test_the_lock_pins_exact_versions_without_urls_or_local_labels():
    text = (ROOT / "requirements.lock").read_text()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            assert name and pinned and "@" not in line and "+" not in pinned, line
