"""`kuberl export RUN_DIR | CHECKPOINT -o FILE [--trust-env-code]`: a trained policy's greedy
actions as one ONNX graph (FILE.onnx) or TorchScript module (FILE.pt) that runs without kuberl."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from kuberl_cli.policies import EXIT_INVALID, EXIT_OK, named_policy

OPT_IN = "pass --trust-env-code if you trust it"
"""How a user lets `kuberl export` make the env of a checkpoint that records no spaces."""


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
        ),
    ] = Path("policy.onnx"),
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
    raise typer.Exit(export_command(path, output, trust_env_code))


def export_command(path: str, output: Path, trust_env_code: bool = False) -> int:
    """0 once `output` is written and checked (one line says what it holds); 2 when nothing is at
    `path`, 1 when what is there holds no policy kuberl can load, or the policy cannot be
    exported to `output` (the reason on stderr). No env is made, except for a checkpoint of an
    older kuberl, which records no spaces: then only where it runs no code the checkpoint names,
    or with `trust_env_code`."""
    from kuberl_trainer.trained.export import FORMATS, ExportError, input_spec, output_spec
    from kuberl_trainer.trained.export import export as export_policy
    from kuberl_trainer.trained.inference import load_checkpoint

    policy, exit_code = named_policy(
        "export", path, lambda named: load_checkpoint(named, trust_env_code), OPT_IN
    )
    if policy is None:
        return exit_code
    try:
        written = export_policy(policy, output)
    except (ExportError, ValueError, OSError) as exc:
        print(f"kuberl export: {exc}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        policy.close()
    print(
        f"{written}: {policy.config.algorithm} on {policy.config.env}, greedy policy, "
        f"{FORMATS[written.suffix]}, input obs {input_spec(policy)}, "
        f"output actions {output_spec(policy)}"
    )
    return EXIT_OK
