"""A local trainer's run, read: its progress rows (for the history and for status.progress), the
end of its log (for its final record and its last words), and its log for GET .../logs, a bounded
block at a time in a worker thread, so that no log is held whole and the event loop never waits
on a read."""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kuberl_api.backend import ApiError, ProgressRow
from kuberl_contract.final_record import FINAL_RECORD_PREFIX, FinalRecord
from kuberl_contract.progress_row import (
    CHECKPOINT,
    EPISODE_RETURN_MEAN,
    EVALUATION_RETURN_MEAN,
    ITERATION,
    PROGRESS_FILE,
    SAMPLES_PER_S,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    ProgressFileError,
    parse_rows,
    read_rows,
)
from kuberl_operator.spec import Progress

_TAIL_BYTES = 64 * 1024  # enough for the last row of progress.jsonl, or the final record
LOG_BLOCK_BYTES = 256 * 1024
"""The most of a log read (and held) at once."""


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
        evaluation_return_mean=row.evaluation_return_mean,  # every row carries the latest
        last_checkpoint=(final.checkpoint if final else None) or row.checkpoint or known,
        exported_policy=final.policy if final else None,
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


def read_log_from(path: Path, offset: int, most: int = LOG_BLOCK_BYTES) -> bytes:
    """At most `most` bytes of the trainer's log from byte `offset` on (nothing before the log
    exists)."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(most)
    except FileNotFoundError:
        return b""


def log_size(path: Path) -> int:
    """The log's size in bytes (0 before it exists)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def tail_span(path: Path, lines: int | None, block: int = LOG_BLOCK_BYTES) -> tuple[int, int]:
    """Where the last `lines` lines of the log start and where it ends now (all of it when None;
    a final newline ends the last line, it does not start another). Read backwards from the end a
    block at a time: one block in memory, however long the log."""
    try:
        with path.open("rb") as file:
            end = file.seek(0, os.SEEK_END)
            if lines is None:
                return 0, end
            if lines == 0:
                return end, end
            position, wanted, last_block = end, lines, True
            while position > 0:
                size = min(block, position)
                position -= size
                file.seek(position)
                data = file.read(size)
                stop = len(data) - 1 if last_block and data.endswith(b"\n") else len(data)
                last_block = False
                while (newline := data.rfind(b"\n", 0, stop)) != -1:
                    wanted -= 1
                    if wanted == 0:
                        return position + newline + 1, end
                    stop = newline
            return 0, end
    except FileNotFoundError:
        return 0, 0


async def read_log(
    path: Path, start: int, end: int, decoder: codecs.IncrementalDecoder
) -> AsyncIterator[str]:
    """The log's bytes from `start` to `end` as text through `decoder` (which completes a
    character cut between two blocks), a block at a time, each read in a worker thread."""
    offset = start
    while offset < end:
        data = await asyncio.to_thread(
            read_log_from, path, offset, min(LOG_BLOCK_BYTES, end - offset)
        )
        if not data:
            return  # the file was truncated or removed meanwhile
        offset += len(data)
        if text := decoder.decode(data):
            yield text


def last_log_line(path: Path) -> str | None:
    """The trainer's last line for people (its final record is for programs)."""
    lines = [
        line.strip()
        for line in log_tail(path).splitlines()
        if line.strip() and not line.startswith(FINAL_RECORD_PREFIX)
    ]
    return lines[-1] if lines else None
