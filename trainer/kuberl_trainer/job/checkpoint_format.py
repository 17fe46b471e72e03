"""One checkpoint on disk: the files of its folder, how they are written, and the checks that
decide whether it may be resumed from. Where the folders are kept, named, pruned and found is
checkpoint.py.

    checkpoint-00000020/      a save of iteration 20
        state.pt              weights, optimizer state, counters, RNG states (torch.save)
        manifest.json         written last: each file's size and sha256, and the meta

- **Complete before it counts.** A checkpoint is usable only when its manifest exists, is of this
  format, and the files match it (size and sha256). Anything less raises Unusable: the store
  skips that checkpoint and tries an older one.
- **Data only.** state.pt is loaded with `torch.load(weights_only=True)` plus numpy arrays: tensors,
  arrays and plain containers. A tampered checkpoint that carries code is refused and runs nothing.
- **Refused, not skipped.** A newer format than this kuberl reads, or a meta that disagrees with
  the job (another algorithm's or env's checkpoint), is a CheckpointRefused: retrying or starting
  over would not help.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kuberl_trainer.errors import InvalidJobError, TrainingError

FORMAT_VERSION = 2
"""Version of the layout above; 1 (meta.json, no manifest) is never resumed from."""
STATE = "state.pt"
MANIFEST = "manifest.json"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# What state.pt may hold besides tensors and plain containers: numpy arrays and scalars of bool and
# numeric dtypes (weights, replay buffers, numpy's RNG state). Rebuilding these calls no code of
# the file's choosing; object arrays are not among them.
_NUMPY_GLOBALS = [
    np._core.multiarray._reconstruct,
    np._core.multiarray.scalar,
    np.ndarray,
    np.dtype,
    *(type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"),
]


class CheckpointError(TrainingError):
    """The checkpoint location is unusable, or its newest checkpoint belongs to another job."""


class CheckpointRefused(CheckpointError, InvalidJobError):
    """The job's checkpoint location can never be used as it is (another job's checkpoint, a newer
    format, a store kuberl cannot reach without another package): retrying changes nothing."""


class CheckpointSaveError(CheckpointError):
    """A save failed (store full, unreachable, access denied); the previous checkpoints are
    intact."""


class Unusable(Exception):
    """This checkpoint cannot be resumed from (incomplete, damaged, or unsafe): try an older one."""


def verified_state(data: bytes, expected: dict[str, Any]) -> dict[str, Any]:
    """A state.pt's contents, once they match its manifest entry (size and sha256)."""
    if len(data) != expected["size"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise Unusable(f"{STATE} differs from its manifest (truncated or altered)")
    return load_state(data)


def load_state(data: bytes) -> dict[str, Any]:
    """A state.pt's contents, unpickled as tensors, numpy arrays and plain data only."""
    try:
        with torch.serialization.safe_globals(_NUMPY_GLOBALS):
            state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        if "Weights only load failed" in str(exc):
            raise Unusable(
                "refused to load: it holds objects other than tensors, arrays and plain data "
                f"({_unsupported_global(str(exc))}), which could run code; it was not loaded"
            ) from None
        raise Unusable(f"{STATE} is unreadable: {describe(exc)}") from None
    if not isinstance(state, dict):
        raise Unusable(f"{STATE} holds a {type(state).__name__}, not a checkpoint's state")
    return state


def parse_manifest(raw: bytes) -> dict[str, Any]:
    """A manifest's contents, checked: the format, one entry (size, sha256) for state.pt, the
    meta. Raises Unusable, or CheckpointError for a newer format than this kuberl reads."""
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise Unusable(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise Unusable(f"{MANIFEST} is not an object")
    version = manifest.get("format")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointRefused(
            f"a checkpoint has format {version}, newer than this kuberl reads ({FORMAT_VERSION}): "
            "upgrade the trainer image, or point checkpoint.uri elsewhere"
        )
    if version != FORMAT_VERSION:
        raise Unusable(f"{MANIFEST} has format {version!r}, expected {FORMAT_VERSION}")
    files, meta = manifest.get("files"), manifest.get("meta")
    if not isinstance(meta, dict):
        raise Unusable(f"{MANIFEST} has no meta")
    if not isinstance(files, dict) or set(files) != {STATE}:
        raise Unusable(f"{MANIFEST} must list exactly {STATE}")
    entry = files[STATE]
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("size"), int)
        and isinstance(entry.get("sha256"), str)
        and _SHA256.match(entry["sha256"])
    ):
        raise Unusable(f"{MANIFEST} lacks the size or sha256 of {STATE}")
    return manifest


def check_meta(uri: str, meta: dict[str, Any], expect: dict[str, Any]) -> None:
    for key, wanted in expect.items():
        if meta.get(key) != wanted:
            raise CheckpointRefused(
                f"checkpoint {uri} was written for {key}={meta.get(key)!r}, this job "
                f"has {key}={wanted!r}; point checkpoint.uri elsewhere or remove it"
            )


def encode_manifest(files: dict[str, dict[str, Any]], meta: dict[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT_VERSION, "files": files, "meta": meta}).encode()


def write_state(path: Path, state: dict[str, Any]) -> dict[str, Any]:
    """Writes state.pt, synced to disk; returns its manifest entry."""
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def describe(exc: BaseException) -> str:
    """An error's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _unsupported_global(message: str) -> str:
    """The object torch refused, from its long message (whose advice to load with
    weights_only=False is exactly what must not be done with an untrusted file)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", message)
    if found:
        return f"the global {found[1]}"
    found = re.search(r"but got <class '([^']+)'>", message)
    if found:
        return f"a {found[1]}"
    found = re.search(r"Unsupported operand \S+|Unsupported class \S+", message)
    return found[0] if found else "an object the safe loader does not allow"
