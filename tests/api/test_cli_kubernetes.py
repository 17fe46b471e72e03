"""The client's kubectl verbs against `kuberl serve --backend kubernetes`, over real HTTP, with the
jobs as RLJobs in the emulated Kubernetes API: every verb and output format, their statuses written
as the operator writes them (its status patch, its lifecycle's conditions), `-w` ending when the
operator writes Succeeded, and `-A` for a caller RBAC allows everywhere, refused to one it allows in
one namespace only."""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import yaml
from apiserver import ApiClient, ApiServer, small_job
from test_kubernetes_backend import cluster  # noqa: F401 (the emulated cluster's fixture)

from kuberl_operator.reconciler import status_patch
from kuberl_operator.spec import Phase, Progress, Reason, RLJobStatus
from kuberl_operator.status.lifecycle import Entered, lifecycle_conditions, merge_conditions
from testkit import ROOT, run_kuberl

pytestmark = pytest.mark.timeout(180)

CHECKPOINT = "s3://rl-checkpoints/team-a/trained/checkpoint-00000005"


def as_user(server: ApiServer, token: str) -> dict[str, str]:
    """The environment a user sets; a narrow terminal, which tables must not care about."""
    return {**os.environ, "KUBERL_SERVER": server.url, "KUBERL_API_TOKEN": token, "COLUMNS": "40"}


@pytest.fixture
def alice(api):
    """The CLI as alice, who may do anything with rljobs in team-a (and nothing elsewhere)."""
    return lambda *args: run_kuberl(*args, env=as_user(api, "alice-token"))


def operator_status(
    phase: Phase, previous: RLJobStatus | None = None, entered: Entered | None = None
) -> dict:
    """The merge patch of the status subresource the operator writes for a job of generation 1
    entering `phase` in its first attempt (kuberl_operator.reconciler.status_patch: null fields
    included, which the merge patch deletes), with a few iterations of progress."""
    previous = previous or RLJobStatus()
    now = datetime.now(UTC).replace(microsecond=0)
    wanted = lifecycle_conditions(phase, previous, 1, entered)
    status = RLJobStatus(
        phase=phase,
        conditions=merge_conditions(wanted, previous, now, 1)[0],
        progress=Progress(
            iteration=5,
            timesteps=640,
            episode_return_mean=31.5,
            samples_per_second=1234.5,
            last_checkpoint=CHECKPOINT,
            last_update_time=now,
        ),
        attempt=1,
        ray_cluster="trained-1",
        start_time=previous.start_time or now,
        completion_time=now if phase == Phase.SUCCEEDED else None,
        observed_generation=1,
    )
    return status_patch(status)


def write_status(cluster, namespace: str, name: str, patch: dict) -> None:  # noqa: F811
    cluster.patch(cluster.rljobs(namespace, name) + "/status", patch)


def running(cluster, namespace: str, name: str) -> RLJobStatus:  # noqa: F811
    """Writes the status of a job whose driver trains (as the operator would) and returns it."""
    entered = Entered(Reason.DRIVER_RUNNING, "the driver of attempt 1 is training")
    patch = operator_status(Phase.RUNNING, entered=entered)
    write_status(cluster, namespace, name, patch)
    return RLJobStatus.model_validate(patch["status"])


def succeeded(cluster, namespace: str, name: str, previous: RLJobStatus) -> None:  # noqa: F811
    entered = Entered(Reason.DRIVER_SUCCEEDED, "stop condition met: timesteps >= 640")
    write_status(cluster, namespace, name, operator_status(Phase.SUCCEEDED, previous, entered))


def created(cluster, namespace: str, name: str, **labels: str) -> dict:  # noqa: F811
    """An RLJob put into the cluster directly, as `kubectl apply` would."""
    job = small_job(name, **labels)
    job["metadata"]["namespace"] = namespace
    return cluster.create(cluster.rljobs(namespace), job)


