"""A local trainer's run, read: its progress rows (for the history and for status.progress), the
end of its log (for its final record and its last words), its log for GET .../logs (as it stands,
or followed as the trainer writes it), a bounded block at a time in a worker thread, so that no
log is held whole and the event loop never waits on a read, and the policy it exported."""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator, Callable
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
    POLICY_FILE,
    PROGRESS_FILE,
    SAMPLES_PER_S,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    ProgressFileError,
    parse_rows,
    read_rows,
)
from kuberl_operator.spec import Progress
from kuberl_operator.status.observed import ObservedProgress
from kuberl_operator.status.progress import progress_from_row

_TAIL_BYTES = 64 * 1024  # enough for the last row of progress.jsonl, or the final record
LOG_BLOCK_BYTES = 256 * 1024
"""The most of a log read (and held) at once."""
LOG_POLL_SECONDS = 0.2
"""How often a followed log is read for what is new: a file on this machine, so cheaply and
often."""


def with_progress(
    document: dict[str, Any], run_dir: Path, final: FinalRecord | None = None
) -> dict[str, Any]:
    """The document with status.progress after the newest row of the run's progress.jsonl, taken
    in as the operator takes a row in (`progress_from_row`); the newest checkpoint is the one the
    row (or, once the trainer has ended, its final record) names."""
    path = run_dir / PROGRESS_FILE
    row = last_row(path)
    if row is None:
        return document
    observed = ObservedProgress(
        row=row,
        # Kubernetes' timestamps are whole seconds.
        time=datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0),
        last_checkpoint=(final.checkpoint if final else None) or row.get(CHECKPOINT),
        exported_policy=final.policy if final else None,
    )
    current = Progress.model_validate(document["status"].get("progress") or {})
    progress = progress_from_row(current, observed)
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


def last_row(path: Path) -> dict[str, Any] | None:
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
    return rows[-1] if rows else None


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


async def log_as_it_stands(path: Path, tail_lines: int | None) -> AsyncIterator[str]:
    """The log as it stands (its last `tail_lines` lines found from its end)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    start, end = await asyncio.to_thread(tail_span, path, tail_lines)
    async for text in read_log(path, start, end, decoder):
        yield text
    if text := decoder.decode(b"", final=True):
        yield text


async def follow_log(
    path: Path, tail_lines: int | None, no_trainer_coming: Callable[[], bool]
) -> AsyncIterator[str]:
    """The log as the trainer writes it (from its last `tail_lines` lines), until
    `no_trainer_coming()`. That is asked before the log is read, so the read after the trainer's
    exit holds its last words."""
    # A character cut between two reads is completed by the next one.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    ended = no_trainer_coming()
    offset, end = await asyncio.to_thread(tail_span, path, tail_lines)
    while True:
        async for text in read_log(path, offset, end, decoder):
            yield text
        offset = max(offset, end)
        if ended:
            if text := decoder.decode(b"", final=True):
                yield text
            return
        await asyncio.sleep(LOG_POLL_SECONDS)
        ended = no_trainer_coming()
        end = log_size(path)  # after asking: a trainer that has exited wrote all of it


async def read_exported_policy(job_dir: Path, location: str) -> bytes | None:
    """The policy file at `location`, which the job's final record names, when it lies in the
    job's own run directory `job_dir`; None when it is not there. A record is the trainer's
    output, which the job's code can write to, so a path elsewhere is never read (501: the job's
    checkpoint.uri elsewhere keeps it there)."""
    path = Path(location).resolve()
    if not path.is_relative_to(job_dir.resolve()) or path.name != POLICY_FILE:
        raise ApiError(
            501,
            "NotImplemented",
            f"the exported policy is at {location}, outside the job's run directory, where this "
            "API serves nothing from: read it there",
        )
    try:
        return await asyncio.to_thread(path.read_bytes)
    except FileNotFoundError:
        return None


def last_words(tail: str) -> str | None:
    """The trainer's last line for people in the end of its log, `log_tail` (its final record is
    for programs)."""
    lines = [
        line.strip()
        for line in tail.splitlines()
        if line.strip() and not line.startswith(FINAL_RECORD_PREFIX)
    ]
    return lines[-1] if lines else None
