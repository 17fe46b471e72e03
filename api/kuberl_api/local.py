"""The local backend: jobs run as trainer processes on this machine, their state kept in SQLite.

A supervisor task observes the processes and moves each job through its phases (`local_lifecycle`:
the lifecycle the operator shares, so a job reads alike on both backends); requests only record
what the caller wants (a new job, `spec.suspend`) and wake it. A run's files are read by
`run_files`.

Because every state lives in the database and every trainer in a process group of its own, an
API that restarts finds its jobs again: a trainer that still runs is re-attached, one that ended
while the API was down is judged by the exit status it left, and one that left none is Failed
with the reason, never left Running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from kuberl_api.backend import (
    ApiError,
    JobChunk,
    JobSummary,
    ListQuery,
    ProgressRow,
    already_exists,
    no_policy,
    not_found,
)
from kuberl_api.env_check import CHECKS_AT_ONCE, env_problems
from kuberl_api.local_lifecycle import (
    initial_document,
    manifest_of,
    now,
    with_change,
    with_suspend,
    with_workers,
)
from kuberl_api.local_warm_start import as_job_problems, source_job_name, trainer_manifest
from kuberl_api.processes import TrainerFiles, TrainerProcesses, read_exit_status
from kuberl_api.run_files import (
    follow_log,
    last_words,
    log_as_it_stands,
    log_tail,
    read_exported_policy,
    read_progress,
    with_progress,
)
from kuberl_api.scaling import scale_refusal
from kuberl_api.selectors import (
    chunk,
    decode_cluster_continue,
    decode_continue,
    matches,
    parse_label_selector,
)
from kuberl_api.store import DuplicateJob, JobRow, JobStore
from kuberl_api.submission import invalid
from kuberl_contract.final_record import read_final_record
from kuberl_contract.progress_row import PROGRESS_FILE
from kuberl_operator.constants import KEPT_FILES_ANNOTATION
from kuberl_operator.spec import Phase, Progress, RLJob, RLJobStatus
from kuberl_operator.status.local_decide import (
    WAITING,
    EndedTrainer,
    suspension_changed,
    trainer_ended,
    trainer_started,
)
from kuberl_operator.status.phases import ACTIVE

log = logging.getLogger(__name__)


class LocalBackend:
    """Jobs as local trainer processes. `max_running` trainers run at once; the rest wait
    Pending, in submission order (0 keeps every job Pending: a paused queue)."""

    name = "local"
    history_source = (
        "the trainer's progress.jsonl: one row per training iteration since the job started "
        "(a resumed job continues the same history)"
    )
    no_history_reason = None
    counts_jobs = True  # no operator runs beside it

    def __init__(self, data_dir: Path, max_running: int, poll_interval_s: float = 0.5) -> None:
        self.data_dir = data_dir
        self.max_running = max_running
        self.poll_interval_s = poll_interval_s
        self.processes = TrainerProcesses()
        self._store: JobStore | None = None
        self._wake = asyncio.Event()
        self._supervisor: asyncio.Task | None = None
        self._progress_seen: dict[tuple[str, str], tuple[int, float]] = {}
        self._checks = asyncio.Semaphore(CHECKS_AT_ONCE)  # submissions' env checks (env_check)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self.open()
        self._supervisor = asyncio.create_task(self._supervise(), name="local-supervisor")

    def open(self) -> None:
        """Opens the job database and recovers the jobs that were running; `reconcile()` then
        advances them (start() does so from a supervisor task)."""
        self._store = JobStore(self.data_dir / "jobs.db")
        self._recover()

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
        """Stores the job to run, once checked as `kuberl validate` checks a file (env_check)."""
        if self.store.get(namespace, job.name) is not None:  # before the check's seconds
            raise already_exists(namespace, job.name)
        checked = self._trainer_manifest(document, check_source=True)
        async with self._checks:
            problems = as_job_problems(await env_problems(checked, self.data_dir / "checks"))
        if problems:
            raise invalid(problems)
        stored = initial_document(job, namespace, now())
        try:
            self.store.insert(namespace, job.name, stored)
        except DuplicateJob:
            raise already_exists(namespace, job.name) from None
        # A job of the same name deleted earlier may have left files: never resume from them.
        shutil.rmtree(self._job_dir(namespace, job.name), ignore_errors=True)
        self._wake.set()
        return stored

    async def list(self, namespace: str | None, query: ListQuery) -> JobChunk:
        requirements = parse_label_selector(query.label_selector)
        if namespace is None:
            after = decode_cluster_continue(query.continue_token)
            rows = self.store.in_every_namespace(after, query.phase)
        else:
            rows = self.store.in_namespace(
                namespace, decode_continue(query.continue_token), query.phase
            )
        wanted = (
            row.document
            for row in rows
            if matches(requirements, row.document["metadata"].get("labels") or {})
        )
        return chunk(wanted, query.limit, every_namespace=namespace is None)

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
        if change := suspension_changed(row.phase, suspend):
            document = with_change(document, change, now())
        elif suspend and row.phase == Phase.RUNNING and not row.stopping:
            # Suspended once the trainer has checkpointed and exited (trainer_ended).
            self.processes.signal(row.pid, row.pid_started, signal.SIGTERM)
            row = replace(row, stopping=True)
        row = row.with_document(document)
        self.store.update(row)
        self._wake.set()
        return document

    async def scale(self, namespace: str, name: str, workers: int) -> dict[str, Any]:
        """Stores the new count for the job's next start: a trainer cannot be resized while it
        runs (409). Read and written with no await between, so no other request or supervisor
        tick writes the row in between."""
        row = self._row(namespace, name)
        document = with_workers(row.document, workers)
        if document is row.document:
            return document  # nothing changes: never refused
        if refusal := scale_refusal(row.document, workers):
            raise refusal
        if row.phase == Phase.RUNNING:
            raise ApiError(
                409,
                "Conflict",
                f'job "{name}" is running, and a local trainer cannot change its rollout workers '
                f"as it runs: suspend it, scale it, then `{resume_command(namespace, name)}`; "
                "the new count applies when it resumes",
            )
        self.store.update(row.with_document(document))
        return document

    async def delete(self, namespace: str, name: str, purge: bool = False) -> dict[str, Any]:
        """Stop the trainer and remove the job. Its run directory (checkpoints, progress, the
        exported policy) moves to kept/ unless `purge`: a job of the same name made later
        starts afresh, and the trained model is not lost with the job, as a PVC outlives the
        RLJob that used it."""
        row = self._row(namespace, name)
        if row.pid is not None:
            await asyncio.to_thread(self.processes.kill, row.pid, row.pid_started)
        self.store.delete(namespace, name)
        self._progress_seen.pop((namespace, name), None)
        job_dir, document = self._job_dir(namespace, name), row.document
        if purge or not job_dir.exists():
            await asyncio.to_thread(shutil.rmtree, job_dir, True)
        else:
            kept = self.data_dir / "kept" / namespace / f"{name}-{now():%Y%m%d-%H%M%S-%f}"
            await asyncio.to_thread(_move, job_dir, kept)
            metadata = document["metadata"]
            annotations = {**(metadata.get("annotations") or {}), KEPT_FILES_ANNOTATION: str(kept)}
            document = {**document, "metadata": {**metadata, "annotations": annotations}}
        self._wake.set()
        return document

    async def policy(self, namespace: str, name: str) -> bytes:
        """The policy file the job's final record names (`read_exported_policy`)."""
        document = self._row(namespace, name).document
        location = Progress.model_validate(document["status"].get("progress") or {}).exported_policy
        if location is None:
            raise no_policy(namespace, name)
        found = await read_exported_policy(self._job_dir(namespace, name), location)
        if found is None:
            raise no_policy(namespace, name)
        return found

    async def logs(self, namespace: str, name: str, tail_lines: int | None) -> AsyncIterator[str]:
        self._row(namespace, name)
        return log_as_it_stands(self._files(namespace, name).log, tail_lines)

    async def follow_logs(
        self, namespace: str, name: str, tail_lines: int | None
    ) -> AsyncIterator[str]:
        """The log as the trainer writes it, until the job has no trainer coming (see below); a
        Pending job is waited for: its trainer starts when a slot frees."""
        self._row(namespace, name)
        path = self._files(namespace, name).log
        return follow_log(
            path, tail_lines, lambda: self._no_trainer_coming(self.store.get(namespace, name))
        )

    def _no_trainer_coming(self, row: JobRow | None) -> bool:
        """Whether the job has no trainer and gets none by itself: deleted, ended (Succeeded,
        Failed, Suspended), or waiting in a paused queue (max_running 0)."""
        if row is None:
            return True
        return row.phase not in ACTIVE or (row.phase in WAITING and self.max_running == 0)

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
        for row in self.store.in_phases((Phase.RUNNING,)):
            if row.pid is not None and self.processes.is_ours(row.pid, row.pid_started or 0):
                running += 1
                self._refresh_progress(row)
            else:
                self._finish(row)
        # Only the queue's head is read: a long queue costs nothing while the slots are full.
        if running < self.max_running:
            for row in self.store.in_phases(WAITING, self.max_running - running):
                self._start(row)

    def _recover(self) -> None:
        """After a restart: re-attach trainers that still run, judge those that ended."""
        for row in self.store.in_phases((Phase.RUNNING,)):
            if row.pid is not None and self.processes.is_ours(row.pid, row.pid_started or 0):
                log.info("re-attached %s/%s (pid %d)", row.namespace, row.name, row.pid)
            else:
                self._finish(row, lost_while_down=True)

    def _start(self, row: JobRow) -> None:
        files = self._files(row.namespace, row.name)
        files.manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest = self._trainer_manifest(manifest_of(row.document))
        files.manifest.write_text(yaml.safe_dump(manifest, sort_keys=False))
        started = self.processes.start(files, resume_command(row.namespace, row.name))
        change = trainer_started(RLJobStatus.model_validate(row.document["status"]))
        document = with_change(row.document, change, now())
        self.store.update(
            JobRow(row.namespace, row.name, row.seq, document, started.pid, started.started)
        )

    def _finish(self, row: JobRow, lost_while_down: bool = False) -> None:
        files = self._files(row.namespace, row.name)
        code = read_exit_status(files.exit_status)
        if row.pid is not None:
            self.processes.forget(row.pid)
        tail = log_tail(files.log)
        final = read_final_record(tail)
        document = with_progress(row.document, files.run_dir, final)
        trainer = EndedTrainer(
            code, row.pid, row.stopping, lost_while_down, final, last_words(tail)
        )
        change = trainer_ended(trainer, suspend=document["spec"].get("suspend", False))
        document = with_change(document, change, now())
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

    def _trainer_manifest(self, manifest: dict[str, Any], check_source: bool = False) -> Any:
        """`manifest` as its trainer reads it: a warmStart.job resolved to that job's checkpoints
        (a 422 when `check_source` and that job has none: local_warm_start.checked_source)."""
        if (name := source_job_name(manifest)) is None:
            return manifest
        namespace = manifest["metadata"]["namespace"]
        found = row.document if (row := self.store.get(namespace, name)) else None
        return trainer_manifest(manifest, found, self._files(namespace, name).run_dir, check_source)

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


def resume_command(namespace: str, name: str) -> str:
    """The command that resumes a suspended job of this backend."""
    return f"kuberl resume {name}" + ("" if namespace == "default" else f" -n {namespace}")


def _move(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, target)
