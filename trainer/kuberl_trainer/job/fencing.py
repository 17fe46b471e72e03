"""Fencing: a stale attempt never clobbers a newer attempt's checkpoints.

The operator runs each try of a job's driver as an attempt (1, 2, ...) and tells the driver its
number in KUBERL_ATTEMPT (kuberl_contract.attempt). A driver of an older attempt that wakes up
after a newer one took over (a paused VM, a partitioned node) must not add, prune or replace
anything at the checkpoint location.
A run without an attempt (`kuberl train` outside the operator) is never fenced and never fences.

The location holds a fence, fence.json, naming the newest attempt that wrote there. Right before
a write counts (a checkpoint's rename into place or its manifest, a file put beside them, the
pruning of older checkpoints) the writer is admitted: an older attempt than the fence's is refused
with CheckpointFenced, a newer one records itself as the newest, an equal one goes on. Two writers
cannot both win the fence:

- **Local paths and PVCs**: read-compare-write under an exclusive lock (flock on fence.lock beside
  it; Linux's NFS client maps it to NFS locks), the fence replaced atomically (temp file, fsync,
  rename); the lock is held until the write it admitted is done.
- **s3://**: conditional writes: If-None-Match: * creates the fence, If-Match on its ETag replaces
  it, so of two writers that read the same fence only one replaces it; the other reads again.
  Object stores have no lock, so the fence is read again once the manifest is written: an older
  attempt that a newer one overtook meanwhile takes its checkpoint back and is refused. What no
  object store can close is a newer attempt arriving during one write of a stale attempt already
  admitted (say, one deletion of its pruning): the window is one request long.
- **Other object stores** (gs://, az://): read-compare-write without a condition, which is what
  fsspec offers for them (their generation preconditions are not used): two writers racing within
  one read-write window can both pass; the re-read after the write still catches a writer that
  finished first.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.asyn import sync
from fsspec.implementations.local import LocalFileSystem

from kuberl_contract.attempt import ATTEMPT_ENV
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.job.checkpoint_format import (
    CheckpointError,
    CheckpointSaveError,
    fsync_dir,
    write_synced,
)

ATTEMPT_META = "attempt"
"""The key of a checkpoint's meta that records the attempt that wrote it (absent: none)."""
FENCE = "fence.json"
FENCE_LOCK = "fence.lock"

# How often a writer re-reads a fence that another writer replaced between its read and its write
# before it gives up on this save (the next save tries again).
_RACES = 5
_LOST_RACE_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}


class CheckpointFenced(CheckpointSaveError):
    """A newer attempt owns the checkpoint location: this driver is stale and must stop."""


def attempt_from_env(environ: Mapping[str, str]) -> int | None:
    """The driver's attempt from KUBERL_ATTEMPT: a positive integer, or None when it is unset (a
    run outside the operator). An InvalidJobError naming the variable when it is anything else."""
    raw = environ.get(ATTEMPT_ENV)
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]+", raw):
        reason = "it is empty" if raw == "" else "it is not a whole number"
        raise InvalidJobError(
            f"{ATTEMPT_ENV}={raw!r}: {reason}; it must be the attempt, a positive integer "
            "(1, 2, ...), or unset outside the operator"
        )
    if int(raw) < 1:
        raise InvalidJobError(f"{ATTEMPT_ENV}={raw!r}: attempts start at 1")
    return int(raw)


def encode_fence(attempt: int) -> bytes:
    return json.dumps({ATTEMPT_META: attempt}).encode()


def parse_fence(raw: bytes, where: str) -> int:
    """The newest attempt a fence records; a CheckpointError when it is not a fence."""
    try:
        attempt = json.loads(raw)[ATTEMPT_META]
    except (ValueError, TypeError, KeyError):
        attempt = None
    if type(attempt) is not int or attempt < 1:
        raise CheckpointError(
            f"{where} is not a fence written by kuberl (expected {{{ATTEMPT_META!r}: N}}): "
            "remove it, and the next attempt's save writes it anew"
        )
    return attempt


