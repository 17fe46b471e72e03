"""The client's kubectl verbs against a real `kuberl serve` (local backend; test_cli_kubernetes.py
has them on the kubernetes backend): `get`, `describe`, `delete`, `-o`, `-w`, `-A` (GET /v1/jobs),
a manifest's own namespace, `--version`, `-h` and help that shows its defaults and
environment variables; and the API's answer to `watch=true` on both backends."""

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from apiserver import TOKEN, ApiClient, ApiServer, serving, small_job

from testkit import ROOT, run_kuberl

pytestmark = pytest.mark.timeout(180)


def as_user(server) -> dict[str, str]:
    """The environment a user sets; a narrow terminal, which tables must not care about."""
    return {**os.environ, "KUBERL_SERVER": server.url, "KUBERL_API_TOKEN": TOKEN, "COLUMNS": "40"}


@pytest.fixture
def queued(queue_api):
    """The CLI against a server whose jobs stay Pending (no trainer runs)."""
    return lambda *args: run_kuberl(*args, env=as_user(queue_api))


@pytest.fixture
def kuberl(local_api):
    """The CLI against a server that trains its jobs."""
    return lambda *args: run_kuberl(*args, env=as_user(local_api))


def test_get_prints_the_apis_documents_in_every_output(queued, queue_client):
    long_name = "a-job-whose-name-is-longer-than-the-terminal-is-wide"
    for name in ("fmt-a", long_name):
        assert queue_client.submit(small_job(name, team="fmt")).status_code == 201
    listed = queue_client.request("GET", queue_client.jobs(), params={"labelSelector": "team=fmt"})

    as_json = queued("get", "jobs", "-l", "team=fmt", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == listed.json()
    as_yaml = queued("jobs", "-l", "team=fmt", "-o", "yaml")
    assert yaml.safe_load(as_yaml.stdout) == listed.json()
    one = queued("get", "job", "fmt-a", "-o", "json")
    assert json.loads(one.stdout) == queue_client.job("fmt-a")
    assert yaml.safe_load(queued("status", "fmt-a", "-o", "yaml").stdout) == queue_client.job(
        "fmt-a"
    )

    names = queued("get", "rljobs", "-l", "team=fmt", "-o", "name").stdout.splitlines()
    assert names == [f"rljob/{long_name}", "rljob/fmt-a"]
    assert queued("get", "rljob/fmt-a", "-o", "name").stdout == "rljob/fmt-a\n"

    # Piped to a 40-column "terminal": nothing cut, the wide columns after AGE.
    table = queued("get", "jobs", "-l", "team=fmt").stdout.splitlines()
    assert table[0].split() == [
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
    assert [line.split()[:2] for line in table[1:]] == [
        [long_name, "Pending"],
        ["fmt-a", "Pending"],
    ]
    wide = queued("get", "jobs", "fmt-a", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[8:] == [
        "AGE",
        "RESTARTS",
        "PREEMPTIONS",
        "WORKERS",
        "SAMPLES/S",
        "COST",
        "CHECKPOINT",
    ]
    assert wide[1].split()[:2] == ["fmt-a", "Pending"] and wide[1].split()[9:12] == [
        "0",
        "0",
        "0x4",
    ]


def test_describe_lays_a_job_out_as_kubectl_does(queued, queue_client):
    assert queue_client.submit(small_job("described", team="describe")).status_code == 201
    out = queued("describe", "job", "described")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["Name:", "described"]
    assert lines[1].split() == ["Namespace:", "default"]
    assert lines[2].split() == ["Labels:", "team=describe"]
    for section in ("Spec:", "Status:", "  Progress:", "  Conditions:", "Events:"):
        assert section in lines, section
    assert "Phase:" in out.stdout and "Pending" in out.stdout
    conditions = lines[lines.index("  Conditions:") + 1].split()
    assert conditions == ["Type", "Status", "Reason", "Last", "Transition", "Time", "Message"]
    events = lines[lines.index("Events:") + 1 :]
    assert events[0].split() == ["Type", "Reason", "Age", "Message"]
    assert events[2].split()[:2] == ["Normal", "Submitted"]
    # The queue's story, from the Progressing condition: waiting for a trainer slot.
    assert any("waiting for a free trainer slot" in line for line in events[3:])

    assert queued("describe", "rljob/described").returncode == 0
    missing = queued("describe", "job", "nobody")
    assert missing.returncode == 1
    assert 'HTTP 404: job "nobody" not found in namespace "default"' in missing.stderr


def test_delete_takes_the_resource_type_or_the_name_alone(queued, queue_client):
    for name in ("gone-1", "gone-2", "gone-3"):
        assert queue_client.submit(small_job(name)).status_code == 201
    for args in (["delete", "job", "gone-1"], ["delete", "rljob/gone-2"], ["delete", "gone-3"]):
        out = queued(*args)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"{args[-1].removeprefix('rljob/')} deleted"), out.stdout
    for name in ("gone-1", "gone-2", "gone-3"):
        assert queued("get", "job", name).returncode == 1

    bare = queued("delete", "job")
    assert bare.returncode == 1 and "name the job: kuberl delete job NAME" in bare.stderr


def test_unknown_resources_and_mixed_arguments_are_clear_errors(queued):
    pods = queued("get", "pods")
    assert pods.returncode == 1 and 'unknown resource type "pods"' in pods.stderr
    both = queued("get", "jobs", "some-job", "-l", "a=b")
    assert both.returncode == 1 and "do not go together" in both.stderr
    named = queued("get", "jobs", "some-job", "-A")
    assert named.returncode == 1
    assert "a job NAME and -A/--all-namespaces do not go together" in named.stderr
    assert "-n NAMESPACE" in named.stderr


def test_all_namespaces_lists_every_namespaces_jobs(tmp_path):
    """GET /v1/jobs on the local backend (a server of its own: no other test's jobs), where a
    token may do everything: every namespace's jobs by namespace and name, filtered and paged as
    a namespace's list; and `-A`, with the NAMESPACE column first."""
    env = {"KUBERL_API_TOKEN": TOKEN}
    with serving(tmp_path / "data", "--max-running", "0", env=env) as server:
        client = ApiClient(server.url, TOKEN)
        cli = {"env": as_user(server)}
        empty = run_kuberl("get", "jobs", "-A", **cli)
        assert empty.returncode == 0 and empty.stdout == "no jobs in any namespace\n"
        jobs = [("team-y", "a"), ("default", "c"), ("team-x", "b"), ("team-x", "a")]
        for namespace, name in jobs:
            job = small_job(name, team=namespace)
            job["spec"]["suspend"] = name == "b"
            assert client.submit(job, namespace).status_code == 201

        def listed(**params) -> list[tuple[str, str]]:
            response = client.request("GET", "/v1/jobs", params=params)
            assert response.status_code == 200, response.text
            return [
                (i["metadata"]["namespace"], i["metadata"]["name"])
                for i in response.json()["items"]
            ]

        everything = [("default", "c"), ("team-x", "a"), ("team-x", "b"), ("team-y", "a")]
        assert listed() == everything
        assert listed(labelSelector="team in (team-x,team-y)", phase="Pending") == [
            ("team-x", "a"),
            ("team-y", "a"),
        ]
        assert listed(phase="Suspended") == [("team-x", "b")]
        seen, token = [], None
        while True:
            params = {"limit": 1, **({"continue": token} if token else {})}
            page = client.request("GET", "/v1/jobs", params=params).json()
            seen += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
            token = page["metadata"].get("continue")
            if not token:
                break
        assert seen == everything  # a page ends on team-x/a: the next one starts at team-x/b

        # A namespace's token is not one of this list's, nor the other way round.
        namespaced = client.request("GET", client.jobs("team-x"), params={"limit": 1}).json()
        cluster_wide = client.request("GET", "/v1/jobs", params={"limit": 1}).json()
        for path, token in (
            ("/v1/jobs", namespaced["metadata"]["continue"]),
            (client.jobs("team-x"), cluster_wide["metadata"]["continue"]),
        ):
            bad = client.request("GET", path, params={"continue": token})
            assert bad.status_code == 400, bad.text
            assert bad.json()["details"]["causes"][0]["field"] == "continue"
        assert ApiClient(server.url).request("GET", "/v1/jobs").status_code == 401

        table = run_kuberl("get", "jobs", "-A", **cli)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
        assert [tuple(line.split()[:3]) for line in lines[1:]] == [
            ("default", "c", "Pending"),
            ("team-x", "a", "Pending"),
            ("team-x", "b", "Suspended"),
            ("team-y", "a", "Pending"),
        ]
        names = run_kuberl("jobs", "-A", "-l", "team=team-x", "-o", "name", **cli).stdout
        assert names == "rljob/a\nrljob/b\n"  # as kubectl -A -o name: no namespace
        as_json = run_kuberl("get", "jobs", "-A", "-o", "json", **cli)
        assert json.loads(as_json.stdout) == client.request("GET", "/v1/jobs").json()


def test_submit_honours_the_manifests_namespace(queued, queue_client, tmp_path):
    job = small_job("placed")
    job["metadata"]["namespace"] = "team-x"
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))

    out = queued("submit", manifest)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("placed submitted (") and "in namespace team-x" in out.stdout
    assert queue_client.job("placed", namespace="team-x")["metadata"]["namespace"] == "team-x"

    elsewhere = queued("submit", manifest, "-n", "team-y")
    assert elsewhere.returncode == 1
    assert 'metadata.namespace is "team-x", which does not match --namespace "team-y"' in (
        elsewhere.stderr
    )
    assert queue_client.request("GET", queue_client.jobs("team-y", "placed")).status_code == 404

    again = queued("submit", manifest, "-n", "team-x")  # the same namespace twice is fine
    assert again.returncode == 1 and 'already exists in namespace "team-x"' in again.stderr


