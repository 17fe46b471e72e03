"""How the client commands show jobs: kubectl's table (and its wide form), `rljob/NAME`, JSON,
YAML and `kuberl describe`'s sections. Pure functions of the API's documents (and of the time
"now", for ages), so they are tested without a server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml

from kuberl_operator.constants import KIND
from kuberl_operator.spec import ConditionType
from kuberl_operator.status.phases import TERMINAL

RESOURCE_NAME = KIND.lower()
"""What `-o name` prints before the slash, as kubectl prints `pod/NAME`."""

COLUMNS = ("NAME", "PHASE", "ALGORITHM", "ENV", "ITERATION", "TIMESTEPS", "RETURN", "EVAL", "AGE")
WIDE_COLUMNS = ("RESTARTS", "PREEMPTIONS", "WORKERS", "SAMPLES/S", "COST", "CHECKPOINT")
"""Added after COLUMNS by `-o wide`, as kubectl adds its wide columns at the end (the longest,
a checkpoint's location, last)."""
NAMESPACE_COLUMN = "NAMESPACE"
"""Put before COLUMNS by `-A` (jobs of every namespace), as kubectl puts it first."""

# Conditions that tell of trouble when they hold, and those that tell of it when they do not:
# the events `describe` shows as Warning rather than Normal.
_WARNING_WHEN_TRUE = frozenset({ConditionType.FAILED, ConditionType.PREEMPTED})
_WARNING_WHEN_FALSE = frozenset(
    {
        ConditionType.SCHEDULABLE,
        ConditionType.KUBERAY_AVAILABLE,
        ConditionType.DURABLE_CHECKPOINTS,
        ConditionType.UP_TO_DATE,
    }
)


class Output(StrEnum):
    """`-o`: the output formats of `get`, `jobs` and `status`."""

    wide = "wide"
    json = "json"
    yaml = "yaml"
    name = "name"


def phase_of(job: dict[str, Any]) -> str:
    """The job's phase; Pending before the operator has given it a status (as the API's
    summaries say, and as Kubernetes says of an accepted Pod not yet started)."""
    return (job.get("status") or {}).get("phase") or "Pending"


def finished(job: dict[str, Any]) -> bool:
    """Whether the job has reached a phase it never leaves (Succeeded, Failed)."""
    return phase_of(job) in TERMINAL


def number(value: float | None) -> str:
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


def aligned(rows: list[tuple[str, ...]]) -> str:
    """Rows as kubectl prints them: each column as wide as its widest cell, three spaces apart,
    nothing cut, whatever the terminal's width or a pipe (names are what grep and xargs need)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def header(wide: bool = False, namespaces: bool = False) -> tuple[str, ...]:
    """The table's columns: `wide` adds WIDE_COLUMNS at the end, `namespaces` (-A) the
    NAMESPACE column first."""
    columns = COLUMNS + WIDE_COLUMNS if wide else COLUMNS
    return (NAMESPACE_COLUMN, *columns) if namespaces else columns


def row(
    job: dict[str, Any], wide: bool = False, now: datetime | None = None, namespaces: bool = False
) -> tuple[str, ...]:
    """The job's cells under header(wide, namespaces)."""
    cells = _cells(job, wide, now)
    return (job["metadata"].get("namespace") or "-", *cells) if namespaces else cells


def _cells(job: dict[str, Any], wide: bool, now: datetime | None) -> tuple[str, ...]:
    state = job.get("status") or {}
    progress = state.get("progress") or {}
    trainer = job["spec"]["trainer"]
    cells = (
        job["metadata"]["name"],
        phase_of(job),
        trainer["algorithm"],
        trainer["env"],
        str(progress.get("iteration", 0)),
        f"{progress.get('timesteps', 0):,}",
        number(progress.get("episodeReturnMean")),
        number(progress.get("evaluationReturnMean")),
        age(job["metadata"].get("creationTimestamp"), now),
    )
    if not wide:
        return cells
    workers = job["spec"].get("rolloutWorkers") or {}
    samples = progress.get("samplesPerSecond")
    return (
        *cells,
        str(state.get("restarts", 0)),
        str(state.get("preemptions", 0)),
        f"{workers.get('replicas', 0)}x{workers.get('envsPerWorker', 1)}",
        "-" if samples is None else f"{samples:,.0f}",
        _dollars((state.get("cost") or {}).get("dollars")),
        progress.get("lastCheckpoint") or "-",
    )


def table(
    jobs: list[dict[str, Any]],
    wide: bool = False,
    now: datetime | None = None,
    namespaces: bool = False,
    headers: bool = True,
) -> str:
    """The jobs' table; without its header row unless `headers` (--no-headers), the columns then
    as wide as the rows alone need."""
    rows = [row(job, wide, now, namespaces) for job in jobs]
    return aligned([header(wide, namespaces), *rows] if headers else rows)


def name_line(job: dict[str, Any]) -> str:
    return f"{RESOURCE_NAME}/{job['metadata']['name']}"


def as_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2)


