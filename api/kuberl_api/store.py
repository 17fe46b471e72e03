"""The local backend's job table in SQLite: the one module that talks to the database.

One row per job: the RLJob document (status included) as JSON, the phase as a column so lists can
filter on it, and the trainer process that runs it (PID and start time, so a restarted API can tell
its own process from an unrelated one that reused the PID). The primary key (namespace, name) is
what makes a duplicate submission a 409 however many arrive at once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kuberl_contract.json_values import finite_or_none

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    namespace   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    seq         INTEGER NOT NULL,           -- submission order: the queue's order
    phase       TEXT    NOT NULL,
    document    TEXT    NOT NULL,           -- the RLJob as JSON, status included
    pid         INTEGER,                    -- the trainer's process group leader, while it runs
    pid_started REAL,                       -- its start time (seconds since the epoch)
    stopping    INTEGER NOT NULL DEFAULT 0, -- the API sent it SIGTERM on purpose (suspend)
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS jobs_by_phase ON jobs (phase, seq);
"""


@dataclass(frozen=True)
class JobRow:
    """A job as stored."""

    namespace: str
    name: str
    seq: int
    document: dict[str, Any]
    pid: int | None = None
    pid_started: float | None = None
    stopping: bool = False

    @property
    def phase(self) -> str:
        return self.document["status"]["phase"]

    def with_document(self, document: dict[str, Any]) -> JobRow:
        return replace(self, document=document)


class DuplicateJob(Exception):
    """A job with that namespace and name is already stored."""


class JobStore:
    """The job table. Used from the event loop's thread only, so one connection suffices and every
    method is a short transaction of its own."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL keeps it consistent on power loss
        self._db.executescript(SCHEMA)
        self._make_documents_strict()

    def _make_documents_strict(self) -> None:
        """Rewrites documents that earlier versions stored with NaN or Infinity in them (a status
        progress of a diverged run), so that GET .../jobs/NAME, which answers the stored text as it
        is, answers JSON."""
        suspects = self._db.execute(
            "SELECT namespace, name, document FROM jobs "
            "WHERE document LIKE '%NaN%' OR document LIKE '%Infinity%'"
        ).fetchall()
        for namespace, name, document in suspects:
            strict = _dumps(_loads(document))
            if strict != document:
                self._db.execute(
                    "UPDATE jobs SET document = ? WHERE namespace = ? AND name = ?",
                    (strict, namespace, name),
                )

    def close(self) -> None:
        self._db.close()

    def ping(self) -> None:
        self._db.execute("SELECT 1").fetchone()

    def insert(self, namespace: str, name: str, document: dict[str, Any]) -> JobRow:
        """Stores a new job at the end of the queue; DuplicateJob if the name is taken."""
        seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
        try:
            self._db.execute(
                "INSERT INTO jobs (namespace, name, seq, phase, document) VALUES (?, ?, ?, ?, ?)",
                (namespace, name, seq, document["status"]["phase"], _dumps(document)),
            )
        except sqlite3.IntegrityError:
            raise DuplicateJob(f"{namespace}/{name}") from None
        return JobRow(namespace, name, seq, document)

    def get(self, namespace: str, name: str) -> JobRow | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND name = ?", (namespace, name)
        ).fetchone()
        return _row(row) if row else None

    def get_document_json(self, namespace: str, name: str) -> str | None:
        """The stored document's JSON text, untouched (the hot path of GET .../jobs/NAME)."""
        row = self._db.execute(
            "SELECT document FROM jobs WHERE namespace = ? AND name = ?", (namespace, name)
        ).fetchone()
        return row[0] if row else None

    def update(self, row: JobRow) -> None:
        """Writes the row's document and process fields back (the row must exist)."""
        self._db.execute(
            "UPDATE jobs SET phase = ?, document = ?, pid = ?, pid_started = ?, stopping = ? "
            "WHERE namespace = ? AND name = ?",
            (
                row.phase,
                _dumps(row.document),
                row.pid,
                row.pid_started,
                int(row.stopping),
                row.namespace,
                row.name,
            ),
        )

    def delete(self, namespace: str, name: str) -> None:
        self._db.execute("DELETE FROM jobs WHERE namespace = ? AND name = ?", (namespace, name))

    def in_namespace(
        self, namespace: str, after: str | None = None, phase: str | None = None
    ) -> Iterator[JobRow]:
        """The namespace's jobs ordered by name, starting after `after`, optionally in one
        phase."""
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE namespace = ? AND name > ?"
        params: list[Any] = [namespace, after or ""]
        if phase is not None:
            sql += " AND phase = ?"
            params.append(phase)
        for row in self._db.execute(sql + " ORDER BY name", params):
            yield _row(row)

    def in_every_namespace(
        self, after: tuple[str, str] | None = None, phase: str | None = None
    ) -> Iterator[JobRow]:
        """Every namespace's jobs ordered by namespace and name, starting after the (namespace,
        name) `after`, optionally in one phase (the primary key's order: no sort)."""
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE (namespace, name) > (?, ?)"
        params: list[Any] = list(after or ("", ""))
        if phase is not None:
            sql += " AND phase = ?"
            params.append(phase)
        for row in self._db.execute(sql + " ORDER BY namespace, name", params):
            yield _row(row)

    def in_phases(self, phases: tuple[str, ...], limit: int = -1) -> list[JobRow]:
        """The first `limit` jobs (all when negative) in any of these phases, in submission order
        (the queue's order)."""
        marks = ", ".join("?" * len(phases))
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE phase IN ({marks}) ORDER BY seq LIMIT ?"
        return [_row(row) for row in self._db.execute(sql, (*phases, limit))]

    def all(self) -> list[JobRow]:
        return [_row(row) for row in self._db.execute(f"SELECT {_COLUMNS} FROM jobs")]


_COLUMNS = "namespace, name, seq, document, pid, pid_started, stopping"


def _row(row: tuple) -> JobRow:
    namespace, name, seq, document, pid, pid_started, stopping = row
    return JobRow(namespace, name, seq, _loads(document), pid, pid_started, bool(stopping))


def _dumps(document: dict[str, Any]) -> str:
    """Strict JSON: a number that is not finite (a diverged run's return) is stored as null, the
    same "no number" a client reads for a job without progress yet. (Documents are validated
    manifests plus a status: a few levels deep, so walking them recursively is safe.)"""
    return json.dumps(finite_or_none(document), allow_nan=False)


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=lambda _: None)
