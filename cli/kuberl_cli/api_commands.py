"""The REST API's client as commands: `submit`, `apply`, `jobs`, `status`, `logs`, `suspend`,
`resume`, `scale`, `delete`, `get` and `describe`, their arguments and options. Each takes
--server, --token and --namespace as one ApiOptions, declared once here, and imports the client
(kuberl_cli.client, kuberl_cli.get, kuberl_cli.submission) only when it runs, so that help and
shell completion need no import of it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kuberl_cli.manifest_commands import ManifestChanges, OptionalManifestFile
from kuberl_cli.option_groups import with_option_groups

if TYPE_CHECKING:
    from kuberl_cli.client import Client
    from kuberl_cli.views import Output


@dataclass(frozen=True)
class ApiOptions:
    """Where the kuberl API is, who asks it, and about which namespace's jobs: the options of
    every command here (an option group: kuberl_cli.option_groups)."""

    server: Annotated[
        str | None,
        typer.Option(
            help="URL of the kuberl API [default: http://127.0.0.1:8470].", envvar="KUBERL_SERVER"
        ),
    ] = None
    """The API's URL; None: the client's default, a `kuberl serve` on this machine."""
    token: Annotated[
        str | None,
        typer.Option(help="Bearer token.", envvar="KUBERL_API_TOKEN"),
    ] = None
    """The bearer token; None: requests carry none, as a server started without tokens takes
    them."""
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="The jobs' namespace [default: default]. submit defaults to the manifest's "
            "metadata.namespace, and refuses one that differs from it.",
        ),
    ] = None
    """The jobs' namespace; None: `default`, but for submit, which then takes the manifest's
    own (and so must tell a namespace given from none)."""

    def client(self) -> Client:
        """The API's client, in the namespace given, else in the default one."""
        from kuberl_cli.client import DEFAULT_NAMESPACE, Client

        namespace = DEFAULT_NAMESPACE if self.namespace is None else self.namespace
        return Client.from_options(self.server, self.token, namespace)


JobName = Annotated[
    str, typer.Argument(metavar="NAME", help="The job's name (or job/NAME).", show_default=False)
]


def _words(metavar: str, help: str) -> Any:
    """The argument of `delete`, `get` and `describe`: words naming a job as kubectl names an
    object (`job NAME`, `rljob/NAME`), which kuberl_cli.client.resource_and_name reads."""
    return Annotated[list[str], typer.Argument(metavar=metavar, help=help, show_default=False)]


GetWords = _words(
    "jobs [NAME] | policy NAME",
    "The resource type (jobs, job, rljob, rlj), then one job's name (or rljob/NAME); or policy "
    "and a job's name: its exported policy, written to a file (-o FILE).",
)
NamedJobWords = _words(
    "[job] NAME",
    "The job's name, after the resource type as kubectl takes it (job NAME, rljob/NAME) or alone.",
)
POLICY_RESOURCES = frozenset({"policy", "policies"})
"""The words by which `get` names a job's exported policy rather than the job."""


class GetOutput(StrEnum):
    """-o of get, jobs and status (kuberl_cli.views.Output, named here so that help needs no
    import of the client)."""

    json = "json"
    yaml = "yaml"
    wide = "wide"
    name = "name"


OutputOption = Annotated[
    GetOutput | None,
    typer.Option(
        "--output",
        "-o",
        help="json or yaml: the API's document; name: rljob/NAME; wide: more columns "
        "[default: the table].",
    ),
]
Watch = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="Then print a line each time a job changes, until the job (every job listed) has "
        "finished: Succeeded or Failed.",
    ),
]


@dataclass(frozen=True)
class JobListing:
    """Which jobs `get` and `jobs` list, and how they show them (an option group)."""

    phase: Annotated[str | None, typer.Option(help="Only jobs in this phase.")] = None
    """Only the jobs in this phase (Running, Succeeded, ...); None: every phase."""
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="Label selector, as in kubectl."),
    ] = None
    """Only the jobs whose labels match (`team=rl`); None: every job."""
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FORMAT|FILE",
            help="json or yaml: the API's document; name: rljob/NAME; wide: more columns "
            "[default: the table]. For get policy: the file to write [default: NAME.onnx].",
            show_default=False,
        ),
    ] = None
    """How the jobs are shown (a GetOutput; None: kubectl's table), or, for `get policy`, the
    file to write."""
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="The table without its header row.")
    ] = False
    """Whether the table goes without its header row, as kubectl's --no-headers."""
    watch: Watch = False
    """Whether to go on printing changes until the jobs have finished."""
    all_namespaces: Annotated[
        bool,
        typer.Option(
            "--all-namespaces",
            "-A",
            help="The jobs of every namespace, with a NAMESPACE column first (the API's GET "
            "/v1/jobs: the token must be allowed to list rljobs in every namespace).",
        ),
    ] = False
    """Whether to list every namespace's jobs rather than those of --namespace."""


def _output(value: GetOutput | str | None) -> Output | None:
    """The views' output of -o: one of GetOutput, else a usage error naming the option."""
    from kuberl_cli.views import Output

    if value is None:
        return None
    if value not in tuple(GetOutput):
        shown = ", ".join(output.value for output in GetOutput)
        raise typer.BadParameter(
            f"{value!r} is not one of {shown} (a FILE only with get policy)",
            param_hint="'--output' / '-o'",
        )
    return Output(str(value))