def as_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip("\n")


def status_text(job: dict[str, Any]) -> str:
    """`kuberl status NAME`: phase, the job, its latest progress and the conditions that hold."""
    name = job["metadata"]["name"]
    state = job.get("status") or {}
    progress = state.get("progress") or {}
    trainer = job["spec"]["trainer"]
    lines = [
        f"{name}: {phase_of(job)}",
        f"  job                {trainer['algorithm']} on {trainer['env']}",
        f"  iteration          {progress.get('iteration', 0)}",
        f"  timesteps          {progress.get('timesteps', 0):,}",
        f"  episode return     {number(progress.get('episodeReturnMean'))}",
    ]
    if progress.get("evaluationReturnMean") is not None:
        lines.append(f"  evaluation return  {number(progress['evaluationReturnMean'])}")
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
    return "\n".join(lines)


# --- describe -----------------------------------------------------------------------------------


def describe(job: dict[str, Any], now: datetime | None = None) -> str:
    """`kuberl describe job NAME`, laid out as `kubectl describe`: the object's metadata, the
    spec's essentials, the status with its progress, cost and conditions, and Events: the job's
    history as its conditions' transitions tell it, oldest first."""
    metadata, spec = job["metadata"], job["spec"]
    state = job.get("status") or {}
    trainer, workers = spec["trainer"], spec.get("rolloutWorkers") or {}
    learner = spec.get("learner") or {}
    progress = state.get("progress") or {}
    created = metadata.get("creationTimestamp")
    stop = " or ".join(f"{key}>={value}" for key, value in (trainer.get("stop") or {}).items())
    lines = _fields(
        0,
        ("Name", metadata["name"]),
        ("Namespace", metadata.get("namespace") or "-"),
        ("Labels", _pairs(metadata.get("labels"))),
        ("Annotations", _pairs(metadata.get("annotations"))),
        ("API Version", job.get("apiVersion", "-")),
        ("Kind", job.get("kind", KIND)),
        ("Created", f"{created} ({age(created, now)} ago)" if created else "-"),
    )
    lines.append("Spec:")
    lines += _fields(
        2,
        ("Algorithm", trainer["algorithm"]),
        ("Env", trainer["env"]),
        ("Stop", stop or "-"),
        ("Seed", _shown(trainer.get("seed"))),
        (
            "Rollout Workers",
            f"{workers.get('replicas', 0)} x {workers.get('envsPerWorker', 1)} envs",
        ),
        ("Learner GPUs", _shown(learner.get("gpus", 0))),
        ("Suspend", _shown(spec.get("suspend", False))),
    )
    lines.append("Status:")
    lines += _fields(
        2,
        ("Phase", phase_of(job)),
        ("Attempt", _shown(state.get("attempt", 0))),
        ("Restarts", _shown(state.get("restarts", 0))),
        ("Preemptions", _shown(state.get("preemptions", 0))),
        ("Start Time", _shown(state.get("startTime"))),
        ("Completion Time", _shown(state.get("completionTime"))),
    )
    lines.append("  Progress:")
    lines += _fields(
        4,
        ("Iteration", _shown(progress.get("iteration", 0))),
        ("Timesteps", f"{progress.get('timesteps', 0):,}"),
        ("Episode Return Mean", number(progress.get("episodeReturnMean"))),
        ("Evaluation Return Mean", number(progress.get("evaluationReturnMean"))),
        ("Samples/s", _samples(progress.get("samplesPerSecond"))),
        ("Last Checkpoint", _shown(progress.get("lastCheckpoint"))),
        ("Exported Policy", _shown(progress.get("exportedPolicy"))),
        ("Last Update Time", _shown(progress.get("lastUpdateTime"))),
    )
    lines += _cost_lines(state.get("cost"), (spec.get("budget") or {}).get("maxDollars"))
    conditions = state.get("conditions") or []
    lines.append("  Conditions:" + ("" if conditions else "  <none>"))
    if conditions:
        rows = [("Type", "Status", "Reason", "Last Transition Time", "Message")]
        rows.append(tuple("-" * len(cell) for cell in rows[0]))
        rows += [
            (
                c["type"],
                c["status"],
                c.get("reason", ""),
                c.get("lastTransitionTime", ""),
                _one_line(c.get("message", "")),
            )
            for c in conditions
        ]
        lines += ["    " + line for line in aligned(rows).splitlines()]
    history = events(job, now)
    lines.append("Events:" + ("  <none>" if not history else ""))
    if history:
        rows = [("Type", "Reason", "Age", "Message")]
        rows.append(tuple("-" * len(cell) for cell in rows[0]))
        lines += ["  " + line for line in aligned(rows + history).splitlines()]
    return "\n".join(lines)