class Fence:
    """The fence of one location, read and replaced as its kind of store allows (the subclasses);
    this base class decides who is admitted."""

    def __init__(self, where: str):
        self.where = where  # the fence's location, for messages

    @contextmanager
    def admitted(self, attempt: int | None) -> Iterator[None]:
        """Admit `attempt` (record it as the newest when it is newer), run the write it guards,
        then check no newer attempt took over meanwhile. Raises CheckpointFenced when `attempt` is
        older than the fence's, before the write or after it (the caller then undoes it)."""
        if attempt is None:  # a run outside the operator: no fence read, none written
            yield
            return
        with self._exclusive():
            self._admit(attempt)
            yield
            self._refuse_if_overtaken(attempt, self.read()[0])

    def read(self) -> tuple[int | None, Any]:
        """The newest attempt recorded (None: no fence yet) and the fence's version, which
        `replace` is conditional on."""
        raise NotImplementedError

    def replace(self, attempt: int, version: Any) -> bool:
        """Record `attempt` as the newest if the fence is still at `version`; False when another
        writer changed it first."""
        raise NotImplementedError

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Held from the admission to the end of the write; nothing where the store has no lock."""
        yield

    def _admit(self, attempt: int) -> None:
        for _ in range(_RACES):
            newest, version = self.read()
            self._refuse_if_overtaken(attempt, newest)
            if newest == attempt or self.replace(attempt, version):
                return
        raise CheckpointSaveError(
            f"{self.where} changed under each of {_RACES} tries to record attempt {attempt}: other "
            "writers keep replacing it; the next checkpoint tries again"
        )

    def _refuse_if_overtaken(self, attempt: int, newest: int | None) -> None:
        if newest is not None and newest > attempt:
            raise CheckpointFenced(
                f"attempt {attempt} is stale: attempt {newest} of this job now writes its "
                f"checkpoints ({self.where}), so this driver stops without writing; the newer "
                "attempt's checkpoints are untouched"
            )


class LocalFence(Fence):
    """The fence of a local path or PVC: read-compare-write under an exclusive flock."""

    def __init__(self, root: Path):
        super().__init__(str(root / FENCE))
        self.root = root

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / FENCE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            yield
        finally:
            os.close(fd)

    def read(self) -> tuple[int | None, Any]:
        try:
            raw = (self.root / FENCE).read_bytes()
        except FileNotFoundError:
            return None, None
        return parse_fence(raw, self.where), None

    def replace(self, attempt: int, version: Any) -> bool:
        # One fixed temporary name: the lock lets one writer at a time here.
        tmp = self.root / f".{FENCE}.tmp"
        write_synced(tmp, encode_fence(attempt))
        os.replace(tmp, self.root / FENCE)
        fsync_dir(self.root)
        return True


class ObjectFence(Fence):
    """The fence of an object store: on s3://, replaced by conditional writes on its ETag;
    elsewhere (gs://, az://) read and written unconditionally (see the module's docstring)."""

    def __init__(self, fs: AbstractFileSystem, path: str, where: str):
        super().__init__(where)
        self.fs, self.path = fs, path
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        self.conditional = bool(protocols & {"s3", "s3a"})

    def read(self) -> tuple[int | None, Any]:
        try:
            if self.conditional:
                raw, etag = sync(self.fs.loop, _get_with_etag, self.fs, self.path)
            else:
                raw, etag = self.fs.cat_file(self.path), None
        except FileNotFoundError:
            return None, None
        return parse_fence(raw, self.where), etag

    def replace(self, attempt: int, version: Any) -> bool:
        if not self.conditional:
            self.fs.pipe_file(self.path, encode_fence(attempt))
            return True
        condition = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        try:
            self.fs.pipe_file(self.path, encode_fence(attempt), **condition)
        except OSError as exc:
            if _lost_race(exc):
                return False
            raise
        return True


def fence_of(fs: AbstractFileSystem, root: str, where: str) -> Fence:
    """The fence of the checkpoint location `root` on `fs` (`where`: its URI, for messages)."""
    if isinstance(fs, LocalFileSystem):
        return LocalFence(Path(root))
    return ObjectFence(fs, f"{root}/{FENCE}", where)


async def _get_with_etag(fs: Any, path: str) -> tuple[bytes, str]:
    """An object's contents and the ETag of exactly those contents (one GET: a HEAD beside it
    could see a later version)."""
    bucket, key, _ = fs.split_path(path)
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key)
    try:
        return await response["Body"].read(), response["ETag"]
    finally:
        response["Body"].close()


def _lost_race(exc: OSError) -> bool:
    """Whether a conditional write failed because another writer changed the object first (s3fs
    maps If-None-Match's 412 to FileExistsError, If-Match's to a plain OSError, and an If-Match
    on an object deleted since to FileNotFoundError)."""
    if isinstance(exc, FileExistsError | FileNotFoundError):
        return True
    response = getattr(exc.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code") in _LOST_RACE_CODES
