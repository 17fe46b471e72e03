"""Checkpoints: written atomically, newest `keep` kept, corrupt ones skipped on resume.

A checkpoint is a directory `checkpoint-<iteration>` holding `state.pt` (weights, optimizer state,
counters, RNG states) and `meta.json` (what produced it). It is assembled under a temporary name
and renamed into place, so a reader never sees a half-written one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kuberl_trainer.errors import TrainingError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
PREFIX = "checkpoint-"


class CheckpointError(TrainingError):
    """The checkpoint location is unusable, or its newest checkpoint belongs to another job."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    meta: dict[str, Any]
    state: dict[str, Any]


def checkpoint_dir(uri: str | None, run_dir: Path) -> Path:
    """The local directory for `checkpoint.uri` (a path or file:// URI), or run_dir/checkpoints."""
    if uri is None:
        return run_dir / "checkpoints"
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        raise CheckpointError(
            f"spec.trainer.checkpoint.uri: {scheme}:// storage is not available to a local run; "
            "use a local path or file:// URI (object stores are mounted by the operator)"
        )
    return Path(uri)


class CheckpointStore:
    def __init__(self, directory: Path, keep: int):
        self.directory = directory
        self.keep = keep

    def save(self, iteration: int, state: dict[str, Any], meta: dict[str, Any]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{PREFIX}{iteration:08d}"
        tmp = self.directory / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        with open(tmp / "state.pt", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        _write_synced(tmp / "meta.json", json.dumps({"format": FORMAT_VERSION, **meta}))
        if final.exists():  # the same iteration saved again (e.g. at the end): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.directory)
        self._prune()
        return final

    def latest(self, expect: dict[str, Any]) -> Checkpoint | None:
        """The newest readable checkpoint. Unreadable ones are skipped with a warning; one whose
        `meta` disagrees with `expect` (algorithm, env) is refused."""
        for path in reversed(self._checkpoints()):
            try:
                meta = json.loads((path / "meta.json").read_text())
                state = torch.load(path / "state.pt", weights_only=False)
            except Exception as exc:  # any damage means: not this one
                log.warning("skipping corrupt checkpoint %s: %s", path, exc)
                continue
            for key, wanted in expect.items():
                if meta.get(key) != wanted:
                    raise CheckpointError(
                        f"checkpoint {path} was written for {key}={meta.get(key)!r}, this job "
                        f"has {key}={wanted!r}; point checkpoint.uri elsewhere or remove it"
                    )
            return Checkpoint(path, meta, state)
        return None

    def _checkpoints(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.name.startswith(PREFIX))

    def _prune(self) -> None:
        for stale in self._checkpoints()[: -self.keep]:
            shutil.rmtree(stale, ignore_errors=True)
        for leftover in self.directory.glob(".tmp-*"):
            if not leftover.name.endswith(f"-{os.getpid()}"):
                shutil.rmtree(leftover, ignore_errors=True)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