def submitted(alice, cluster, tmp_path) -> None:  # noqa: F811
    """team-a/trained, submitted with `kuberl submit` (it lands in the cluster as submitted: no
    status, the operator's) and Running; team-a/waiting, put there directly, not seen yet."""
    manifest = small_job("trained", team="rl")
    manifest["metadata"]["namespace"] = "team-a"
    path = tmp_path / "trained.yaml"
    path.write_text(yaml.safe_dump(manifest))
    out = alice("submit", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("trained submitted (no status yet) to ")
    assert out.stdout.endswith(" in namespace team-a\n")
    stored = cluster.get(cluster.rljobs("team-a", "trained"))
    assert stored["spec"] == manifest["spec"] and "status" not in stored
    created(cluster, "team-a", "waiting", team="rl")
    running(cluster, "team-a", "trained")


def test_submit_then_get_in_every_output(alice, api, cluster, tmp_path):  # noqa: F811
    submitted(alice, cluster, tmp_path)
    api_client = ApiClient(api.url, "alice-token")
    document = api_client.job("trained", "team-a")
    assert document["status"]["phase"] == "Running"

    # get: the table, and the API's documents as JSON and YAML.
    table = alice("get", "jobs", "-n", "team-a")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PHASE",
        "ALGORITHM",
        "ENV",
        "ITERATION",
        "TIMESTEPS",
        "RETURN",
        "EVAL",
        "AGE",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["trained"][1:8] == ["Running", "PPO", "CartPole-v1", "5", "640", "31.5", "-"]
    assert rows["waiting"][1:5] == ["Pending", "PPO", "CartPole-v1", "0"]  # not seen yet
    ageless = [line.split()[:-1] for line in table.stdout.splitlines()]
    assert [line.split()[:-1] for line in alice("jobs", "-n", "team-a").stdout.splitlines()] == (
        ageless
    )

    as_json = alice("get", "jobs", "trained", "-n", "team-a", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == document
    as_yaml = alice("get", "rljob/trained", "-n", "team-a", "-o", "yaml")
    assert yaml.safe_load(as_yaml.stdout) == document
    status = alice("status", "trained", "-n", "team-a", "-o", "json")
    assert json.loads(status.stdout) == document
    summary = alice("status", "trained", "-n", "team-a").stdout
    assert summary.startswith("trained: Running\n") and CHECKPOINT in summary
    listed = api_client.request("GET", api_client.jobs("team-a")).json()
    assert json.loads(alice("get", "jobs", "-n", "team-a", "-o", "json").stdout) == listed

    wide = alice("get", "jobs", "trained", "-n", "team-a", "-o", "wide").stdout.splitlines()
    header = ["RESTARTS", "PREEMPTIONS", "WORKERS", "SAMPLES/S", "COST", "CHECKPOINT"]
    assert wide[0].split()[9:] == header
    assert wide[1].split()[9:] == ["0", "0", "0x4", "1,234", "-", CHECKPOINT]
    names = alice("get", "jobs", "-n", "team-a", "-o", "name").stdout.splitlines()
    assert sorted(names) == ["rljob/trained", "rljob/waiting"]


def test_describe_suspend_resume_delete_and_refusals(alice, api, cluster, tmp_path):  # noqa: F811
    submitted(alice, cluster, tmp_path)

    # describe: the operator's conditions and the events they tell.
    described = alice("describe", "job", "trained", "-n", "team-a")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].split() == ["Name:", "trained"]
    assert lines[1].split() == ["Namespace:", "team-a"]
    assert lines[2].split() == ["Labels:", "team=rl"]
    assert ["Phase:", "Running"] in [line.split() for line in lines]
    assert ["Last", "Checkpoint:", CHECKPOINT] in [line.split() for line in lines]
    conditions = lines[lines.index("  Conditions:") + 3 :]
    assert [line.split()[:2] for line in conditions[:5]] == [
        ["Ready", "True"],
        ["Progressing", "True"],
        ["Complete", "False"],
        ["Failed", "False"],
        ["Suspended", "False"],
    ]
    events = [line.split() for line in lines[lines.index("Events:") + 3 :]]
    # Submitted, then what Ready and Progressing say of the running driver; no warning.
    assert events[0][:2] == ["Normal", "Submitted"] and len(events) > 1
    assert {tuple(event[:2]) for event in events[1:]} == {("Normal", "DriverRunning")}

    # suspend and resume write spec.suspend in the cluster.
    out = alice("suspend", "trained", "-n", "team-a")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "trained suspending (Running)\n"
    assert cluster.get(cluster.rljobs("team-a", "trained"))["spec"]["suspend"] is True
    out = alice("resume", "trained", "-n", "team-a")
    assert out.returncode == 0 and out.stdout == "trained resumed (Running)\n", out.stderr
    assert cluster.get(cluster.rljobs("team-a", "trained"))["spec"]["suspend"] is False

    # logs: without the operator's log relay the API says how to read them instead.
    logs = alice("logs", "trained", "-n", "team-a")
    assert logs.returncode == 1 and "HTTP 501" in logs.stderr and "kubectl" in logs.stderr

    # RBAC's refusals read as the API's, and nothing changes.
    bob = run_kuberl("delete", "job", "trained", "-n", "team-a", env=as_user(api, "bob-token"))
    assert bob.returncode == 1
    assert 'HTTP 403: bob cannot delete rljobs "trained" in namespace "team-a"' in bob.stderr
    elsewhere = alice("get", "jobs", "-n", "team-b")
    assert elsewhere.returncode == 1
    assert 'alice cannot list rljobs in namespace "team-b"' in elsewhere.stderr

    # delete: gone from the cluster.
    out = alice("delete", "job", "waiting", "-n", "team-a")
    assert out.returncode == 0 and out.stdout == "waiting deleted\n", out.stderr
    assert cluster.get(cluster.rljobs("team-a", "waiting"), check=False)["code"] == 404
    missing = alice("get", "job", "waiting", "-n", "team-a")
    assert missing.returncode == 1
    assert 'HTTP 404: job "waiting" not found in namespace "team-a"' in missing.stderr


def test_watch_ends_when_the_operator_writes_succeeded(api, cluster):  # noqa: F811
    created(cluster, "team-a", "trained")
    previous = running(cluster, "team-a", "trained")
    command = [sys.executable, "-m", "kuberl_cli.main", "get", "jobs", "trained", "-n", "team-a"]
    watch = subprocess.Popen(
        [*command, "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=as_user(api, "alice-token"),
    )
    try:
        header, first = watch.stdout.readline(), watch.stdout.readline()
        assert header.split()[:2] == ["NAME", "PHASE"], header
        assert first.split()[:2] == ["trained", "Running"], first
        assert watch.poll() is None  # Running is no end
        succeeded(cluster, "team-a", "trained", previous)
        rest, errors = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0, errors
    assert [line.split()[:2] for line in rest.splitlines()] == [["trained", "Succeeded"]]


def test_all_namespaces_for_a_caller_allowed_everywhere_only(api, cluster):  # noqa: F811
    jobs = [("team-a", "trained"), ("team-b", "trained"), ("team-b", "other")]
    for namespace, name in jobs:
        created(cluster, namespace, name, team=namespace)
    dave = {"env": as_user(api, "dave-token")}  # may list rljobs in every namespace

    table = run_kuberl("get", "jobs", "-A", **dave)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
    assert sorted(tuple(line.split()[:3]) for line in lines[1:]) == [
        ("team-a", "trained", "Pending"),
        ("team-b", "other", "Pending"),
        ("team-b", "trained", "Pending"),
    ]
    wide = run_kuberl("jobs", "--all-namespaces", "-o", "wide", "-l", "team=team-b", **dave)
    lines = wide.stdout.splitlines()
    assert lines[0].split()[0] == "NAMESPACE" and lines[0].split()[-1] == "CHECKPOINT"
    assert sorted(line.split()[:2] for line in lines[1:]) == [
        ["team-b", "other"],
        ["team-b", "trained"],
    ]
    names = run_kuberl("get", "jobs", "-A", "-o", "name", **dave).stdout.splitlines()
    assert sorted(names) == ["rljob/other", "rljob/trained", "rljob/trained"]  # as kubectl -A
    listed = ApiClient(api.url, "dave-token").request("GET", "/v1/jobs").json()
    assert json.loads(run_kuberl("get", "jobs", "-A", "-o", "json", **dave).stdout) == listed

    # Watched in every namespace: two jobs called `trained` are two jobs; ends once all have.
    statuses = {job: running(cluster, *job) for job in jobs}
    for job, previous in statuses.items():
        succeeded(cluster, *job, previous)
    watched = run_kuberl("get", "jobs", "-A", "-w", **dave)
    assert watched.returncode == 0, watched.stderr
    rows = sorted(tuple(line.split()[:3]) for line in watched.stdout.splitlines()[1:])
    assert rows == sorted((namespace, name, "Succeeded") for namespace, name in jobs)

    # alice may list team-a only: every namespace is refused, not narrowed to hers.
    refused = run_kuberl("get", "jobs", "-A", env=as_user(api, "alice-token"))
    assert refused.returncode == 1 and refused.stdout == ""
    assert "HTTP 403: alice cannot list rljobs at the cluster scope" in refused.stderr
    named = run_kuberl("get", "jobs", "trained", "-A", **dave)
    assert named.returncode == 1
    assert "a job NAME and -A/--all-namespaces do not go together" in named.stderr
