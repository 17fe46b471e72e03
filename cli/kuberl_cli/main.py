"""`kuberl`: the user's front door. Each command imports its component only when it runs, so
`kuberl validate` stays fast and works without the training stack loaded."""

from __future__ import annotations

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


@app.command()
def validate(file: ManifestFile) -> None:
    """Check an RLJob manifest: one line per problem, naming the field and the reason."""
    from kuberl_cli.validate import validate_command

    raise typer.Exit(validate_command(file))


@app.command()
def render(file: ManifestFile) -> None:
    """Print, as YAML, every object the operator would create for an RLJob manifest."""
    from kuberl_cli.render import render_command

    raise typer.Exit(render_command(file))


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
) -> None:
    """Train an RLJob on this machine, resuming from its newest checkpoint."""
    from kuberl_cli.train import train_command

    raise typer.Exit(train_command(file, run_dir=run_dir, metrics_port=metrics_port))


if __name__ == "__main__":
    app()
