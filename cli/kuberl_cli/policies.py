"""What `kuberl evaluate` and `kuberl export` share: the policy a user names, or why not."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def named_policy(
    command: str, path: str, load: Callable[[str], Any], opt_in: str
) -> tuple[Any, int]:
    """`load(path)` and EXIT_OK; or None and the exit code after saying why on stderr, in one
    line: 2 when nothing is at a local `path`, 1 when what is there holds no policy kuberl can
    load, or one whose env it may not make (`opt_in` then says how the user opts in)."""
    if "://" not in path and not Path(path).exists():
        print(f"kuberl {command}: {path}: no such file or directory", file=sys.stderr)
        return None, EXIT_NO_FILE
    from kuberl_trainer.errors import InvalidJobError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return load(path), EXIT_OK
    except InvalidJobError as exc:  # LoadError, and an env made for an older checkpoint's spaces
        print(f"kuberl {command}: {one_line(exc, opt_in)}", file=sys.stderr)
        return None, EXIT_INVALID


def one_line(exc: Exception, opt_in: str) -> str:
    """What the user reads of `exc`, in one line: a refusal to make a file's env with this
    command's way to opt in (`opt_in`), any other error's first line (an env's constructor may
    say much more)."""
    from kuberl_trainer.trained.loaded import UntrustedEnvError

    if isinstance(exc, UntrustedEnvError):
        return exc.explained(opt_in)
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
