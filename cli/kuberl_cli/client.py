"""`kuberl submit`, `jobs`, `status`, `logs`, `suspend`, `resume`, `delete`: the REST API from a
terminal, in the spirit of kubectl.

Standard library HTTP only, so the client needs nothing beyond the CLI's own dependencies. Every
failure ends in one clear line on stderr (the server's message, and each bad field on a line of
its own) and a non-zero exit status: 1 when the server refused, 2 when the file is missing, 3 when
the server cannot be reached.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kuberl_operator.constants import KEPT_FILES_ANNOTATION

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_ENV, TOKEN_ENV = "KUBERL_SERVER", "KUBERL_API_TOKEN"
EXIT_OK, EXIT_REFUSED, EXIT_NO_FILE, EXIT_UNREACHABLE = 0, 1, 2, 3


class ClientError(Exception):
    """A request that did not succeed; `exit_code` says how, the message says why."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Client:
    server: str
    token: str | None
    namespace: str

    @classmethod
    def from_options(cls, server: str | None, token: str | None, namespace: str) -> Client:
        server = server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
        return cls(server.rstrip("/"), token or os.environ.get(TOKEN_ENV) or None, namespace)

    def jobs_path(self, name: str = "", action: str = "") -> str:
        path = f"/v1/namespaces/{urllib.parse.quote(self.namespace, safe='')}/jobs"
        path += f"/{urllib.parse.quote(name, safe='')}" if name else ""
        return path + (f"/{action}" if action else "")

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> bytes:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(url, data=body, method=method)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise ClientError(_refusal(exc.code, exc.read()), EXIT_REFUSED) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(
                f"cannot reach the kuberl API at {self.server}: {reason} (is `kuberl serve` "
                f"running? set --server or {SERVER_ENV})",
                EXIT_UNREACHABLE,
            ) from None

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return json.loads(self.call(method, path, **kwargs))


def _refusal(code: int, body: bytes) -> str:
    """The server's Status message and causes, one per line."""
    try:
        status = json.loads(body)
        message = status["message"]
        causes = (status.get("details") or {}).get("causes") or []
    except (ValueError, KeyError, TypeError):
        return f"HTTP {code}: {body.decode(errors='replace').strip()[:500]}"
    if causes:
        lines = [f"  {c['field'] or '(document)'}: {c['message']}" for c in causes]
        return "\n".join([f"HTTP {code}: {status.get('reason', 'Error')}", *lines])
    return f"HTTP {code}: {message}"


def run(action: Any, *args: Any) -> int:
    """Runs a command body, turning ClientError into its message and exit status."""
    try:
        action(*args)
    except ClientError as exc:
        print(f"kuberl: {exc}", file=sys.stderr)
        return exc.exit_code
    return EXIT_OK


# --- commands -----------------------------------------------------------------------------------


def submit(client: Client, file: Path) -> None:
    if not file.is_file():
        raise ClientError(f"{file}: no such file", EXIT_NO_FILE)
    job = client.json(
        "POST",
        client.jobs_path(),
        body=file.read_bytes(),
        content_type="application/yaml",
    )
    print(f"{job['metadata']['name']} submitted ({phase_of(job)}) to {client.server}")


def jobs(client: Client, phase: str | None, selector: str | None) -> None:
    items, token = [], None
    while True:
        page = client.json(
            "GET",
            client.jobs_path(),
            params={"phase": phase, "labelSelector": selector, "limit": 500, "continue": token},
        )
        items += page["items"]
        token = page.get("metadata", {}).get("continue")
        if not token:
            break
    if not items:
        print(f"no jobs in namespace {client.namespace}")
        return
    header = (
        "NAME",
        "PHASE",
        "ALGORITHM",
        "ENV",
        "ITERATION",
        "TIMESTEPS",
        "RETURN",
        "EVAL",
        "AGE",
    )
    rows = [header]
    for job in items:
        progress = (job.get("status") or {}).get("progress") or {}
        rows.append(
            (
                job["metadata"]["name"],
                phase_of(job),
                job["spec"]["trainer"]["algorithm"],
                job["spec"]["trainer"]["env"],
                str(progress.get("iteration", 0)),
                f"{progress.get('timesteps', 0):,}",
                _number(progress.get("episodeReturnMean")),
                _number(progress.get("evaluationReturnMean")),
                age(job["metadata"].get("creationTimestamp")),
            )
        )
    print(aligned(rows))


def aligned(rows: list[tuple[str, ...]]) -> str:
    """Rows as kubectl prints them: each column as wide as its widest cell, three spaces apart,
    nothing cut, whatever the terminal's width or a pipe (names are what grep and xargs need)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def status(client: Client, name: str) -> None:
    job = client.json("GET", client.jobs_path(name))
    state = job.get("status") or {}
    progress = state.get("progress") or {}
    trainer = job["spec"]["trainer"]
    lines = [
        f"{name}: {phase_of(job)}",
        f"  job                {trainer['algorithm']} on {trainer['env']}",
        f"  iteration          {progress.get('iteration', 0)}",
        f"  timesteps          {progress.get('timesteps', 0):,}",
        f"  episode return     {_number(progress.get('episodeReturnMean'))}",
    ]
    if progress.get("evaluationReturnMean") is not None:
        lines.append(f"  evaluation return  {_number(progress['evaluationReturnMean'])}")
    if progress.get("samplesPerSecond") is not None:
        lines.append(f"  samples/s          {progress['samplesPerSecond']:,.0f}")
    for key, label in (
        ("lastCheckpoint", "checkpoint"),
        ("exportedPolicy", "policy"),
        ("lastUpdateTime", "updated"),
    ):
        if progress.get(key):
            lines.append(f"  {label:<18} {progress[key]}")
    for key, label in (("startTime", "started"), ("completionTime", "finished")):
        if state.get(key):
            lines.append(f"  {label:<18} {state[key]}")
    holding = [c for c in state.get("conditions") or [] if c.get("status") == "True"]
    for condition in holding:
        lines.append(f"  {condition['type']:<18} {condition['reason']}: {condition['message']}")
    print("\n".join(lines))


def logs(client: Client, name: str, tail: int | None) -> None:
    text = client.call("GET", client.jobs_path(name, "logs"), params={"tailLines": tail})
    sys.stdout.write(text.decode("utf-8", errors="replace"))


def set_suspended(client: Client, name: str, suspend: bool) -> None:
    job = client.json("POST", client.jobs_path(name, "suspend" if suspend else "resume"))
    verb = "suspending" if suspend else "resumed"
    print(f"{name} {verb} ({phase_of(job)})")


def delete(client: Client, name: str, purge: bool = False) -> None:
    params = {"purge": "true"} if purge else None
    job = client.json("DELETE", client.jobs_path(name), params=params)
    kept = (job.get("metadata", {}).get("annotations") or {}).get(KEPT_FILES_ANNOTATION)
    if kept:
        print(f"{name} deleted; its run directory (checkpoints, progress) is kept in {kept}")
    else:
        print(f"{name} deleted")


# --- formatting ---------------------------------------------------------------------------------


def phase_of(job: dict[str, Any]) -> str:
    return (job.get("status") or {}).get("phase") or "Unknown"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def age(created: str | None, now: datetime | None = None) -> str:
    """`42s`, `5m`, `3h`, `2d`, as kubectl shows it."""
    if not created:
        return "-"
    then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(int(((now or datetime.now(UTC)) - then).total_seconds()), 0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
