"""The REST API's client as commands: `submit`, `jobs`, `status`, `logs`, `suspend`, `resume`,
`scale`, `delete`, `get` and `describe`, their arguments and options. Each takes --server, --token
and --namespace as one ApiOptions, declared once here, and imports the client (kuberl_cli.client,
kuberl_cli.get) only when it runs, so that help and shell completion need no import of it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kuberl_cli.manifest_commands import ManifestFile
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


JobName = Annotated[str, typer.Argument(help="The job's name.", show_default=False)]


def _words(metavar: str, help: str) -> Any:
    """The argument of `delete`, `get` and `describe`: words naming a job as kubectl names an
    object (`job NAME`, `rljob/NAME`), which kuberl_cli.client.resource_and_name reads."""
    return Annotated[list[str], typer.Argument(metavar=metavar, help=help, show_default=False)]


GetWords = _words(
    "jobs [NAME]", "The resource type (jobs, job, rljob, rlj), then one job's name (or rljob/NAME)."
)
NamedJobWords = _words(
    "job NAME", "The resource type (job, rljob, rlj) and the job's name (or rljob/NAME)."
)
DeleteWords = _words(
    "[job] NAME",
    "The job's name, after the resource type as kubectl takes it (job NAME, rljob/NAME) or alone.",
)


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
    output: OutputOption = None
    """How the jobs are shown; None: kubectl's table."""
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


def _output(value: GetOutput | None) -> Output | None:
    from kuberl_cli.views import Output

    return None if value is None else Output(value.value)


@with_option_groups
def submit(file: ManifestFile, *, api: ApiOptions) -> None:
    """Submit an RLJob manifest to the kuberl API."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.submit, api.client(), file, api.namespace))


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
    words: DeleteWords,
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
def get(words: GetWords, *, listing: JobListing, api: ApiOptions) -> None:
    """List jobs, or show one, as kubectl get does: a table, or -o json|yaml|wide|name."""
    _get(words, "get", listing, api)


def _get(words: list[str], command: str, listing: JobListing, api: ApiOptions) -> None:
    """`get` and `jobs` (`command`, the one typed): the job `words` name, or the list."""
    from kuberl_cli import client, get

    raise typer.Exit(
        client.run(
            get.get_named,
            api.client(),
            words,
            command,
            listing.phase,
            listing.selector,
            _output(listing.output),
            listing.watch,
            listing.all_namespaces,
        )
    )


@with_option_groups
def describe(words: NamedJobWords, *, api: ApiOptions) -> None:
    """Show a job in detail, as kubectl describe does: its spec's essentials, phase, latest
    progress, conditions and the events of its history."""
    from kuberl_cli import client, get

    raise typer.Exit(client.run(get.describe, api.client(), words))
