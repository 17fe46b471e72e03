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
    add_completion=False,
    pretty_exceptions_enable=False,
)

ManifestFile = Annotated[Path, typer.Argument(help="RLJob manifest (YAML).", show_default=False)]
NoEnv = Annotated[
    bool,
    typer.Option(
        "--no-env",
        help="Check the manifest only, without making the env: a module:Class env imports and "
        "runs its module, so use this for files you do not trust.",
    ),
]


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
) -> None:
    """Train an RLJob on this machine, resuming from its newest checkpoint."""
    from kuberl_cli.train import train_command

    raise typer.Exit(
        train_command(file, run_dir=run_dir, metrics_port=metrics_port, tensorboard=tensorboard)
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
) -> None:
    """Play a trained policy on seeded episodes of its env: mean ± std of the returns, and each
    episode's return and length; with --video, a recording of them."""
    from kuberl_cli.evaluate import evaluate_command

    raise typer.Exit(
        evaluate_command(path, episodes, seed, stochastic, output.value, video, video_episodes)
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
) -> None:
    """Write a trained policy's greedy actions as one file that runs without kuberl: observation
    in, action out, with the normalization, the network and the action's mode inside."""
    from kuberl_cli.export import export_command

    raise typer.Exit(export_command(path, output))


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
) -> None:
    """Serve the REST API: submit, list, follow, suspend, resume and delete jobs over HTTP."""
    from kuberl_cli.serve import serve_command

    raise typer.Exit(
        serve_command(
            backend.value, host, port, data_dir, token_file, max_running, kubeconfig, kube_server
        )
    )


# --- The REST API's client ----------------------------------------------------------------------

Server = Annotated[
    str | None,
    typer.Option(
        help="URL of the kuberl API [env KUBERL_SERVER; default http://127.0.0.1:8080].",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(help="Bearer token [env KUBERL_API_TOKEN].", show_default=False),
]
Namespace = Annotated[str, typer.Option("--namespace", "-n", help="The jobs' namespace.")]
JobName = Annotated[str, typer.Argument(help="The job's name.", show_default=False)]


def _client(server: str | None, token: str | None, namespace: str):
    from kuberl_cli.client import Client

    return Client.from_options(server, token, namespace)


@app.command()
def submit(
    file: ManifestFile, server: Server = None, token: Token = None, namespace: Namespace = "default"
) -> None:
    """Submit an RLJob manifest to the kuberl API."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.submit, _client(server, token, namespace), file))


@app.command()
def jobs(
    phase: Annotated[str | None, typer.Option(help="Only jobs in this phase.")] = None,
    selector: Annotated[
        str | None, typer.Option("--selector", "-l", help="Label selector, as in kubectl.")
    ] = None,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """List the namespace's jobs with their phase and latest progress."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.jobs, _client(server, token, namespace), phase, selector))


@app.command()
def status(
    name: JobName, server: Server = None, token: Token = None, namespace: Namespace = "default"
) -> None:
    """Show a job's phase, conditions and latest progress."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.status, _client(server, token, namespace), name))


@app.command()
def logs(
    name: JobName,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.", min=0)] = None,
    server: Server = None,
    token: Token = None,
    namespace: Namespace = "default",
) -> None:
    """Print a job's trainer output (local backend)."""
    from kuberl_cli import client

    raise typer.Exit(client.run(client.logs, _client(server, token, namespace), name, tail))


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
    name: JobName,
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
    from kuberl_cli import client

    raise typer.Exit(client.run(client.delete, _client(server, token, namespace), name, purge))


if __name__ == "__main__":
    app()
