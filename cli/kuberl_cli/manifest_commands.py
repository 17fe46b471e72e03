"""The commands that read an RLJob manifest on this machine, `validate`, `render` and `train`: their
arguments and options. Each imports its module (kuberl_cli.validate, .render, .train) only when
it runs, since those load the operator's models. ManifestChanges are the manifest options that
`submit` and `apply` share with `train`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

ManifestFile = Annotated[Path, typer.Argument(help="RLJob manifest (YAML).", show_default=False)]
ManifestPaths = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILE|DIRECTORY",
        help="RLJob manifests, and directories of them (their *.yaml and *.yml files).",
        show_default=False,
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="PATH=VALUE",
        help="Change the manifest before it is checked, as many times as needed: PATH is "
        "dotted (spec.trainer.hyperparameters.learning_rate, or below spec: "
        "trainer.stop.timesteps; a number picks a list's item), VALUE is YAML (0.001, true, "
        "[64, 64], a string; null clears the field).",
        show_default=False,
    ),
]
OptionalManifestFile = Annotated[
    Path | None,
    typer.Argument(metavar="FILE", help="RLJob manifest (YAML), or -f FILE.", show_default=False),
]


@dataclass(frozen=True)
class ManifestChanges:
    """The manifest that `submit` and `apply` send, and the changes made to it first, as `kuberl
    train` takes them (an option group)."""

    filename: Annotated[
        Path | None,
        typer.Option(
            "--filename", "-f", help="RLJob manifest (YAML), as kubectl -f.", show_default=False
        ),
    ] = None
    """The manifest, named as kubectl names it; None: the FILE argument."""
    overrides: Overrides = None
    """`--set PATH=VALUE` changes (kuberl_cli.overrides), in order."""
    seed: Annotated[
        int | None,
        typer.Option(help="Set spec.trainer.seed.", min=0, show_default=False),
    ] = None
    """spec.trainer.seed to set; None: the manifest's."""

    def file(self, positional: Path | None, command: str) -> Path:
        """The one manifest named, as the FILE argument or with -f; a usage error otherwise."""
        named = [path for path in (positional, self.filename) if path is not None]
        if len(named) != 1:
            raise typer.BadParameter(
                f"name one manifest: kuberl {command} -f FILE (or kuberl {command} FILE)",
                param_hint="'FILE' / '--filename' / '-f'",
            )
        return named[0]


NoEnv = Annotated[
    bool,
    typer.Option(
        "--no-env",
        help="Check the manifest only, without making the env: a module:Class env imports and "
        "runs its module, so use this for files you do not trust.",
    ),
]


def validate(files: ManifestPaths, no_env: NoEnv = False) -> None:
    """Check RLJob manifests: one line per problem of each, naming the field and the reason. The
    env is made once to check it (an unknown id, an unsupported space), unless --no-env."""
    from kuberl_cli.validate import validate_paths

    raise typer.Exit(validate_paths(files, check_env=not no_env))


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
    overrides: Overrides = None,
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
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the run directory's checkpoint even when it was trained with another "
            "spec.trainer (a changed learning rate, env setting or seed): without it such a run "
            "is refused, naming the fields, so that a sweep's values never land in one directory. "
            "Changes that continue the same run (a later stop, checkpointing, evaluation) "
            "resume without it.",
        ),
    ] = False,
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
            resume=resume,
        )
    )
