"""The documentation site builds with `mkdocs build --strict`: no warning (a broken link, a missing
anchor, a page outside the nav, a Python object mkdocstrings cannot find), every page of the nav
rendered, and the Python API's reference rendered from the docstrings."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]


def nav_pages(nav: list) -> list[str]:
    """The Markdown files that the nav of mkdocs.yml names, in order."""
    pages = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def built_page(site: Path, page: str) -> Path:
    """Where mkdocs writes `page` (use_directory_urls: guides/cli.md becomes guides/cli/)."""
    stem = page.removesuffix(".md")
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    problems = [
        line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))
    ]
    assert result.returncode == 0 and not problems, result.stderr
    return site_dir


def test_every_page_of_the_nav_is_built_and_every_page_is_in_the_nav(site):
    # mkdocs.yml uses a tag (!!python/name:...) nowhere, so the safe loader reads it.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))

    assert sorted(pages) == on_disk
    assert [page for page in pages if not built_page(site, page).is_file()] == []


def test_the_python_reference_renders_train_load_and_predict_from_their_docstrings(site):
    html = built_page(site, "reference/python.md").read_text()

    for name in (
        "kuberl.training.train",
        "kuberl_trainer.trained.inference.load",
        "kuberl_trainer.trained.loaded.LoadedPolicy.predict",
        "kuberl_trainer.trained.loaded.LoadedPolicy.evaluate",
    ):
        assert f'id="{name}"' in html, name


def test_the_guides_carry_their_sections(site):
    train = built_page(site, "guides/train.md").read_text()
    algorithms = built_page(site, "reference/algorithms.md").read_text()

    for anchor in ("an-rljob", "checkpoints", "warm-start", "gpus"):
        assert f'id="{anchor}"' in train, anchor
    assert 'id="hyperparameters"' in algorithms
