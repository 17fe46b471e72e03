"""`kuberl`: the user's front door. Each command imports its component only when it runs, so
`kuberl validate` stays fast and works without the training stack loaded."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="kuberl",
    help="Reinforcement learning jobs on Kubernetes, or on this machine.",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help: rich markup would take `[default: ...]` and `[env var: ...]` for its own tags
    # and drop them.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        print(f"kuberl {version('kuberl')}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed kuberl version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Reinforcement learning jobs on Kubernetes, or on this machine."""


COMPLETE_VAR = "_KUBERL_COMPLETE"
"""The environment variable through which the shell asks `kuberl` for completions (click's
`_<PROG>_COMPLETE`)."""

ManifestFile = Annotated[Path, typer.Argument(help="RLJob manifest (YAML).", show_default=False)]
NoEnv = Annotated[
    bool,
    typer.Option(
        "--no-env",
        help="Check the manifest only, without making the env: a module:Class env imports and "
        "runs its module, so use this for files you do not trust.",
    ),
]


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


@app.command()
def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell.", show_default=False)],
) -> None:
    """Print the shell's completion script, as kubectl completion does: `source <(kuberl
    completion bash)`, or add that line to ~/.bashrc (--install-completion does it for you)."""
    from typer.completion import get_completion_script

    # The same script --show-completion prints, without guessing the shell from the parent
    # process (which fails under scripts and CI).
    print(get_completion_script(prog_name="kuberl", complete_var=COMPLETE_VAR, shell=shell.value))


@app.command()
def validate(file: ManifestFile, no_env: NoEnv = False) -> None:
    """Check an RLJob manifest: one line per problem, naming the field and the reason. The env is
    made once to check it (an unknown id, an unsupported space), unless --no-env."""
    from kuberl_cli.validate import validate_command

    raise typer.Exit(validate_command(file, check_env=not no_env))


@app.command()
def render(file: ManifestFile, no_env: NoEnv = False) -> None:
    """Print, as YAML, every object the operator would create for an RLJob manifest (checked as
    validate checks it)."""
    from kuberl_cli.render import render_command

    raise typer.Exit(render_command(file, check_env=not no_env))


@app.command()
def train(
    file: ManifestFile,
    run_dir: Annotated[
        Path | None,
        typer.Option(help="Where progress.jsonl and checkpoints go [default: runs/<job name>]."),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port.", min=1, max=65535)
    ] = None,
    tensorboard: Annotated[
        bool,
        typer.Option(
            "--tensorboard",
            help="Write TensorBoard event files to <run dir>/tensorboard/ "
            "(as spec.trainer.tensorboard: true).",
        ),
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Set spec.trainer.seed; the run directory then defaults to "
            "runs/<job name>-seed<N>, so that the runs of a seed sweep do not resume each other.",
            min=0,
            show_default=False,
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="PATH=VALUE",
            help="Change the manifest before it is checked, as many times as needed: PATH is "
            "dotted (spec.trainer.hyperparameters.learning_rate, or below spec: "
            "trainer.stop.timesteps; a number picks a list's item), VALUE is YAML (0.001, true, "
            "[64, 64], a string).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Train an RLJob on this machine, resuming from its newest checkpoint."""
    from kuberl_cli.train import train_command

    raise typer.Exit(
        train_command(
            file,
            run_dir=run_dir,
            metrics_port=metrics_port,
            tensorboard=tensorboard,
            overrides=overrides or [],
            seed=seed,
        )
    )


@app.command()
def plot(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR",
            help="Run directories (each with its progress.jsonl).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The figure: .png or .svg.")
    ] = Path("plot.png"),
) -> None:
    """Draw the learning curves of runs in one figure: return against env steps, evaluation
    dashed."""
    from kuberl_cli.plot import plot_command

    raise typer.Exit(plot_command(run_dirs, output))


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


