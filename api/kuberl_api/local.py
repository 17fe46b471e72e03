"""The local backend: jobs run as trainer processes on this machine, their state kept in SQLite.

A supervisor task observes the processes and moves each job through the phases Pending, Running,
Succeeded, Failed and Suspended; requests only record what the caller wants (a new job,
`spec.suspend`) and wake it. Because every state lives in the database and every trainer in a
process group of its own, an API that restarts finds its jobs again: a trainer that still runs is
re-attached, one that ended while the API was down is judged by the exit status it left, and one
that left none is Failed with the reason, never left Running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kuberl_api.backend import (
    ApiError,
    JobPage,
    JobSummary,
    ListQuery,
    ProgressRow,
    already_exists,
    not_found,
)
from kuberl_api.processes import TrainerFiles, TrainerProcesses, read_exit_status
from kuberl_api.selectors import decode_continue, encode_continue, matches, parse_label_selector
from kuberl_api.store import DuplicateJob, JobRow, JobStore
from kuberl_operator.spec import ConditionType, Phase, Progress, Reason, RLJob
from kuberl_trainer.progress_row import (
    CHECKPOINT,
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    EXIT_INVALID_JOB,
    FINAL_RECORD_PREFIX,
    ITERATION,
    PROGRESS_FILE,
    SAMPLES_PER_S,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    FinalRecord,
    ProgressFileError,
    parse_rows,
    read_final_record,
    read_rows,
)

log = logging.getLogger(__name__)

# Why a job is in its phase (the `reason` of its conditions).
QUEUED = "Queued"
TRAINER_RUNNING = "TrainerRunning"
TRAINER_SUCCEEDED = "TrainerSucceeded"
TRAINER_FAILED = "TrainerFailed"
TRAINER_LOST = "TrainerLost"
SUSPENDED = "Suspended"

EXIT_SIGTERM, EXIT_SIGINT = 128 + signal.SIGTERM, 128 + signal.SIGINT
_TAIL_BYTES = 64 * 1024  # enough for the last row of progress.jsonl, or the final record


class LocalBackend:
    """Jobs as local trainer processes. `max_running` trainers run at once; the rest wait
    Pending, in submission order (0 keeps every job Pending: a paused queue)."""

    name = "local"
    history_source = (
        "the trainer's progress.jsonl: one row per training iteration since the job started "
        "(a resumed job continues the same history)"
    )
    no_history_reason = None

    def __init__(self, data_dir: Path, max_running: int, poll_interval_s: float = 0.5) -> None:
        self.data_dir = data_dir
        self.max_running = max_running
        self.poll_interval_s = poll_interval_s
        self.processes = TrainerProcesses()
        self._store: JobStore | None = None
        self._wake = asyncio.Event()
        self._supervisor: asyncio.Task | None = None
        self._progress_seen: dict[tuple[str, str], tuple[int, float]] = {}

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._store = JobStore(self.data_dir / "jobs.db")
        self._recover()
        self._supervisor = asyncio.create_task(self._supervise(), name="local-supervisor")

    async def close(self) -> None:
        """Stops supervising; trainers keep running, to be re-attached by the next API."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._store is not None:
            self._store.close()

    async def not_ready_reason(self) -> str | None:
        if self._supervisor is None or self._supervisor.done():
            return "the local supervisor is not running"
        try:
            self.store.ping()
        except Exception as exc:  # any database failure means not ready
            return f"the job database cannot be read: {exc}"
        return None

    @property
    def store(self) -> JobStore:
        assert self._store is not None, "LocalBackend.start() was not awaited"
        return self._store

    # --- requests -------------------------------------------------------------------------------

    async def create(self, namespace: str, job: RLJob, document: dict[str, Any]) -> dict[str, Any]:
        stored = initial_document(job, namespace, now())
        try:
            self.store.insert(namespace, job.name, stored)
        except DuplicateJob:
            raise already_exists(namespace, job.name) from None
        # A job of the same name deleted earlier may have left files: never resume from them.
        shutil.rmtree(self._job_dir(namespace, job.name), ignore_errors=True)
        self._wake.set()
        return stored

    async def list(self, namespace: str, query: ListQuery) -> JobPage:
        requirements = parse_label_selector(query.label_selector)
        after = decode_continue(query.continue_token)
        rows = self.store.in_namespace(namespace, after, query.phase)
        wanted = (
            row.document
            for row in rows
            if matches(requirements, row.document["metadata"].get("labels") or {})
        )
        return page(wanted, query.limit)

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self._row(namespace, name).document

    async def get_json(self, namespace: str, name: str) -> str:
        """The stored job as JSON text (the fast path of GET .../jobs/NAME)."""
        text = self.store.get_document_json(namespace, name)
        if text is None:
            raise not_found(namespace, name)
        return text

    async def progress(self, namespace: str, name: str) -> list[ProgressRow]:
        self._row(namespace, name)
        return read_progress(self._files(namespace, name).run_dir / PROGRESS_FILE)

    async def set_suspended(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        row = self._row(namespace, name)
        document = with_suspend(row.document, suspend)
        phase = row.phase
        if suspend and phase == Phase.PENDING:
            document = transition(document, Phase.SUSPENDED, SUSPENDED, "suspended", now())
        elif suspend and phase == Phase.RUNNING and not row.stopping:
            self.processes.signal(row.pid, row.pid_started, signal.SIGTERM)
            row = replace(row, stopping=True)
        elif not suspend and phase == Phase.SUSPENDED:
            document = transition(document, Phase.PENDING, QUEUED, "resumed; waiting", now())
        row = row.with_document(document)
        self.store.update(row)
        self._wake.set()
        return document

    async def delete(self, namespace: str, name: str) -> dict[str, Any]:
        row = self._row(namespace, name)
        if row.pid is not None:
            await asyncio.to_thread(self.processes.kill, row.pid, row.pid_started)
        self.store.delete(namespace, name)
        self._progress_seen.pop((namespace, name), None)
        await asyncio.to_thread(shutil.rmtree, self._job_dir(namespace, name), True)
        self._wake.set()
        return row.document

    async def logs(self, namespace: str, name: str, tail_lines: int | None) -> str:
        self._row(namespace, name)
        path = self._files(namespace, name).log
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        if tail_lines is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail_lines:]) if tail_lines else ""
        return text

    async def summaries(self) -> list[JobSummary]:
        return [JobSummary.of(row.document) for row in self.store.all()]

    # --- supervision ----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while True:
            try:
                self.reconcile()
            except Exception:  # one bad tick must not end supervision; the next one retries
                log.exception("local supervisor tick failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)

    def reconcile(self) -> None:
        """One pass: finish jobs whose trainer ended, refresh the progress of running ones, and
        start queued ones while there is room."""
        running = 0
        for row in self.store.in_phase(Phase.RUNNING):
            if row.pid is not None and self.processes.is_ours(row.pid, row.pid_started or 0):
                running += 1
                self._refresh_progress(row)
            else:
                self._finish(row)
        # Only the queue's head is read: a long queue costs nothing while the slots are full.
        if running < self.max_running:
            for row in self.store.in_phase(Phase.PENDING, self.max_running - running):
                self._start(row)

    def _recover(self) -> None:
        """After a restart: re-attach trainers that still run, judge those that ended."""
        for row in self.store.in_phase(Phase.RUNNING):
            if row.pid is not None and self.processes.is_ours(row.pid, row.pid_started or 0):
                log.info("re-attached %s/%s (pid %d)", row.namespace, row.name, row.pid)
            else:
                self._finish(row, lost_while_down=True)

    def _start(self, row: JobRow) -> None:
        files = self._files(row.namespace, row.name)
        files.manifest.parent.mkdir(parents=True, exist_ok=True)
        files.manifest.write_text(yaml.safe_dump(manifest_of(row.document), sort_keys=False))
        started = self.processes.start(files)
        document = transition(
            row.document, Phase.RUNNING, TRAINER_RUNNING, f"trainer pid {started.pid}", now()
        )
        self.store.update(
            JobRow(row.namespace, row.name, row.seq, document, started.pid, started.started)
        )

    def _finish(self, row: JobRow, lost_while_down: bool = False) -> None:
        files = self._files(row.namespace, row.name)
        code = read_exit_status(files.exit_status)
        if row.pid is not None:
            self.processes.forget(row.pid)
        final = read_final_record(log_tail(files.log))
        document = with_progress(row.document, files.run_dir, final)
        phase, reason, message = outcome(
            code, row.stopping, document, lost_while_down, row.pid, final
        )
        if phase is Phase.FAILED and final is None and (last := last_log_line(files.log)):
            message += f"; last output: {last}"
        document = transition(document, phase, reason, message, now())
        self.store.update(JobRow(row.namespace, row.name, row.seq, document))
        self._progress_seen.pop((row.namespace, row.name), None)

    def _refresh_progress(self, row: JobRow) -> None:
        """Copies the newest progress row into the status when progress.jsonl changed."""
        path = self._files(row.namespace, row.name).run_dir / PROGRESS_FILE
        try:
            stat = path.stat()
        except FileNotFoundError:
            return
        key, seen = (row.namespace, row.name), (stat.st_size, stat.st_mtime)
        if self._progress_seen.get(key) == seen:
            return
        self._progress_seen[key] = seen
        self.store.update(row.with_document(with_progress(row.document, path.parent)))

    # --- helpers --------------------------------------------------------------------------------

    def _row(self, namespace: str, name: str) -> JobRow:
        row = self.store.get(namespace, name)
        if row is None:
            raise not_found(namespace, name)
        return row

    def _job_dir(self, namespace: str, name: str) -> Path:
        return self.data_dir / "jobs" / namespace / name

    def _files(self, namespace: str, name: str) -> TrainerFiles:
        job_dir = self._job_dir(namespace, name)
        return TrainerFiles(
            manifest=job_dir / "job.yaml",
            run_dir=job_dir / "run",
            log=job_dir / "trainer.log",
            exit_status=job_dir / "exit-status",
        )


# --- Pure functions: documents, phases, progress ------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def initial_document(job: RLJob, namespace: str, created: datetime) -> dict[str, Any]:
    """The job as stored at submission: validated spec with defaults, server-set metadata, and a
    first status (Suspended when submitted with spec.suspend, else Pending)."""
    document = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["metadata"] |= {
        "namespace": namespace,
        "uid": str(uuid.uuid4()),
        "creationTimestamp": timestamp(created),
        "generation": 1,
    }
    document["status"] = {"progress": {"iteration": 0, "timesteps": 0}}
    if job.spec.suspend:
        return transition(document, Phase.SUSPENDED, SUSPENDED, "submitted suspended", created)
    return transition(document, Phase.PENDING, QUEUED, "waiting for a free trainer slot", created)


def manifest_of(document: dict[str, Any]) -> dict[str, Any]:
    """What the trainer reads: the job without status and server-set metadata."""
    metadata = {key: document["metadata"][key] for key in ("name", "namespace", "labels")}
    return {
        "apiVersion": document["apiVersion"],
        "kind": document["kind"],
        "metadata": metadata,
        "spec": document["spec"],
    }


def with_suspend(document: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """`spec.suspend` set as asked; the generation moves only when the spec changes."""
    if document["spec"].get("suspend", False) == suspend:
        return document
    metadata = {**document["metadata"], "generation": document["metadata"]["generation"] + 1}
    return {**document, "metadata": metadata, "spec": {**document["spec"], "suspend": suspend}}


# The conditions each phase implies: (type, holds?) for Ready, Progressing, Complete, Failed and
# Suspended, in the standard Kubernetes shape.
_CONDITIONS = {
    Phase.PENDING: {"Progressing"},
    Phase.RUNNING: {"Ready", "Progressing"},
    Phase.SUCCEEDED: {"Complete"},
    Phase.FAILED: {"Failed"},
    Phase.SUSPENDED: {"Suspended"},
}
_CONDITION_TYPES = [
    ConditionType.READY,
    ConditionType.PROGRESSING,
    ConditionType.COMPLETE,
    ConditionType.FAILED,
    ConditionType.SUSPENDED,
]


def transition(
    document: dict[str, Any], phase: Phase, reason: str, message: str, at: datetime
) -> dict[str, Any]:
    """The document in `phase`: conditions follow it (their lastTransitionTime moves only when
    they flip), startTime is set on first running, completionTime on success or failure."""
    status = dict(document["status"])
    previous = {c["type"]: c for c in status.get("conditions", [])}
    conditions = []
    for type_ in _CONDITION_TYPES:
        holds = "True" if type_.value in _CONDITIONS[phase] else "False"
        old = previous.get(type_.value)
        changed = old is None or old["status"] != holds
        conditions.append(
            {
                "type": type_.value,
                "status": holds,
                "reason": reason,
                "message": message,
                "lastTransitionTime": timestamp(at) if changed else old["lastTransitionTime"],
            }
        )
    status |= {"phase": phase.value, "conditions": conditions}
    if phase is Phase.RUNNING:
        status.setdefault("startTime", timestamp(at))
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        status["completionTime"] = timestamp(at)
    else:
        status.pop("completionTime", None)
    return {**document, "status": status}


def outcome(
    code: int | None,
    stopping: bool,
    document: dict[str, Any],
    lost: bool,
    pid: int | None,
    final: FinalRecord | None = None,
) -> tuple[Phase, str, str]:
    """The phase, reason and message of a job whose trainer ended with exit status `code` (None
    when it left none), in the words of its final record when it printed one. `stopping`: the
    API sent it SIGTERM to suspend it."""
    said = f": {final.message}" if final is not None and final.message else ""
    if code == 0:
        return Phase.SUCCEEDED, TRAINER_SUCCEEDED, f"the trainer met a stop condition{said}"
    if stopping and code in (EXIT_SIGTERM, EXIT_SIGINT):
        if document["spec"].get("suspend"):
            return Phase.SUSPENDED, SUSPENDED, "suspended after a checkpoint"
        return Phase.PENDING, QUEUED, "resumed while stopping; waiting for a free trainer slot"
    if code is None:
        when = "while the API was down" if lost else "without an exit status"
        return Phase.FAILED, TRAINER_LOST, f"the trainer process (pid {pid}) ended {when}"
    if code == EXIT_INVALID_JOB:
        return Phase.FAILED, Reason.INVALID_SPEC, f"the trainer found the job invalid{said}"
    return Phase.FAILED, TRAINER_FAILED, f"the trainer exited with status {code}{said}"


def with_progress(
    document: dict[str, Any], run_dir: Path, final: FinalRecord | None = None
) -> dict[str, Any]:
    """The document with status.progress from the newest row of the run's progress.jsonl; the
    newest checkpoint is the one the rows (or, once the trainer has ended, its final record)
    name."""
    path = run_dir / PROGRESS_FILE
    row = last_progress_row(path)
    if row is None:
        return document
    known = Progress.model_validate(document["status"].get("progress") or {}).last_checkpoint
    progress = Progress(
        iteration=row.iteration,
        timesteps=row.timesteps,
        episode_return_mean=row.episode_return_mean,
        last_checkpoint=(final.checkpoint if final else None) or row.checkpoint or known,
        # Kubernetes' timestamps are whole seconds.
        last_update_time=datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0),
        samples_per_second=None
        if row.samples_per_second is None
        else max(row.samples_per_second, 0.0),
    )
    dumped = progress.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {**document, "status": {**document["status"], "progress": dumped}}


def progress_row(raw: dict[str, Any]) -> ProgressRow:
    """One line of progress.jsonl in the API's terms."""
    return ProgressRow(
        iteration=int(raw[ITERATION]),
        timesteps=int(raw.get(TIMESTEPS_TOTAL) or 0),
        episode_return_mean=raw.get(EPISODE_RETURN_MEAN),
        evaluation_return_mean=raw.get(EVALUATION_RETURN_MEAN),
        samples_per_second=raw.get(SAMPLES_PER_S),
        time_total_seconds=raw.get(TIME_TOTAL_S),
        checkpoint=raw.get(CHECKPOINT),
    )


def read_progress(path: Path) -> list[ProgressRow]:
    """Every whole row of progress.jsonl (a row being written is left until complete). A line
    that is not a progress row before the last is refused, naming the file and the line."""
    try:
        return [progress_row(raw) for raw in read_rows(path)]
    except ProgressFileError as exc:
        raise ApiError(500, "InternalError", f"the job's progress cannot be read: {exc}") from None


def last_progress_row(path: Path) -> ProgressRow | None:
    """The newest whole row of progress.jsonl, read from the file's end; None without one (or
    when the end of the file is not progress rows, which read_progress reports)."""
    try:
        with path.open("rb") as file:
            file.seek(0, 2)
            start = max(file.tell() - _TAIL_BYTES, 0)
            file.seek(start)
            text = file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    if start > 0:  # the first line read is cut at its front
        text = text.partition("\n")[2]
    try:
        rows = parse_rows(text, str(path))
    except ProgressFileError:
        return None
    return progress_row(rows[-1]) if rows else None


def log_tail(path: Path) -> str:
    """The end of a trainer's log: enough to hold its final record."""
    try:
        with path.open("rb") as file:
            file.seek(0, 2)
            file.seek(max(file.tell() - _TAIL_BYTES, 0))
            return file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def last_log_line(path: Path) -> str | None:
    """The trainer's last line for people (its final record is for programs)."""
    lines = [
        line.strip()
        for line in log_tail(path).splitlines()
        if line.strip() and not line.startswith(FINAL_RECORD_PREFIX)
    ]
    return lines[-1] if lines else None


def page(documents: Iterator[dict[str, Any]], limit: int | None) -> JobPage:
    """The first `limit` documents (all without a limit), with a token for the rest."""
    items: list[dict[str, Any]] = []
    for document in documents:
        if limit and len(items) == limit:
            return JobPage(items, encode_continue(items[-1]["metadata"]["name"]))
        items.append(document)
    return JobPage(items)