def test_watch_prints_each_change_until_the_jobs_finish(kuberl, local_api, tmp_path):
    client = ApiClient(local_api.url, TOKEN)
    for name in ("watched-a", "watched-b"):
        assert client.submit(small_job(name, team="watch")).status_code == 201

    listed = kuberl("get", "jobs", "-l", "team=watch", "-w")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "PHASE"]
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == len({tuple(row[:-1]) for row in rows})  # a line per change, no repeats
    for name in ("watched-a", "watched-b"):
        mine = [row for row in rows if row[0] == name]
        assert mine[-1][1] == "Succeeded", lines
        iterations = [int(row[4]) for row in mine]
        assert iterations == sorted(iterations) and iterations[-1] > 0, lines

    # Already finished: the one line, then the watch ends by itself.
    named = kuberl("status", "watched-a", "-w", "-o", "json")
    assert named.returncode == 0, named.stderr
    assert [json.loads(line) for line in named.stdout.splitlines()] == [client.job("watched-a")]


def test_watch_ends_with_the_job_it_watches(local_api, tmp_path):
    """A watch started before the job trains follows it to the end, in its own process."""
    client = ApiClient(local_api.url, TOKEN)
    assert client.submit(small_job("followed", timesteps=2048)).status_code == 201
    watch = subprocess.run(
        [sys.executable, "-m", "kuberl_cli.main", "get", "job", "followed", "-w"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=as_user(local_api),
    )
    assert watch.returncode == 0, watch.stderr
    phases = [line.split()[1] for line in watch.stdout.splitlines()[1:]]
    assert phases[-1] == "Succeeded" and len(phases) >= 2, watch.stdout
    assert client.phase("followed") == "Succeeded"


def test_a_watched_job_that_is_deleted_ends_the_watch(queue_api, queue_client):
    """A job that waits (no trainer runs) keeps its watch going; deleting it prints its last
    row as Deleted and ends the watch."""
    assert queue_client.submit(small_job("waiting")).status_code == 201
    command = [sys.executable, "-m", "kuberl_cli.main", "get", "job", "waiting", "-w", "-o", "wide"]
    watch = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=as_user(queue_api),
    )
    try:
        header, first = watch.stdout.readline(), watch.stdout.readline()
        assert header.split()[-1] == "CHECKPOINT" and first.split()[:2] == ["waiting", "Pending"]
        assert watch.poll() is None  # Pending is no end
        assert queue_client.request("DELETE", queue_client.jobs(name="waiting")).status_code == 200
        rest, errors = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0, errors
    assert [line.split()[:2] for line in rest.splitlines()] == [["waiting", "Deleted"]]


