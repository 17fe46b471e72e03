"""`kuberl`: the user's front door, and the table of its commands. Each command is declared, with
its arguments and options, in the module of its concern (those of the REST API's client in
kuberl_cli.api_commands, of a manifest in kuberl_cli.manifest_commands), and imports its component
only when it runs, so that help and shell completion answer at once, and `kuberl validate` stays
fast and works without the training stack loaded."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from kuberl_cli.api_commands import (
    apply,
    delete,
    describe,
    get,
    jobs,
    logs,
    resume,
    scale,
    status,
    submit,
    suspend,
)
from kuberl_cli.evaluate import evaluate
from kuberl_cli.export import export
from kuberl_cli.manifest_commands import render, train, validate
from kuberl_cli.plot import plot
from kuberl_cli.serve import serve

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


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell.", show_default=False)],
) -> None:
    """Print the shell's completion script, as kubectl completion does: `source <(kuberl
    completion bash)`, or add that line to ~/.bashrc (--install-completion does it for you)."""
    from typer.completion import get_completion_script

    # The same script --show-completion prints, without guessing the shell from the parent
    # process (which fails under scripts and CI).
    print(get_completion_script(prog_name="kuberl", complete_var=COMPLETE_VAR, shell=shell.value))


def explain(
    algorithm: Annotated[
        str | None,
        typer.Argument(
            metavar="ALGORITHM|rljob.PATH",
            help="An algorithm (PPO, DQN, ...), without one the list; or a field of RLJob, as "
            "kubectl explain takes it (rljob.spec.trainer.stop).",
            show_default=False,
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Each description whole, not its first sentence.")
    ] = False,
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            help="The docs' table of defaults instead; for a path, its field reference.",
        ),
    ] = False,
    recursive: Annotated[
        bool, typer.Option("--recursive", help="For a path: every field under it, as a tree.")
    ] = False,
) -> None:
    """List an algorithm's hyperparameters: type, range, default, meaning, where to set each, and
    the Stable-Baselines3 and RLlib names that map to it. Or explain any field of RLJob offline,
    as kubectl explain does, with its default and limits: kuberl explain rljob.spec.trainer.stop."""
    from kuberl_cli.explain import explain_command

    raise typer.Exit(explain_command(algorithm, full=full, markdown=markdown, recursive=recursive))


# Help lists the commands in this order.
for command in (
    completion,
    validate,
    render,
    train,
    plot,
    evaluate,
    export,
    serve,
    explain,
    submit,
    apply,
    jobs,
    status,
    logs,
    suspend,
    resume,
    scale,
    delete,
    get,
    describe,
):
    app.command()(command)


if __name__ == "__main__":
    app()
