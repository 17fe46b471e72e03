"""What `kuberl evaluate` and `kuberl export` share: the policy a user names, or why not."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def named_policy(command: str, path: str, load: Callable[[str], Any]) -> tuple[Any, int]:
    """`load(path)` and EXIT_OK; or None and the exit code after saying why on stderr: 2 when
    nothing is at a local `path`, 1 when what is there holds no policy kuberl can load."""
    if "://" not in path and not Path(path).exists():
        print(f"kuberl {command}: {path}: no such file or directory", file=sys.stderr)
        return None, EXIT_NO_FILE
    from kuberl_trainer.inference import LoadError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return load(path), EXIT_OK
    except LoadError as exc:
        print(f"kuberl {command}: {exc}", file=sys.stderr)
        return None, EXIT_INVALID