def test_the_api_refuses_watch_rather_than_ignoring_it(queue_client, kube_api, tmp_path):
    """Both backends: 400 naming the parameter (before anything else is asked: the kubernetes
    backend answers it even to a caller without a token)."""
    local = queue_client.request("GET", queue_client.jobs(), params={"watch": "true"})
    kube_api.register_crd()
    kubernetes = ApiServer(
        tmp_path / "unused", "--backend", "kubernetes", "--kube-server", kube_api.url
    )
    with kubernetes:
        anonymous = ApiClient(kubernetes.url)
        on_cluster = anonymous.request("GET", anonymous.jobs(), params={"watch": "true"})
    for answer in (local, on_cluster):
        assert answer.status_code == 400, answer.text
        status = answer.json()
        assert status["reason"] == "BadRequest"
        assert [cause["field"] for cause in status["details"]["causes"]] == ["watch"]
        assert "kuberl get jobs -w" in status["message"]
    unwatched = queue_client.request("GET", queue_client.jobs(), params={"watch": "false"})
    assert unwatched.status_code == 200


API_COMMANDS = (
    "submit",
    "apply",
    "jobs",
    "status",
    "logs",
    "suspend",
    "resume",
    "scale",
    "delete",
    "get",
    "describe",
)
"""Every command that talks to the API, each taking --server, --token and -n."""


