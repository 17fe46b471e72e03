"""The optional parts of kuberl a command needs (pyproject.toml's extras), and what to type when
one is missing: a command whose extra is not installed says so in one line, not a traceback."""

from __future__ import annotations

import importlib.util
import json
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse

# extra → a module it installs that the commands needing it import
EXTRA_MODULES = {
    "api": ("fastapi", "uvicorn"),
    "trainer": ("torch", "ray", "gymnasium"),
    "operator": ("kopf",),
}


def missing_extra(extra: str, command: str) -> str | None:
    """The one line to print when `extra` is not installed for `command`; None when it is."""
    missing = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"kuberl {command} needs kuberl's '{extra}' extra ({', '.join(missing)} not installed): "
        f"{install_command(extra)}"
    )


def install_command(extra: str) -> str:
    """The exact command that installs `extra` into this Python: from the checkout kuberl was
    installed from in editable mode (`make run`), else from the package index."""
    pip = f"{sys.executable} -m pip install"
    checkout = _editable_checkout()
    return f"{pip} -e '{checkout}[{extra}]'" if checkout else f"{pip} 'kuberl[{extra}]'"


def _editable_checkout() -> str | None:
    """The folder kuberl was installed from in editable mode; None otherwise. (A build's
    kuberl.egg-info in the working directory is also a "kuberl": only an installed one says how.)"""
    for found in metadata.distributions(name="kuberl"):
        origin = json.loads(found.read_text("direct_url.json") or "{}")
        url = urlparse(origin.get("url", ""))
        if (origin.get("dir_info") or {}).get("editable") and url.scheme == "file":
            return unquote(url.path)
    return None
