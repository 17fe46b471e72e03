"""Where checkpoints are kept, pruned and found: a local path or an object store (s3://, gs://,
az:// through fsspec), each checkpoint complete before it counts and never replacing another.
What a checkpoint folder holds, how it is written, and the checks that make it usable (loaded as
data only) are in checkpoint_format.

Under the location (checkpoint.uri; by default checkpoints/ in the run directory):

    checkpoint-00000020/      a save of iteration 20: state.pt, then manifest.json
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
- **Fenced.** A store given the driver's attempt records it in each checkpoint's meta and writes
  nothing once a newer attempt has written at the location (fence.json, see fencing.py).

Object stores take their credentials and endpoint from the environment, as their SDKs do
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for MinIO and other S3-compatible
servers, ...).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

# CheckpointError, CheckpointRefused and CheckpointSaveError are imported from here as well.
from kuberl_trainer.job.checkpoint_format import (
    MANIFEST,
    STATE,
    CheckpointError,
    CheckpointRefused,
    CheckpointSaveError,
    Unusable,
    check_meta,
    describe,
    encode_manifest,
    fsync_dir,
    parse_manifest,
    verified_state,
    write_state,
    write_synced,
)
from kuberl_trainer.job.fencing import ATTEMPT_META, FENCE, FENCE_LOCK, CheckpointFenced, fence_of

log = logging.getLogger(__name__)

PREFIX = "checkpoint-"

# checkpoint-<iteration>, or checkpoint-<iteration>-<n> for the n-th re-save of that iteration
_NAME = re.compile(r"checkpoint-([0-9]+)(?:-([0-9]+))?")

# The Python packages behind the object stores that kuberl[trainer] does not install.
_STORE_PACKAGES = {"gs": "gcsfs", "az": "adlfs"}


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
    """The checkpoints at one location, newest `keep` complete ones kept, fenced by `attempt`."""

    def __init__(self, location: str, keep: int, attempt: int | None = None):
        self.location = location
        self.keep = keep
        self.attempt = attempt
        self.fs, self.root = _filesystem(location)
        self.local = isinstance(self.fs, LocalFileSystem)  # a plain path or a file:// URI
        self.fence = fence_of(self.fs, self.root, self.uri(FENCE))
        self._skipped: set[str] = set()  # local entries not the store's own, warned about once

    def uri(self, name: str) -> str:
        return f"{self.location}/{name}"

    # -- saving ---------------------------------------------------------------------------------

    def save(self, iteration: int, state: dict[str, Any], meta: dict[str, Any]) -> str:
        """Saves beside the existing checkpoints, then prunes; returns the new one's URI. Raises
        CheckpointSaveError (CheckpointFenced: stale) with nothing existing touched."""
        meta = meta if self.attempt is None else {**meta, ATTEMPT_META: self.attempt}
        try:
            name = new_name(iteration, set(self._children()))  # skipped entries' names too
            if self.local:
                self._save_local(name, state, meta)
            else:
                self._save_remote(name, state, meta)
        except CheckpointFenced:
            raise
        except Exception as exc:
            raise CheckpointSaveError(
                f"could not save iteration {iteration} to {self.location}: {describe(exc)}"
            ) from exc
        try:
            with self.fence.admitted(self.attempt):  # pruning deletes: fenced like a write
                self._prune(name)
        except Exception as exc:  # the new checkpoint is complete: stale ones wait for next time
            log.warning("could not prune old checkpoints in %s: %s", self.location, describe(exc))
        return self.uri(name)

    def put_file(self, local: Path, name: str) -> str:
        """Copy the file `local` to `name` at this location (replacing one of that name whole:
        a local copy is renamed into place; fenced like a save); returns its URI."""
        if sort_key(name) is not None or name in (FENCE, FENCE_LOCK):
            raise ValueError(f"{name} is a checkpoint's name or the fence's: the store's own")
        with self.fence.admitted(self.attempt):
            if self.local:
                directory = Path(self.root)
                directory.mkdir(parents=True, exist_ok=True)
                tmp = directory / f".tmp-{name}-{os.getpid()}"
                shutil.copyfile(local, tmp)
                os.replace(tmp, directory / name)
            else:
                self.fs.put_file(str(local), f"{self.root}/{name}")
        return self.uri(name)

    def _save_local(self, name: str, state: dict[str, Any], meta: dict[str, Any]) -> None:
        directory = Path(self.root)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            manifest = encode_manifest({STATE: write_state(tmp / STATE, state)}, meta)
            write_synced(tmp / MANIFEST, manifest)
            with self.fence.admitted(self.attempt):
                os.rename(tmp, directory / name)  # a new name: nothing is ever replaced
                fsync_dir(directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _save_remote(self, name: str, state: dict[str, Any], meta: dict[str, Any]) -> None:
        target = f"{self.root}/{name}"
        with tempfile.TemporaryDirectory(prefix="kuberl-checkpoint-") as scratch:
            local_state = Path(scratch) / STATE
            manifest = encode_manifest({STATE: write_state(local_state, state)}, meta)
            try:
                self.fs.put_file(str(local_state), f"{target}/{STATE}")
                with self.fence.admitted(self.attempt):  # checked right before it counts
                    self.fs.pipe_file(f"{target}/{MANIFEST}", manifest)
            except BaseException:
                self._remove_quietly(name)  # a stale attempt's manifest as well
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
                f"cannot list the checkpoints in {self.location}: {describe(exc)}"
            ) from exc
        for name, _ in reversed(listing):
            uri = self.uri(name)
            try:
                manifest = self._manifest(name)
                check_meta(uri, manifest["meta"], expect)
                state = self._state(name, manifest["files"][STATE])
            except Unusable as reason:
                log.warning("skipping corrupt checkpoint %s: %s", uri, reason)
                continue
            except CheckpointError:
                raise
            except Exception as exc:
                raise CheckpointError(f"cannot read checkpoint {uri}: {describe(exc)}") from exc
            return Checkpoint(uri, manifest["meta"], state)
        return None

    def read(self, name: str) -> Checkpoint:
        """The checkpoint `name` of this location, whoever wrote it; a CheckpointError saying why
        when it cannot be used (incomplete, damaged, unsafe, unreadable)."""
        uri = self.uri(name)
        try:
            manifest = self._manifest(name)
            state = self._state(name, manifest["files"][STATE])
        except Unusable as reason:
            raise CheckpointError(f"checkpoint {uri} cannot be used: {reason}") from None
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"cannot read checkpoint {uri}: {describe(exc)}") from exc
        return Checkpoint(uri, manifest["meta"], state)

    def _manifest(self, name: str) -> dict[str, Any]:
        try:
            raw = self.fs.cat_file(f"{self.root}/{name}/{MANIFEST}")
        except FileNotFoundError:
            raise Unusable(f"no {MANIFEST}: its save never finished") from None
        return parse_manifest(raw)

    def _state(self, name: str, expected: dict[str, Any]) -> dict[str, Any]:
        try:
            data = self.fs.cat_file(f"{self.root}/{name}/{STATE}")
        except FileNotFoundError:
            raise Unusable(f"{STATE} is missing") from None
        return verified_state(data, expected)

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


class CheckpointNotFound(CheckpointError):
    """Nothing at a path or URI named as a checkpoint: no such path, or no checkpoint there."""


def checkpoint_named(path: str) -> Checkpoint:
    """The checkpoint a user names: in a run directory, the newest intact one in its
    checkpoints/; in a checkpoint location (a folder of checkpoint folders, or an object store's
    URI of one), its newest intact one; or one checkpoint's folder, local or by URI. A
    CheckpointNotFound when there is none, a CheckpointError when it cannot be used."""
    if "://" not in path:
        local = Path(path).absolute()
        if not local.exists():
            raise CheckpointNotFound(f"{path}: no such file or directory")
        if (local / MANIFEST).exists():
            return CheckpointStore(str(local.parent), keep=1).read(local.name)
        if (local / "checkpoints").is_dir():
            local = local / "checkpoints"
        path = str(local)
    location, _, name = path.rstrip("/").rpartition("/")
    if sort_key(name) is not None:
        return CheckpointStore(location, keep=1).read(name)
    found = CheckpointStore(path.rstrip("/"), keep=1).latest(expect={})
    if found is None:
        raise CheckpointNotFound(
            f"{path}: no checkpoint here (a run directory keeps them in checkpoints/; a job with "
            "spec.trainer.checkpoint.uri keeps them there: name that URI)"
        )
    return found


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