@app.command()
def evaluate(
    path: Annotated[
        str,
        typer.Argument(
            metavar="RUN_DIR|CHECKPOINT|EXPORTED_FILE",
            help="A run directory (its newest checkpoint), a checkpoint location, one "
            "checkpoint (a folder or an object store's URI), or a file of kuberl export.",
            show_default=False,
        ),
    ],
    episodes: Annotated[int, typer.Option(help="Episodes to play.", min=1, max=10_000)] = 10,
    seed: Annotated[int, typer.Option(help="Episode k's env is reset with seed + k.", min=0)] = 0,
    stochastic: Annotated[
        bool, typer.Option("--stochastic", help="Sample actions instead of the greedy ones.")
    ] = False,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="text, or json: one object.")
    ] = OutputFormat.text,
    video: Annotated[
        str | None,
        typer.Option(
            metavar="FILE.mp4|FILE.gif",
            help="Record the episodes to this video, the env rendering rgb_array frames.",
            show_default=False,
        ),
    ] = None,
    video_episodes: Annotated[
        int | None,
        typer.Option(
            help="Episodes --video records, the first ones (default: all of them, at most 10).",
            min=1,
            show_default=False,
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            metavar="ID",
            help="Play on this env instead of the file's (a gymnasium id, or a module:Class of "
            "yours), without the file's envConfig and wrappers.",
            show_default=False,
        ),
    ] = None,
    trust_env_code: Annotated[
        bool,
        typer.Option(
            "--trust-env-code",
            help="Make the file's env even where it runs code the file names (a module:Class "
            "env or wrapper): only for a file you trust.",
        ),
    ] = False,
) -> None:
    """Play a trained policy on seeded episodes of its env: mean ± std of the returns, and each
    episode's return and length; with --video, a recording of them."""
    from kuberl_cli.evaluate import evaluate_command

    raise typer.Exit(
        evaluate_command(
            path,
            episodes,
            seed,
            stochastic,
            output.value,
            video,
            video_episodes,
            env,
            trust_env_code,
        )
    )


@app.command()
def export(
    path: Annotated[
        str,
        typer.Argument(
            metavar="RUN_DIR|CHECKPOINT",
            help="A run directory (its newest checkpoint), a checkpoint location, or one "
            "checkpoint: a folder or an object store's URI.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The file: .onnx (ONNX, opset 18) or .pt (TorchScript).",
            show_default=False,
        ),
    ],
    trust_env_code: Annotated[
        bool,
        typer.Option(
            "--trust-env-code",
            help="For a checkpoint of an older kuberl, which records no spaces: make its env to "
            "learn them even where it runs code the checkpoint names. Only for one you trust.",
        ),
    ] = False,
) -> None:
    """Write a trained policy's greedy actions as one file that runs without kuberl: observation
    in, action out, with the normalization, the network and the action's mode inside."""
    from kuberl_cli.export import export_command

    raise typer.Exit(export_command(path, output, trust_env_code))


class BackendName(StrEnum):
    local = "local"
    kubernetes = "kubernetes"


@app.command()
def serve(
    backend: Annotated[
        BackendName, typer.Option(help="local: trainer processes here; kubernetes: RLJobs.")
    ] = BackendName.local,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8080,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Local backend: jobs database, manifests, run directories and logs "
            "[default: ~/.local/share/kuberl/api]."
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="Local backend: accepted bearer tokens, one per line (also KUBERL_API_TOKEN)."
        ),
    ] = None,
    max_running: Annotated[
        int | None,
        typer.Option(
            help="Local backend: trainers running at once; more jobs wait Pending "
            "[default: half the cores].",
            min=0,
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Kubernetes backend: kubeconfig file [default: in-cluster config, "
            "else KUBECONFIG or ~/.kube/config]."
        ),
    ] = None,
    kube_server: Annotated[
        str | None, typer.Option(help="Kubernetes backend: API server URL (overrides the config).")
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Proxies (IP addresses or networks, comma-separated; * for any) whose "
            "X-Forwarded-Proto and X-Forwarded-For are believed [default: 127.0.0.1,::1].",
            envvar="KUBERL_FORWARDED_ALLOW_IPS",
            show_default=False,
        ),
    ] = None,
    secure_cookies: Annotated[
        bool,
        typer.Option(
            "--secure-cookies",
            help="Mark the status page's session cookie Secure on every request (every browser "
            "reaches the API over HTTPS).",
            envvar="KUBERL_SECURE_COOKIES",
        ),
    ] = False,
) -> None:
    """Serve the REST API: submit, list, follow, suspend, resume and delete jobs over HTTP."""
    from kuberl_cli.serve import serve_command

    raise typer.Exit(
        serve_command(
            backend.value,
            host,
            port,
            data_dir,
            token_file,
            max_running,
            kubeconfig,
            kube_server,
            forwarded_allow_ips,
            secure_cookies,
        )
    )


