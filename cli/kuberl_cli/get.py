"""`kuberl get jobs [NAME]`, `kuberl describe job NAME` and their older names (`jobs`, `status`):
the API's jobs shown as kubectl shows its objects, in a table, as JSON, YAML or `rljob/NAME`, once
or, with `-w`, a line per change until the watched job finishes; of one namespace (-n), or, with
`-A`, of every namespace (GET /v1/jobs), the table then with a NAMESPACE column first.

The API serves no watch stream (it refuses `watch=true` with 400), so `-w` polls it every
WATCH_INTERVAL_S seconds and prints what changed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from kuberl_cli import views
from kuberl_cli.client import EXIT_REFUSED, Client, ClientError, job_name, resource_and_name
from kuberl_cli.views import Output

WATCH_INTERVAL_S = 1.0
"""How often `-w` asks the API: progress rows come once per training iteration."""


def list_document(
    client: Client, phase: str | None, selector: str | None, every_namespace: bool = False
) -> dict[str, Any]:
    """The namespace's RLJobList (every namespace's with `every_namespace`), every chunk of it in
    one document."""
    path = client.every_namespace_path() if every_namespace else client.jobs_path()
    items, token = [], None
    while True:
        chunk = client.json(
            "GET",
            path,
            params={"phase": phase, "labelSelector": selector, "limit": 500, "continue": token},
        )
        items += chunk["items"]
        token = chunk.get("metadata", {}).get("continue")
        if not token:
            return {**chunk, "metadata": {}, "items": items}


def get(
    client: Client,
    name: str | None,
    phase: str | None,
    selector: str | None,
    output: Output | None,
    watch: bool = False,
    every_namespace: bool = False,
    headers: bool = True,
) -> None:
    """Prints one job or the namespace's jobs (every namespace's with `every_namespace`) in the
    `output` format (the table without one, and without its header row unless `headers`); with
    `watch`, then a line per change until the job (every job listed) has finished."""
    if name and (phase or selector):
        raise ClientError("a job NAME and --phase or --selector do not go together", EXIT_REFUSED)
    if name and every_namespace:
        # As kubectl: a name means one object, and an object lives in one namespace.
        raise ClientError(
            "a job NAME and -A/--all-namespaces do not go together: name the job's namespace "
            "with -n NAMESPACE",
            EXIT_REFUSED,
        )
    if watch:
        return watch_jobs(
            client, name, phase, selector, output, every_namespace=every_namespace, headers=headers
        )
    if name:
        job = client.json("GET", client.jobs_path(name))
        print(_shown([job], output, document=job, headers=headers))
        return
    listed = list_document(client, phase, selector, every_namespace)
    if not listed["items"] and output in (None, Output.wide):
        where = "any namespace" if every_namespace else f"namespace {client.namespace}"
        # Without headers the output is for a script: nothing on stdout, as kubectl does.
        print(f"no jobs in {where}", file=sys.stdout if headers else sys.stderr)
        return
    if output is Output.name and not listed["items"]:
        return
    shown = _shown(listed["items"], output, listed, namespaces=every_namespace, headers=headers)
    print(shown)


def get_named(client: Client, words: list[str], command: str, *listing: Any) -> None:
    """get, for the job `words` name as kubectl names it (`jobs NAME`, `rljob/NAME`) or for the
    list (`jobs`): `kuberl get` and `kuberl jobs`, `command` being the one typed, for the errors
    to name. `listing`: get's arguments after the job's name."""
    get(client, resource_and_name(words, command), *listing)


def _shown(
    jobs: list[dict[str, Any]],
    output: Output | None,
    document: dict[str, Any],
    namespaces: bool = False,
    headers: bool = True,
) -> str:
    if output is Output.json:
        return views.as_json(document)
    if output is Output.yaml:
        return views.as_yaml(document)
    if output is Output.name:
        return "\n".join(views.name_line(job) for job in jobs)  # no namespace, as kubectl -A
    return views.table(jobs, wide=output is Output.wide, namespaces=namespaces, headers=headers)


def status(client: Client, name: str, output: Output | None, watch: bool = False) -> None:
    """`kuberl status NAME` (or job/NAME): the summary; with -o, as `get jobs NAME -o ...` shows
    it."""
    name = job_name(name, "status")
    if output is None and not watch:
        print(views.status_text(client.json("GET", client.jobs_path(name))))
        return
    get(client, name, None, None, output, watch)


def describe(client: Client, words: list[str]) -> None:
    """`kuberl describe job NAME` (rljob/NAME, or NAME alone): the job in detail, as
    views.describe lays it out."""
    name = job_name(words, "describe")
    print(views.describe(client.json("GET", client.jobs_path(name))))


# --- watch --------------------------------------------------------------------------------------


def watch_jobs(
    client: Client,
    name: str | None,
    phase: str | None,
    selector: str | None,
    output: Output | None,
    interval_s: float = WATCH_INTERVAL_S,
    emit: Callable[[str], None] = print,
    every_namespace: bool = False,
    headers: bool = True,
) -> None:
    """Prints the job(s), then a line (a document with -o json/yaml) each time one changes, and
    a job's last line when it is deleted or leaves the selection. Returns once the named job has
    finished, or, for a list, once every job listed has (and there is one): a watch that ends
    by itself is one a script can wait on. Ctrl-C stops it earlier. `every_namespace` (-A):
    the jobs of every namespace, the table with a NAMESPACE column first; `headers`: whether
    the table starts with its header row."""
    lines = (
        _TableLines(output is Output.wide, every_namespace, headers)
        if output in (None, Output.wide)
        else None
    )
    last: dict[tuple[str, str], dict[str, Any]] = {}
    shown: dict[tuple[str, str], object] = {}
    while True:
        current = _watched(client, name, phase, selector, bool(last), every_namespace)
        changed = [job for job in current if shown.get(_identity(job)) != _key(job, output)]
        names = {_identity(job) for job in current}
        gone = [_as_deleted(last.pop(n)) for n in list(last) if n not in names]
        for job in gone:
            shown.pop(_identity(job))
        for job in current:
            shown[_identity(job)], last[_identity(job)] = _key(job, output), job
        if lines is not None:
            for line in lines.of(changed + gone):
                emit(line)
        else:
            for job in changed + gone:
                emit(_document_text(job, output))
        sys.stdout.flush()
        if (current and all(views.finished(job) for job in current)) or (name and not current):
            return
        time.sleep(interval_s)


class _TableLines:
    """The watch's table: the header once, then rows padded to the widest cell seen so far (a
    row printed cannot be realigned, as with kubectl get -w)."""

    def __init__(self, wide: bool, namespaces: bool = False, headers: bool = True) -> None:
        self.wide, self.namespaces, self.started = wide, namespaces, not headers
        self.widths = [0] * len(views.header(wide, namespaces))

    def of(self, jobs: list[dict[str, Any]]) -> list[str]:
        rows = [views.row(job, self.wide, namespaces=self.namespaces) for job in jobs]
        heading = [] if self.started else [views.header(self.wide, self.namespaces)]
        self.widths = [
            max([w, *(len(r[i]) for r in heading + rows)]) for i, w in enumerate(self.widths)
        ]
        self.started = True
        return [
            "   ".join(cell.ljust(w) for cell, w in zip(r, self.widths, strict=True)).rstrip()
            for r in heading + rows
        ]


def _watched(
    client: Client,
    name: str | None,
    phase: str | None,
    selector: str | None,
    known: bool,
    every_namespace: bool = False,
) -> list[dict[str, Any]]:
    """The watched jobs now: the named one ([] once deleted, after it was seen) or the list."""
    if not name:
        return list_document(client, phase, selector, every_namespace)["items"]
    try:
        return [client.json("GET", client.jobs_path(name))]
    except ClientError as exc:
        if known and exc.http_status == 404:  # deleted while watched, which ends the watch
            return []
        raise


def _identity(job: dict[str, Any]) -> tuple[str, str]:
    """Who a job is: its namespace and name (two namespaces may each have a job `a`, under -A)."""
    return job["metadata"].get("namespace") or "", job["metadata"]["name"]


def _key(job: dict[str, Any], output: Output | None) -> object:
    """What must differ for a job to be shown again: its table row but the age and the cost
    (which go up by themselves while it runs) for a table, and the whole document for the other
    outputs."""
    if output not in (None, Output.wide):
        return json.dumps(job, sort_keys=True)
    ticking = {views.header(wide=True).index(column) for column in ("AGE", "COST")}
    return tuple(cell for i, cell in enumerate(views.row(job, wide=True)) if i not in ticking)


def _document_text(job: dict[str, Any], output: Output | None) -> str:
    if output is Output.json:
        return json.dumps(job)  # one document per line, as jq reads a stream
    if output is Output.yaml:
        return "---\n" + views.as_yaml(job)
    return views.name_line(job)


def _as_deleted(job: dict[str, Any]) -> dict[str, Any]:
    """The job's last state, its phase shown as Deleted."""
    return {**job, "status": {**(job.get("status") or {}), "phase": "Deleted"}}