def test_every_api_command_takes_the_same_server_token_and_namespace():
    """The three options are declared once (kuberl_cli.api_commands.ApiOptions): every command
    shows them last, with the same help, environment variables and defaults."""

    def api_options(command: str) -> str:
        shown = run_kuberl(command, "--help")
        assert shown.returncode == 0, shown.stderr
        # the same words, whatever the width of the command's column of option names
        return " ".join(shown.stdout[shown.stdout.index("--server") :].split())

    shown = {command: api_options(command) for command in API_COMMANDS}
    assert len(set(shown.values())) == 1, shown
    assert shown["get"] == (
        "--server <str> URL of the kuberl API [default: http://127.0.0.1:8470]. "
        "[env var: KUBERL_SERVER] --token <str> Bearer token. [env var: KUBERL_API_TOKEN] "
        "-n, --namespace <str> The jobs' namespace [default: default]. submit defaults to the "
        "manifest's metadata.namespace, and refuses one that differs from it. "
        "-h, --help Show this message and exit."
    )


def test_version_short_help_and_help_that_keeps_defaults_and_env_vars(tmp_path):
    out = run_kuberl("--version")
    assert out.returncode == 0 and out.stdout == f"kuberl {version('kuberl')}\n"

    for command in ([], ["get"], ["describe"], ["submit"], ["train"]):
        short, long = run_kuberl(*command, "-h"), run_kuberl(*command, "--help")
        assert short.returncode == 0 and short.stdout == long.stdout, command

    submit = " ".join(run_kuberl("submit", "--help").stdout.split())
    assert "[env var: KUBERL_SERVER]" in submit and "[env var: KUBERL_API_TOKEN]" in submit
    assert "[default: http://127.0.0.1:8470]" in submit
    train = " ".join(run_kuberl("train", "--help").stdout.split())
    assert "[default: runs/<job name>]" in train and "--set PATH=VALUE" in train
    assert "[default: default]" in " ".join(run_kuberl("jobs", "--help").stdout.split())

    top = run_kuberl("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    # Completion as the installed command's script asks the shell for it.
    kuberl = [str(Path(sys.executable).with_name("kuberl"))]
    scripts = {
        shell: subprocess.run([*kuberl, "completion", shell], capture_output=True, text=True)
        for shell in ("bash", "zsh", "fish", "powershell")
    }
    for shell, script in scripts.items():
        assert script.returncode == 0 and "_KUBERL_COMPLETE" in script.stdout, shell
    assert "complete -o default -F _kuberl_completion kuberl" in scripts["bash"].stdout
    completing = {
        "_KUBERL_COMPLETE": "complete_bash",
        "COMP_WORDS": "kuberl des",
        "COMP_CWORD": "1",
    }
    words = subprocess.run(kuberl, capture_output=True, text=True, env=os.environ | completing)
    assert words.stdout.split() == ["describe"]
    for command in ("get", "describe", "delete", "jobs", "status", "logs", "submit", "train"):
        assert f"  {command} " in top, command
