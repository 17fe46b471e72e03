"""Trainer processes of the local backend: the one module that starts, signals and observes them.

Each job runs `python -m kuberl_cli.main train FILE --run-dir DIR` under a small `sh` that records
the trainer's exit status in a file. The file is what lets an API that restarted learn how a job it
did not start (so cannot wait for) ended. The `sh` leads a process group of its own (a new
session), so a signal reaches the trainer and anything it spawned, and the API's death never does.
The `sh` traps SIGTERM and SIGINT so it outlives the trainer long enough to write the status; a
trap set to a command (not ignored) is reset in the trainer by exec, which handles them itself.

A trainer with remote rollout workers starts a private Ray: its GCS, raylet and workers are
descendants of the trainer. They share its process group today, but nothing keeps a process there
(one that calls setsid leaves it; `ray start` runs some of its processes in sessions of their own).
So killing a job stops the trainer's whole process tree first (SIGSTOP, so nothing forks any more),
then kills every process in it as well as the group: no Ray daemon outlives its job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from kuberl_api.auth import TOKEN_ENV

RESUME_COMMAND_ENV = "KUBERL_RESUME_COMMAND"
"""Read by `kuberl train` (kuberl_cli.train.RESUME_COMMAND_ENV, which the API's install may not
import cheaply): how the trainer's summary says to resume it."""

_WRAPPER = (
    'trap : TERM INT; "$@"; code=$?; echo "$code" > "$0.tmp" && mv "$0.tmp" "$0"; exit "$code"'
)
API_ONLY_ENV = frozenset({TOKEN_ENV})
"""Variables the API holds for itself, which no trainer gets. A trainer runs the job's own code (a
`module:Class` env is imported and run), so the API's token would be anyone's who submits a job;
the rest of the environment is the user's and the trainer needs it: PATH, HOME, locale, proxies,
AWS_* for checkpoints, CUDA_*, RAY_*, PYTHON*, KUBERL_* and whatever an env reads."""

# psutil's create_time is rounded differently across calls on some systems; a PID reused by another
# process starts at least a clock tick later.
_START_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class TrainerFiles:
    """Where one job's trainer reads and writes."""

    manifest: Path
    run_dir: Path
    log: Path
    exit_status: Path


@dataclass(frozen=True)
class Started:
    """A process the API started: its PID (also its process group) and start time."""

    pid: int
    started: float


class TrainerProcesses:
    """Starts trainers and tells whether one still runs, including those started before a restart
    of the API (which it cannot wait for: they were re-parented when the old API died)."""

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen] = {}

    def start(self, files: TrainerFiles, resume_command: str | None = None) -> Started:
        """Starts the trainer of `files`; `resume_command`: what resumes the job once it is
        suspended, for the trainer to name when it stops (rather than "run the same command")."""
        files.run_dir.mkdir(parents=True, exist_ok=True)
        files.exit_status.unlink(missing_ok=True)
        command = [sys.executable, "-m", "kuberl_cli.main", "train", str(files.manifest)]
        command += ["--run-dir", str(files.run_dir)]
        with open(files.log, "ab") as log:
            child = subprocess.Popen(
                ["sh", "-c", _WRAPPER, str(files.exit_status), *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=trainer_environment(os.environ, resume_command),
            )
        self._children[child.pid] = child
        return Started(child.pid, _start_time(child.pid) or 0.0)

    def is_ours(self, pid: int, started: float) -> bool:
        """Whether `pid` is still the process the API started at `started` and has not ended."""
        if pid in self._children:
            return self._children[pid].poll() is None
        try:
            process = psutil.Process(pid)
            return (
                abs(process.create_time() - started) < _START_TIME_TOLERANCE_S
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def signal(self, pid: int, started: float, signum: signal.Signals) -> None:
        """Sends `signum` to the trainer's process group, if it is still ours."""
        if self.is_ours(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)

    def kill(self, pid: int, started: float, timeout_s: float = 10.0) -> None:
        """Ends the whole process group and every descendant now (those in sessions of their own
        included) and waits until the leader is gone."""
        if not self.is_ours(pid, started):
            self._children.pop(pid, None)
            return
        tree = _stopped_tree(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil checks first that the PID is still this process
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait(timeout_s)
        else:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(timeout_s)

    def forget(self, pid: int) -> None:
        """Drops the handle of a child that has ended (after its exit status was read)."""
        child = self._children.pop(pid, None)
        if child is not None:
            child.poll()


def trainer_environment(
    environ: Mapping[str, str], resume_command: str | None = None
) -> dict[str, str]:
    """The environment of a trainer: the API's own, less API_ONLY_ENV, with unbuffered output so
    the log follows the trainer, and the command that resumes it (`kuberl train` names it in its
    summary when it stops on a signal: a suspend)."""
    kept = {name: value for name, value in environ.items() if name not in API_ONLY_ENV}
    kept.pop(RESUME_COMMAND_ENV, None)  # the API's own, if any, is not the job's
    if resume_command:
        kept[RESUME_COMMAND_ENV] = resume_command
    return kept | {"PYTHONUNBUFFERED": "1"}


def read_exit_status(path: Path) -> int | None:
    """The exit status the wrapper recorded, or None when it recorded none (the trainer and its
    wrapper were killed, or it still runs)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stopped_tree(pid: int) -> list[psutil.Process]:
    """`pid` and all its descendants, each stopped (SIGSTOP), so none forks another meanwhile: a
    process is listed again until no new one turns up."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return []
    found: dict[int, psutil.Process] = {}
    while True:
        try:
            fresh = [p for p in [root, *root.children(recursive=True)] if p.pid not in found]
        except psutil.Error:
            fresh = []
        if not fresh:
            return list(found.values())
        for process in fresh:
            with contextlib.suppress(psutil.Error):
                process.suspend()
            found[process.pid] = process


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
