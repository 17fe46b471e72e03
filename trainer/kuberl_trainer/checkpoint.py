"""Checkpoints on a local path or an object store (s3://, gs://, az:// through fsspec), each one
complete before it counts, never replacing another, and loaded as data only.

Under the location (checkpoint.uri; by default checkpoints/ in the run directory):

    checkpoint-00000020/      a save of iteration 20
        state.pt              weights, optimizer state, counters, RNG states (torch.save)
        manifest.json         written last: each file's size and sha256, and the meta
    checkpoint-00000020-1/    iteration 20 saved again (say, on SIGTERM after a periodic save)

- **Complete before it counts.** Only a checkpoint whose manifest exists and whose files match it
  is resumed from. A save that died half-way (a killed upload, a full disk, a second signal) is
  skipped with a warning and pruned by a later save.
- **A save never replaces a checkpoint.** It lands beside the others under a name of its own;
  older ones are pruned to `keep` only once the new one is complete, so a crash at any moment
  leaves the previous checkpoint intact, `keep: 1` included.
- **On local disk** a checkpoint is also assembled under a temporary name, fsynced and renamed
  into place: a reader never sees a half-written folder there.
- **Inside the location only.** On local disk, an entry that is a symbolic link, or a checkpoint
  folder holding one, is skipped with a warning and left alone: never read, never pruned, so a
  planted link can neither be resumed from nor make pruning delete what it points to. Such an
  entry stays until someone removes it. Object stores have no links, and names come only from
  listings that must match `checkpoint-<iteration>`: no `..` can leave the prefix.
- **Data only.** state.pt is loaded with `torch.load(weights_only=True)` plus numpy arrays: tensors,
  arrays and plain containers. A tampered checkpoint that carries code is refused and runs nothing.

Object stores take their credentials and endpoint from the environment, as their SDKs do
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for MinIO and other S3-compatible
servers, ...).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import torch
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from kuberl_trainer.errors import InvalidJobError, TrainingError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Version of the layout above; 1 (meta.json, no manifest) is never resumed from."""
PREFIX = "checkpoint-"
STATE = "state.pt"
MANIFEST = "manifest.json"

# checkpoint-<iteration>, or checkpoint-<iteration>-<n> for the n-th re-save of that iteration
_NAME = re.compile(r"checkpoint-([0-9]+)(?:-([0-9]+))?")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# The Python packages behind the object stores that kuberl[trainer] does not install.
_STORE_PACKAGES = {"gs": "gcsfs", "az": "adlfs"}

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


class _Unusable(Exception):
    """This checkpoint cannot be resumed from (incomplete, damaged, or unsafe): try an older one."""


@dataclass(frozen=True)
class Checkpoint:
    uri: str
    """Full location: an absolute path, or the object store's URI."""
    meta: dict[str, Any]
    state: dict[str, Any]


def checkpoint_location(uri: str | None, run_dir: Path) -> str:
    """Where a job's checkpoints live: an object store's URI as given, a local path or file:// URI
    as an absolute path (what progress rows and the operator show), or run_dir/checkpoints."""
    if uri is None:
        return str((run_dir / "checkpoints").absolute())
    if uri.startswith("file://"):
        return str(Path(uri.removeprefix("file://")).absolute())
    if "://" in uri:
        return uri.rstrip("/")
    return str(Path(uri).absolute())


def sort_key(name: str) -> tuple[int, int] | None:
    """(iteration, re-save number) of a checkpoint's folder name; None for anything else."""
    found = _NAME.fullmatch(name)
    if found is None:
        return None
    return int(found[1]), int(found[2] or 0)


def new_name(iteration: int, taken: set[str]) -> str:
    """The name for a save of `iteration` that no existing folder has."""
    name = f"{PREFIX}{iteration:08d}"
    resave = 0
    while name in taken:
        resave += 1
        name = f"{PREFIX}{iteration:08d}-{resave}"
    return name