@with_option_groups
def submit(file: OptionalManifestFile = None, *, changes: ManifestChanges, api: ApiOptions) -> None:
    """Submit an RLJob manifest to the kuberl API (changed first by --set and --seed)."""
    _send("submit", file, changes, api)


@with_option_groups
def apply(file: OptionalManifestFile = None, *, changes: ManifestChanges, api: ApiOptions) -> None:
    """Create the job of an RLJob manifest, or bring the existing one to it, as kubectl apply
    does: "unchanged" when it already is; spec.suspend and spec.rolloutWorkers.replicas are
    changed as suspend, resume and scale change them; any other field that differs is refused,
    named, since the job must then be deleted and submitted again."""
    _send("apply", file, changes, api)


def _send(command: str, file: Path | None, changes: ManifestChanges, api: ApiOptions) -> None:
    from kuberl_cli import client, submission

    action = submission.submit if command == "submit" else submission.apply
    raise typer.Exit(
        client.run(
            action,
            api.client(),
            changes.file(file, command),
            api.namespace,
            changes.overrides or [],
            changes.seed,
        )
    )


@with_option_groups
def jobs(*, listing: JobListing, api: ApiOptions) -> None:
    """List the namespace's jobs (-A: every namespace's) with their phase and latest progress
    (as `get jobs`)."""
    _get(["jobs"], "jobs", listing, api)


@with_option_groups
def status(
    name: JobName, output: OutputOption = None, watch: Watch = False, *, api: ApiOptions
) -> None:
    """Show a job's phase, conditions and latest progress; with -o or -w, as `get jobs NAME`."""
    from kuberl_cli import client, get

    raise typer.Exit(client.run(get.status, api.client(), name, _output(output), watch))


@with_option_groups
def logs(
    name: JobName,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.", min=0)] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Go on printing the output as it is written, until the job ends."
        ),
    ] = False,
    *,
    api: ApiOptions,
) -> None:
    """Print a job's trainer output (on a cluster: its driver's, from the job's Ray head)."""
    from kuberl_cli import client

    # Ctrl-C ends a follow with 130 and no traceback (client.run).
    raise typer.Exit(client.run(client.logs, api.client(), name, tail, follow))


@with_option_groups
def suspend(name: JobName, *, api: ApiOptions) -> None:
    """Suspend a job: its trainer checkpoints and stops."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.set_suspended, api.client(), name, True))


@with_option_groups
def resume(name: JobName, *, api: ApiOptions) -> None:
    """Resume a suspended job from its newest checkpoint."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.set_suspended, api.client(), name, False))


@with_option_groups
def scale(
    words: NamedJobWords,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "--replicas",
            min=0,
            show_default=False,
            help="Rollout workers wanted (spec.rolloutWorkers.replicas), within the job's "
            "minReplicas and maxReplicas.",
        ),
    ],
    *,
    api: ApiOptions,
) -> None:
    """Set a job's rollout workers, as kubectl scale sets replicas. On a cluster an elastic job
    (minReplicas and maxReplicas set) is resized as it runs, another on its next attempt; a job
    of the local backend is scaled while it does not run (suspend, scale, resume)."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.scale, api.client(), words, workers))


@with_option_groups
def delete(
    words: NamedJobWords,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also remove its run directory (local backend): checkpoints, progress and "
            "exported policy. Without it they are kept, and the path is printed.",
        ),
    ] = False,
    *,
    api: ApiOptions,
) -> None:
    """Delete a job, stopping its trainer; its trained model is kept unless --purge."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.delete, api.client(), words, purge))


@with_option_groups
def get(
    words: GetWords,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="get policy: replace the file -o names if it exists."),
    ] = False,
    *,
    listing: JobListing,
    api: ApiOptions,
) -> None:
    """List jobs, or show one, as kubectl get does: a table, or -o json|yaml|wide|name. `get
    policy NAME` downloads the job's exported policy to NAME.onnx (or -o FILE)."""
    if words[0].lower() in POLICY_RESOURCES:
        _get_policy(words, overwrite, listing, api)
    if overwrite:
        raise typer.BadParameter("--overwrite is for get policy NAME -o FILE")
    _get(words, "get", listing, api)


def _get_policy(words: list[str], overwrite: bool, listing: JobListing, api: ApiOptions) -> None:
    from kuberl_cli import client, job_policy

    if len(words) != 2:
        raise typer.BadParameter("name one job: kuberl get policy NAME [-o FILE]")
    listed = listing.phase or listing.selector or listing.watch or listing.all_namespaces
    if listed or listing.no_headers:
        raise typer.BadParameter(
            "get policy takes -o FILE and --overwrite, not the options of a list of jobs"
        )
    raise typer.Exit(
        client.run(job_policy.get_policy, api.client(), words[1], listing.output, overwrite)
    )


def _get(words: list[str], command: str, listing: JobListing, api: ApiOptions) -> None:
    """`get` and `jobs` (`command`, the one typed): the job `words` name, or the list."""
    from kuberl_cli import client, get

    output = _output(listing.output)
    raise typer.Exit(
        client.run(
            get.get_named,
            api.client(),
            words,
            command,
            listing.phase,
            listing.selector,
            output,
            listing.watch,
            listing.all_namespaces,
            not listing.no_headers,  # headers
        )
    )


@with_option_groups
def describe(words: NamedJobWords, *, api: ApiOptions) -> None:
    """Show a job in detail, as kubectl describe does: its spec's essentials, phase, latest
    progress, conditions and the events of its history."""
    from kuberl_cli import client, get

    raise typer.Exit(client.run(get.describe, api.client(), words))
