"""Code that a policy file nobody vouches for names for kuberl to run, importable as
`hostile_code:...` where this folder is on the path. Each piece leaves a marker file, so that a
test can tell whether it ran."""

import os
from pathlib import Path

IMPORT_MARKER = "KUBERL_TEST_IMPORT_MARKER"
"""The variable naming the file that importing this module touches: gymnasium's `module:EnvId`
form imports the module before it looks for the id, which runs its code."""

if marker := os.environ.get(IMPORT_MARKER):
    Path(marker).touch()


def touch_marker(env=None, *, path: str, **_):
    """A wrapper's factory (`hostile_code:touch_marker`, kwargs `{path: ...}`) that touches `path`
    and hands the env back unwrapped."""
    Path(path).touch()
    return env