class CheckpointStore:
    """The checkpoints at one location, newest `keep` complete ones kept."""

    def __init__(self, location: str, keep: int):
        self.location = location
        self.keep = keep
        self.fs, self.root = _filesystem(location)
        self.local = isinstance(self.fs, LocalFileSystem)  # a plain path or a file:// URI
        self._skipped: set[str] = set()  # local entries not the store's own, warned about once

    def uri(self, name: str) -> str:
        return f"{self.location}/{name}"

    # -- saving ---------------------------------------------------------------------------------

    def save(self, iteration: int, state: dict[str, Any], meta: dict[str, Any]) -> str:
        """Saves beside the existing checkpoints, then prunes; returns the new one's URI. Raises
        CheckpointSaveError when the store fails, with nothing existing touched."""
        try:
            name = new_name(iteration, set(self._children()))  # skipped entries' names too
            if self.local:
                self._save_local(name, state, meta)
            else:
                self._save_remote(name, state, meta)
        except Exception as exc:
            raise CheckpointSaveError(
                f"could not save iteration {iteration} to {self.location}: {_describe(exc)}"
            ) from exc
        try:
            self._prune(name)
        except Exception as exc:  # the new checkpoint is complete: stale ones wait for next time
            log.warning("could not prune old checkpoints in %s: %s", self.location, _describe(exc))
        return self.uri(name)

    def _save_local(self, name: str, state: dict[str, Any], meta: dict[str, Any]) -> None:
        directory = Path(self.root)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            manifest = _manifest({STATE: _write_state(tmp / STATE, state)}, meta)
            _write_synced(tmp / MANIFEST, manifest)
            os.rename(tmp, directory / name)  # a new name: nothing is ever replaced
            _fsync_dir(directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _save_remote(self, name: str, state: dict[str, Any], meta: dict[str, Any]) -> None:
        target = f"{self.root}/{name}"
        with tempfile.TemporaryDirectory(prefix="kuberl-checkpoint-") as scratch:
            local_state = Path(scratch) / STATE
            manifest = _manifest({STATE: _write_state(local_state, state)}, meta)
            try:
                self.fs.put_file(str(local_state), f"{target}/{STATE}")
                self.fs.pipe_file(f"{target}/{MANIFEST}", manifest)  # from here on, it counts
            except BaseException:
                self._remove_quietly(name)
                raise

    def _prune(self, newest: str) -> None:
        """Remove what is older than the checkpoint just saved, except the `keep - 1` newest
        complete ones: older checkpoints and dead saves. Newer folders are left alone (a resumed
        run prunes them once it passes them)."""
        newest_key = sort_key(newest)
        older = [name for name, key in self._listing() if key < newest_key]
        complete = [name for name in older if self.fs.exists(f"{self.root}/{name}/{MANIFEST}")]
        kept = set(complete[max(0, len(complete) - (self.keep - 1)) :]) if self.keep > 1 else set()
        for name in older:
            if name not in kept:
                self._remove(name)
        if self.local:  # temporary folders of writers that died (never this process's)
            for leftover in Path(self.root).glob(".tmp-*"):
                if not leftover.name.endswith(f"-{os.getpid()}"):
                    shutil.rmtree(leftover, ignore_errors=True)

    def _remove(self, name: str) -> None:
        """The manifest goes first: a removal cut short leaves a checkpoint that no longer
        counts, never one that counts with files missing."""
        folder = f"{self.root}/{name}"
        if self.local:
            self._remove_local(Path(folder))
            return
        if self.fs.exists(f"{folder}/{MANIFEST}"):
            self.fs.rm_file(f"{folder}/{MANIFEST}")
        if self.fs.exists(folder):
            self.fs.rm(folder, recursive=True)

    @staticmethod
    def _remove_local(folder: Path) -> None:
        # O_NOFOLLOW: a folder swapped for a link since it was listed is refused, not followed to
        # a manifest elsewhere. rmtree then removes links inside it, never what they point to.
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        try:
            os.unlink(MANIFEST, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)

    def _remove_quietly(self, name: str) -> None:
        try:
            self._remove(name)
        except Exception as exc:  # unreachable, most likely: a later save prunes it
            log.warning("could not remove the unfinished checkpoint %s: %s", name, exc)

    # -- loading --------------------------------------------------------------------------------

    def latest(self, expect: dict[str, Any]) -> Checkpoint | None:
        """The newest complete, intact checkpoint. Incomplete, damaged or unsafe ones are skipped
        with a warning; one whose meta disagrees with `expect` (algorithm, env) is refused with a
        CheckpointError, as is a store that cannot be read (rather than starting over)."""
        try:
            listing = self._listing()
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(
                f"cannot list the checkpoints in {self.location}: {_describe(exc)}"
            ) from exc
        for name, _ in reversed(listing):
            uri = self.uri(name)
            try:
                manifest = self._manifest(name)
                _check_meta(uri, manifest["meta"], expect)
                state = self._state(name, manifest["files"][STATE])
            except _Unusable as reason:
                log.warning("skipping corrupt checkpoint %s: %s", uri, reason)
                continue
            except CheckpointError:
                raise
            except Exception as exc:
                raise CheckpointError(f"cannot read checkpoint {uri}: {_describe(exc)}") from exc
            return Checkpoint(uri, manifest["meta"], state)
        return None

    def _manifest(self, name: str) -> dict[str, Any]:
        try:
            raw = self.fs.cat_file(f"{self.root}/{name}/{MANIFEST}")
        except FileNotFoundError:
            raise _Unusable(f"no {MANIFEST}: its save never finished") from None
        return parse_manifest(raw)

    def _state(self, name: str, expected: dict[str, Any]) -> dict[str, Any]:
        try:
            data = self.fs.cat_file(f"{self.root}/{name}/{STATE}")
        except FileNotFoundError:
            raise _Unusable(f"{STATE} is missing") from None
        if len(data) != expected["size"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise _Unusable(f"{STATE} differs from its manifest (truncated or altered)")
        return load_state(data)

    def _listing(self) -> list[tuple[str, tuple[int, int]]]:
        """(name, sort key) of every checkpoint folder, oldest first; on local disk, only those
        that are the store's own (see _foreign), the others warned about once."""
        found = []
        for name in self._children():
            if (key := sort_key(name)) is None:
                continue
            if self.local and (reason := self._foreign(name)) is not None:
                if name not in self._skipped:
                    self._skipped.add(name)
                    log.warning("skipping %s, neither read nor removed: %s", self.uri(name), reason)
                continue
            found.append((name, key))
        return sorted(found, key=lambda entry: entry[1])

    def _foreign(self, name: str) -> str | None:
        """Why a local entry is not the store's own, or None when it is a plain folder inside the
        location with no link in it. A link would let a checkpoint be read from elsewhere, and
        pruning delete files elsewhere."""
        path = Path(self.root) / name
        if path.is_symlink():
            return f"it is a symbolic link to {os.readlink(path)}"
        resolved, root = path.resolve(), Path(self.root).resolve()
        if not resolved.is_relative_to(root):  # only if the location moved while we looked
            return f"it resolves to {resolved}, outside {root}"
        if not path.is_dir():
            return "it is not a folder"
        links = sorted(child.name for child in path.iterdir() if child.is_symlink())
        if links:
            return f"it holds symbolic links ({', '.join(links)})"
        return None

    def _children(self) -> list[str]:
        """The name of everything at the location."""
        self.fs.invalidate_cache()  # object stores' listings are cached; another process writes
        try:
            children = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            bucket = self.root.split("/", 1)[0]
            if not self.local and not self.fs.exists(bucket):  # a typo must not start over
                raise CheckpointError(
                    f"spec.trainer.checkpoint.uri: the bucket {bucket!r} of {self.location} does "
                    "not exist, or these credentials cannot see it: create it or fix the URI"
                ) from None
            return []
        return [child.rstrip("/").rsplit("/", 1)[-1] for child in children]


def load_state(data: bytes) -> dict[str, Any]:
    """A state.pt's contents, unpickled as tensors, numpy arrays and plain data only."""
    try:
        with torch.serialization.safe_globals(_NUMPY_GLOBALS):
            state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        if "Weights only load failed" in str(exc):
            raise _Unusable(
                "refused to load: it holds objects other than tensors, arrays and plain data "
                f"({_unsupported_global(str(exc))}), which could run code; it was not loaded"
            ) from None
        raise _Unusable(f"{STATE} is unreadable: {_describe(exc)}") from None
    if not isinstance(state, dict):
        raise _Unusable(f"{STATE} holds a {type(state).__name__}, not a checkpoint's state")
    return state


def parse_manifest(raw: bytes) -> dict[str, Any]:
    """A manifest's contents, checked: the format, one entry (size, sha256) for state.pt, the
    meta. Raises _Unusable, or CheckpointError for a newer format than this kuberl reads."""
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise _Unusable(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise _Unusable(f"{MANIFEST} is not an object")
    version = manifest.get("format")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointRefused(
            f"a checkpoint has format {version}, newer than this kuberl reads ({FORMAT_VERSION}): "
            "upgrade the trainer image, or point checkpoint.uri elsewhere"
        )
    if version != FORMAT_VERSION:
        raise _Unusable(f"{MANIFEST} has format {version!r}, expected {FORMAT_VERSION}")
    files, meta = manifest.get("files"), manifest.get("meta")
    if not isinstance(meta, dict):
        raise _Unusable(f"{MANIFEST} has no meta")
    if not isinstance(files, dict) or set(files) != {STATE}:
        raise _Unusable(f"{MANIFEST} must list exactly {STATE}")
    entry = files[STATE]
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("size"), int)
        and isinstance(entry.get("sha256"), str)
        and _SHA256.match(entry["sha256"])
    ):
        raise _Unusable(f"{MANIFEST} lacks the size or sha256 of {STATE}")
    return manifest


def _check_meta(uri: str, meta: dict[str, Any], expect: dict[str, Any]) -> None:
    for key, wanted in expect.items():
        if meta.get(key) != wanted:
            raise CheckpointRefused(
                f"checkpoint {uri} was written for {key}={meta.get(key)!r}, this job "
                f"has {key}={wanted!r}; point checkpoint.uri elsewhere or remove it"
            )


def _manifest(files: dict[str, dict[str, Any]], meta: dict[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT_VERSION, "files": files, "meta": meta}).encode()


def _write_state(path: Path, state: dict[str, Any]) -> dict[str, Any]:
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


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _filesystem(location: str) -> tuple[AbstractFileSystem, str]:
    scheme = location.split("://", 1)[0] if "://" in location else "file"
    try:
        # A fresh instance per store: fsspec caches them, with the environment they were built in.
        return fsspec.core.url_to_fs(location, skip_instance_cache=True)
    except ImportError as exc:
        package = _STORE_PACKAGES.get(scheme, f"the fsspec implementation of {scheme}://")
        raise CheckpointRefused(
            f"spec.trainer.checkpoint.uri: {scheme}:// checkpoints need {package}, which "
            f"kuberl[trainer] does not install: add `pip install {package}` to the trainer image"
        ) from exc
    except ValueError as exc:
        raise CheckpointRefused(f"spec.trainer.checkpoint.uri: {location}: {exc}") from exc


def _describe(exc: BaseException) -> str:
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