@app.command()
def explain(
    algorithm: Annotated[
        str | None,
        typer.Argument(
            help="An algorithm (PPO, DQN, ...); without one, the list.", show_default=False
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Each description whole, not its first sentence.")
    ] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The README's table of defaults instead.")
    ] = False,
) -> None:
    """List an algorithm's hyperparameters: type, range, default, meaning, where to set each, and
    the Stable-Baselines3 and RLlib names that map to it."""
    from kuberl_cli.explain import explain_command

    raise typer.Exit(explain_command(algorithm, full=full, markdown=markdown))


# --- The REST API's client ----------------------------------------------------------------------

Server = Annotated[
    str | None,
    typer.Option(
        help="URL of the kuberl API [default: http://127.0.0.1:8080].",
        envvar="KUBERL_SERVER",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(help="Bearer token.", envvar="KUBERL_API_TOKEN", show_default=False),
]
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="The jobs' namespace.")]
JobName = Annotated[str, typer.Argument(help="The job's name.", show_default=False)]


def _client(server: str | None, token: str | None, namespace: str):
    from kuberl_cli.client import Client

    return Client.from_options(server, token, namespace)


Phase = Annotated[str | None, typer.Option(help="Only jobs in this phase.", show_default=False)]
Selector = Annotated[
    str | None,
    typer.Option("--selector", "-l", help="Label selector, as in kubectl.", show_default=False),
]


class GetOutput(StrEnum):
    """-o of get, jobs and status (kuberl_cli.views.Output, named here so that help needs no
    import of the client)."""

    json = "json"
    yaml = "yaml"
    wide = "wide"
    name = "name"


