"""How the client shows jobs, as pure functions of the API's documents: the table and its wide
form, and the events `kuberl describe` tells a job's history with."""

from datetime import UTC, datetime

from kuberl_cli import views

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)


def condition(kind: str, status: str, reason: str, when: str, message: str = "") -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
    }


def job(name: str = "sweep-1", **status) -> dict:
    return {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name, "creationTimestamp": "2026-01-02T11:00:00Z"},
        "spec": {
            "trainer": {"algorithm": "PPO", "env": "CartPole-v1"},
            "rolloutWorkers": {"replicas": 2, "envsPerWorker": 8},
        },
        "status": status,
    }


def test_a_table_is_never_cut_and_wide_adds_columns_after_age():
    long = job("x" * 60, phase="Running", progress={"lastCheckpoint": "s3://b/" + "c" * 80})
    lines = views.table([long, job()], wide=True, now=NOW).splitlines()
    assert lines[0].split() == [*views.COLUMNS, *views.WIDE_COLUMNS]
    assert lines[1].split()[0] == "x" * 60 and lines[1].split()[-1] == "s3://b/" + "c" * 80
    assert lines[1].split()[8:12] == ["1h", "0", "0", "2x8"]
    assert lines[2].split()[:2] == ["sweep-1", "Pending"]
    assert views.name_line(long) == "rljob/" + "x" * 60


def test_all_namespaces_puts_the_namespace_column_first():
    placed = job("sweep-1", phase="Running")
    placed["metadata"]["namespace"] = "team-a"
    lines = views.table([placed], wide=True, now=NOW, namespaces=True).splitlines()
    assert lines[0].split() == ["NAMESPACE", *views.COLUMNS, *views.WIDE_COLUMNS]
    assert lines[1].split()[:3] == ["team-a", "sweep-1", "Running"]
    assert views.table([placed], now=NOW).splitlines()[1].split()[0] == "sweep-1"


def test_events_tell_the_history_oldest_first_with_warnings():
    failed = job(
        phase="Failed",
        conditions=[
            condition("Ready", "False", "Failed", "2026-01-02T11:30:00Z", "gave up"),
            condition("Failed", "True", "BackoffLimitExceeded", "2026-01-02T11:30:00Z", "gave up"),
            condition("Progressing", "True", "DriverRunning", "2026-01-02T11:10:00.5Z", "training"),
            condition("Complete", "False", "NotComplete", "2026-01-02T11:00:00Z"),
            condition("Schedulable", "False", "Unschedulable", "2026-01-02T11:05:00Z", "no GPU"),
        ],
    )
    assert views.events(failed, NOW) == [
        ("Normal", "Submitted", "1h", "the job was stored"),
        ("Warning", "Unschedulable", "55m", "no GPU"),
        ("Normal", "DriverRunning", "50m", "training"),
        ("Warning", "BackoffLimitExceeded", "30m", "gave up"),
    ]


def test_conditions_that_hold_for_one_reason_tell_one_event():
    running = job(
        phase="Running",
        conditions=[
            condition(
                "Ready", "True", "DriverRunning", "2026-01-02T11:20:00Z", "attempt 1 is training"
            ),
            condition("Progressing", "True", "DriverRunning", "2026-01-02T11:10:00Z", "started"),
            condition("Complete", "False", "NotComplete", "2026-01-02T11:00:00Z"),
        ],
    )
    assert views.events(running, NOW) == [
        ("Normal", "Submitted", "1h", "the job was stored"),
        ("Normal", "DriverRunning", "50m", "attempt 1 is training; started"),
    ]
    # The same words twice are said once.
    running["status"]["conditions"][1]["message"] = "attempt 1 is training"
    assert views.events(running, NOW)[1][3] == "attempt 1 is training"


def test_describe_without_status_says_none():
    lines = views.describe(job(), NOW).splitlines()
    assert "  Conditions:  <none>" in lines
    events = lines[lines.index("Events:") + 1 :]
    assert [line.split() for line in events] == [
        ["Type", "Reason", "Age", "Message"],
        ["----", "------", "---", "-------"],
        ["Normal", "Submitted", "1h", "the", "job", "was", "stored"],
    ]


COST = {
    "dollars": 1.25,
    "spotDollars": 0.25,
    "onDemandDollars": 1.0,
    "onDemandEquivalentDollars": 2.0,
    "gpuHours": 1.5,
    "workerHours": 6.0,
    "dollarsAtTarget": 0.75,
}


def test_describe_shows_the_cost_split_the_saving_and_the_budget():
    priced = job(cost=COST)
    priced["spec"]["budget"] = {"maxDollars": 5}
    lines = views.describe(priced, NOW).splitlines()
    section = lines[lines.index("  Cost:") + 1 : lines.index("  Conditions:  <none>")]
    assert [line.split(":", 1)[0].strip() for line in section] == [
        "Dollars",
        "Spot",
        "On-Demand",
        "All On-Demand",
        "GPU Hours",
        "Worker Hours",
        "Dollars At Target",
        "Budget",
    ]
    shown = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in section}
    assert shown["Dollars"] == "$1.25"
    assert shown["All On-Demand"] == "$2.00 (spot saved $0.75)"
    assert shown["Budget"] == "$5.00 (25% spent)"
    assert shown["Dollars At Target"] == "$0.75"

    assert "  Cost:  <none>" in views.describe(job(), NOW).splitlines()


def test_wide_shows_the_cost_even_under_a_cent():
    cost = views.header(wide=True).index("COST")
    assert views.row(job(cost=COST), wide=True, now=NOW)[cost] == "$1.25"
    assert views.row(job(cost={**COST, "dollars": 0.0031}), wide=True, now=NOW)[cost] == "$0.0031"
    assert views.row(job(), wide=True, now=NOW)[cost] == "-"
