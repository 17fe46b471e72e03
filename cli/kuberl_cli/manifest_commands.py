"""The commands that read an RLJob manifest on this machine, `validate`, `render` and `train`: their
arguments and options. Each imports its module (kuberl_cli.validate, .render, .train) only when
it runs, since those load the operator's models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ManifestFile = Annotated[Path, typer.Argument(help="RLJob manifest (YAML).", show_default=False)]
NoEnv = Annotated[
    bool,
    typer.Option(
        "--no-env",
        help="Check the manifest only, without making the env: a module:Class env imports and "
        "runs its module, so use this for files you do not trust.",
    ),
]


def validate(file: ManifestFile, no_env: NoEnv = False) -> None:
    """Check an RLJob manifest: one line per problem, naming the field and the reason. The env is
    made once to check it (an unknown id, an unsupported space), unless --no-env."""
    from kuberl_cli.validate import validate_command

    raise typer.Exit(validate_command(file, check_env=not no_env))


def render(file: ManifestFile, no_env: NoEnv = False) -> None:
    """Print, as YAML, every object the operator would create for an RLJob manifest (checked as
    validate checks it)."""
    from kuberl_cli.render import render_command

    raise typer.Exit(render_command(file, check_env=not no_env))


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
    cpu_price: Annotated[
        float | None,
        typer.Option(
            help="Dollars per CPU-hour: the summary and the final record then say what the run "
            "cost (the CPUs it held: the driver's and each rollout worker's cpusPerWorker).",
            min=0.0,
            show_default=False,
        ),
    ] = None,
    gpu_price: Annotated[
        float | None,
        typer.Option(
            help="Dollars per GPU-hour of the learner's GPUs.", min=0.0, show_default=False
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
            prices=(cpu_price, gpu_price),
        )
    )