def _cost_lines(cost: dict[str, Any] | None, budget: float | None) -> list[str]:
    """The Cost section: dollars split spot and on-demand, what spot saved against on-demand
    nodes, GPU- and worker-hours, the dollars when the target was reached, the budget."""
    budget_shown = "<none>" if budget is None else _dollars(budget)
    if not cost:
        return (
            ["  Cost:  <none>"] if budget is None else ["  Cost:", f"    Budget:  {budget_shown}"]
        )
    dollars, equivalent = cost.get("dollars", 0.0), cost.get("onDemandEquivalentDollars", 0.0)
    if budget is not None:
        budget_shown += f" ({dollars / budget:.0%} spent)"
    saved = _dollars(equivalent - dollars)
    rows = _fields(
        4,
        ("Dollars", _dollars(dollars)),
        ("Spot", _dollars(cost.get("spotDollars", 0.0))),
        ("On-Demand", _dollars(cost.get("onDemandDollars", 0.0))),
        ("All On-Demand", f"{_dollars(equivalent)} (spot saved {saved})"),
        ("GPU Hours", f"{cost.get('gpuHours', 0.0):,.2f}"),
        ("Worker Hours", f"{cost.get('workerHours', 0.0):,.2f}"),
        ("Dollars At Target", _dollars(cost.get("dollarsAtTarget"))),
        ("Budget", budget_shown),
    )
    return ["  Cost:", *rows]


def _dollars(value: float | None) -> str:
    """$1,234.56; a cost under a cent shows its first figures ($0.0031), not $0.00."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if value == 0 or abs(value) >= 0.01 else f"${value:.2g}"


def events(job: dict[str, Any], now: datetime | None = None) -> list[tuple[str, str, str, str]]:
    """The job's history, oldest first, as (type, reason, age, message): its submission, then
    each condition's last transition that tells something (one that holds, or a warning one that
    does not). Conditions that hold for one reason tell one event, at the earliest of their
    transitions, their messages joined (Ready and Progressing both say DriverRunning of a running
    job). Conditions keep only their last transition, so this is the latest story of each, as
    Kubernetes' own events are kept only for a while."""
    created = job["metadata"].get("creationTimestamp")
    happened: list[tuple[str, str, str, str]] = []
    if created:
        happened.append((created, "Normal", "Submitted", "the job was stored"))
    told: dict[tuple[str, str], int] = {}  # (type, reason) -> its event's index in `happened`
    for condition in (job.get("status") or {}).get("conditions") or []:
        kind, holds = condition["type"], condition["status"] == "True"
        warning = (kind in _WARNING_WHEN_TRUE and holds) or (
            kind in _WARNING_WHEN_FALSE and condition["status"] == "False"
        )
        if not (holds or warning):
            continue
        event_type = "Warning" if warning else "Normal"
        reason, message = condition.get("reason", ""), _one_line(condition.get("message", ""))
        when = condition.get("lastTransitionTime") or ""
        if (event_type, reason) in told:
            index = told[event_type, reason]
            first, _, _, said = happened[index]
            joined = "; ".join(part for part in dict.fromkeys((said, message)) if part)
            happened[index] = (min(first, when, key=_instant), event_type, reason, joined)
            continue
        told[event_type, reason] = len(happened)
        happened.append((when, event_type, reason, message))
    happened.sort(key=lambda event: _instant(event[0]))
    return [(kind, reason, age(_seconds(when), now), msg) for when, kind, reason, msg in happened]


def _instant(timestamp: str) -> datetime:
    """A Kubernetes timestamp (with or without fractions of a second) as a time, to sort by."""
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def _seconds(timestamp: str) -> str | None:
    """The timestamp to the second, as age() reads it (None when there is none)."""
    if not timestamp:
        return None
    return _instant(timestamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields(indent: int, *pairs: tuple[str, str]) -> list[str]:
    """`Label:  value` lines, the values aligned, as kubectl describe prints them."""
    width = max(len(label) for label, _ in pairs) + 2
    return [f"{' ' * indent}{label + ':':<{width}}{value}" for label, value in pairs]


def _pairs(mapping: dict[str, str] | None) -> str:
    if not mapping:
        return "<none>"
    return ", ".join(f"{key}={value}" for key, value in sorted(mapping.items()))


def _shown(value: Any) -> str:
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _samples(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _one_line(text: str) -> str:
    return " ".join(text.split())
