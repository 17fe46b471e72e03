"""Where a `module:Class` env or wrapper is looked for: among the installed packages first, then in
the run's directories (the manifest's own directory and the working directory of `kuberl train`),
so that `env: my_env:Corridor` finds `my_env.py` next to `job.yaml`.

The run's directories travel in the environment variable KUBERL_ENV_PATH (os.pathsep between
them): the processes a run starts inherit it, the workers of the local Ray instance the driver
starts among them, so a remote rollout worker finds the module as the driver does. A worker on
another node of a cluster has no such directories: there the module is part of the image.

They are searched after the installed packages (appended to sys.path), and only for a module not
found there: a file next to a manifest never stands in for an installed module (`json.py`,
`numpy.py`, kuberl's own), so what a manifest's env may import grows only by the modules its
directory holds. What a policy file (a checkpoint's or an export's spec.trainer) may name is
decided in trust.py, before anything is imported.

Light on purpose (no gymnasium): `kuberl train` sets the directories before it reads the manifest.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from types import ModuleType

ENV_PATH = "KUBERL_ENV_PATH"
"""The environment variable holding the run's directories, os.pathsep between them."""


def run_directories(manifest: Path | None = None) -> list[Path]:
    """The directories a run's `module:Class` envs are looked for in: the manifest's (when the job
    comes from a file), then the working directory; absolute, each once."""
    found = [] if manifest is None else [Path(manifest).resolve().parent]
    working = Path.cwd().resolve()
    return found if working in found else [*found, working]


def search_for_envs_in(
    directories: Sequence[Path], environ: MutableMapping[str, str] = os.environ
) -> None:
    """Make `directories` the run's, for this process and those it starts from now on."""
    environ[ENV_PATH] = os.pathsep.join(str(directory) for directory in directories)


def searched_directories(environ: MutableMapping[str, str] = os.environ) -> list[Path]:
    """The run's directories, then this process's working directory, each once."""
    named = [Path(entry) for entry in environ.get(ENV_PATH, "").split(os.pathsep) if entry]
    working = Path.cwd().resolve()
    return named if working in named else [*named, working]


def import_env_module(name: str) -> ModuleType:
    """The module `name`, from the installed packages or else from the run's directories; a
    ModuleNotFoundError naming the directories searched when it is in none of them."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not _is_the_module(name, exc):  # the module was found, and one it imports was not
            raise
    directories = searched_directories()
    sys.path.extend(str(path) for path in directories if str(path) not in sys.path)
    importlib.invalidate_caches()  # the finders' caches predate the directories just added
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not _is_the_module(name, exc):
            raise
        searched = ", ".join(str(path) for path in directories)
        raise ModuleNotFoundError(
            f"No module named {exc.name!r} among the installed packages nor in {searched}",
            name=exc.name,
        ) from None


def _is_the_module(name: str, exc: ModuleNotFoundError) -> bool:
    """Whether `exc` says `name` itself (or a package on its dotted path) is missing."""
    return exc.name is not None and (name == exc.name or name.startswith(f"{exc.name}."))