Output = Annotated[
    GetOutput | None,
    typer.Option(
        "--output",
        "-o",
        help="json or yaml: the API's document; name: rljob/NAME; wide: more columns "
        "[default: the table].",
        show_default=False,
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
AllNamespaces = Annotated[
    bool,
    typer.Option(
        "--all-namespaces",
        "-A",
        help="The jobs of every namespace, with a NAMESPACE column first (the API's GET "
        "/v1/jobs: the token must be allowed to list rljobs in every namespace).",
    ),
]


def _output(value: GetOutput | None):
    from kuberl_cli.views import Output

    return None if value is None else Output(value.value)


@app.command()
def submit(
    file: ManifestFile,
    server: Server = None,
    token: Token = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="The job's namespace [default: the manifest's metadata.namespace, else "
            "default]; one that differs from metadata.namespace is refused.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Submit an RLJob manifest to the kuberl API."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.submit, _client(server, token, "default"), file, namespace))


@app.command()
def jobs(
    phase: Phase = None,
    selector: Selector = None,
    output: Output = None,
    watch: Watch = False,
    all_namespaces: AllNamespaces = False,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """List the namespace's jobs (-A: every namespace's) with their phase and latest progress
    (as `get jobs`)."""
    _get(["jobs"], phase, selector, output, watch, all_namespaces, server, token, namespace, "jobs")


@app.command()
def status(
    name: JobName,
    output: Output = None,
    watch: Watch = False,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """Show a job's phase, conditions and latest progress; with -o or -w, as `get jobs NAME`."""
    from kuberl_cli import client, get

    raise typer.Exit(
        client.run(get.status, _client(server, token, namespace), name, _output(output), watch)
    )


@app.command()
def logs(
    name: JobName,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.", min=0)] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Go on printing the output as it is written, until the job ends."
        ),
    ] = False,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """Print a job's trainer output (on a cluster: its driver's, from the job's Ray head)."""
    from kuberl_cli import client

    # Ctrl-C ends a follow with 130 and no traceback (client.run).
    raise typer.Exit(client.run(client.logs, _client(server, token, namespace), name, tail, follow))


@app.command()
def suspend(
    name: JobName, server: Server = None, token: Token = None, namespace: Namespace = "default"
) -> None:
    """Suspend a job: its trainer checkpoints and stops."""
    from kuberl_cli import client

    raise typer.Exit(
        client.run(client.set_suspended, _client(server, token, namespace), name, True)
    )


@app.command()
def resume(
    name: JobName, server: Server = None, token: Token = None, namespace: Namespace = "default"
) -> None:
    """Resume a suspended job from its newest checkpoint."""
    from kuberl_cli import client

    raise typer.Exit(
        client.run(client.set_suspended, _client(server, token, namespace), name, False)
    )


@app.command()
def delete(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="[job] NAME",
            help="The job's name, after the resource type as kubectl takes it (job NAME, "
            "rljob/NAME) or alone.",
            show_default=False,
        ),
    ],
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also remove its run directory (local backend): checkpoints, progress and "
            "exported policy. Without it they are kept, and the path is printed.",
        ),
    ] = False,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """Delete a job, stopping its trainer; its trained model is kept unless --purge."""
    from kuberl_cli import client, get

    def delete_named() -> None:
        alone = len(words) == 1 and "/" not in words[0]
        if alone and words[0].lower() not in get.RESOURCES:
            name = words[0]  # today's `kuberl delete NAME`
        elif (name := get.resource_and_name(words, "delete")) is None:
            raise client.ClientError("delete: name the job: kuberl delete job NAME", 1)
        client.delete(_client(server, token, namespace), name, purge)

    raise typer.Exit(client.run(delete_named))


@app.command()
def get(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="jobs [NAME]",
            help="The resource type (jobs, job, rljob, rlj), then one job's name (or rljob/NAME).",
            show_default=False,
        ),
    ],
    phase: Phase = None,
    selector: Selector = None,
    output: Output = None,
    watch: Watch = False,
    all_namespaces: AllNamespaces = False,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """List jobs, or show one, as kubectl get does: a table, or -o json|yaml|wide|name."""
    _get(words, phase, selector, output, watch, all_namespaces, server, token, namespace, "get")


def _get(
    words: list[str],
    phase: str | None,
    selector: str | None,
    output: GetOutput | None,
    watch: bool,
    all_namespaces: bool,
    server: str | None,
    token: str | None,
    namespace: str,
    command: str,
) -> None:
    from kuberl_cli import client, get

    def get_jobs() -> None:
        name = get.resource_and_name(words, command)
        get.get(
            _client(server, token, namespace),
            name,
            phase,
            selector,
            _output(output),
            watch,
            every_namespace=all_namespaces,
        )

    raise typer.Exit(client.run(get_jobs))


@app.command()
def describe(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="job NAME",
            help="The resource type (job, rljob, rlj) and the job's name (or rljob/NAME).",
            show_default=False,
        ),
    ],
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """Show a job in detail, as kubectl describe does: its spec's essentials, phase, latest
    progress, conditions and the events of its history."""
    from kuberl_cli import client, get

    def describe_job() -> None:
        name = get.resource_and_name(words, "describe")
        if name is None:
            raise client.ClientError("describe: name the job: kuberl describe job NAME", 1)
        get.describe(_client(server, token, namespace), name)

    raise typer.Exit(client.run(describe_job))


if __name__ == "__main__":
    app()
