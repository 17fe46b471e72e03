"""`kuberl evaluate RUN_DIR | CHECKPOINT | EXPORTED_FILE | JOB [--episodes N] [--seed S]
[--stochastic] [--video FILE.mp4|FILE.gif [--video-episodes N]] [--env ID] [--trust-env-code]
[-o json]`: a trained policy on seeded episodes of its env (or of the env named with --env), greedy
unless --stochastic, recorded as a video with --video. An env that would run code the file names
is made only with --trust-env-code (see kuberl_trainer.envs.trust). A JOB (NAME or job/NAME, where
no local path of that name is) is one of the kuberl API's: its exported policy is downloaded and
played as an exported file is."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kuberl_cli.api_commands import ApiOptions
from kuberl_cli.option_groups import with_option_groups
from kuberl_cli.policies import EXIT_INVALID, EXIT_NO_FILE, EXIT_OK, named_policy, one_line

OPT_IN = "pass --env ID to evaluate on an env you name, or --trust-env-code if you trust it"
"""How a user lets `kuberl evaluate` play a policy whose file names code for its env."""


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


@with_option_groups
def evaluate(
    path: Annotated[
        str,
        typer.Argument(
            metavar="RUN_DIR|CHECKPOINT|EXPORTED_FILE|JOB",
            help="A run directory (its newest checkpoint), a checkpoint location, one "
            "checkpoint (a folder or an object store's URI), a file of kuberl export, or, where "
            "no such path is, a job of the kuberl API (NAME or job/NAME): its exported policy.",
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
            help="Record the episodes to this video (an H.264 MP4 that browsers play, or a GIF), "
            "the env rendering rgb_array frames; a line on stderr shows its progress.",
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
    *,
    api: ApiOptions,
) -> None:
    """Play a trained policy on seeded episodes of its env: mean ± std of the returns, and each
    episode's return and length; with --video, a recording of them."""
    played = (episodes, seed, stochastic, output.value, video, video_episodes, env, trust_env_code)
    raise typer.Exit(evaluate_named(path, api, *played))


def evaluate_named(path: str, api: ApiOptions, *played: Any) -> int:
    """evaluate_command of the local `path`, or, where nothing is at `path`, of the exported
    policy of the API's job `path` names (NAME, job/NAME), downloaded; `played`: the rest of
    evaluate_command's arguments. Says which in one line (on stderr under -o json); a name that
    is neither gets one line naming both tries."""
    from kuberl_cli.client import RESOURCES, ClientError, job_name

    kind, slash, _ = path.partition("/")
    named_as_job = not slash or kind.lower() in RESOURCES  # NAME or job/NAME, not a path
    if "://" in path or Path(path).exists() or not named_as_job:
        return evaluate_command(path, *played)
    from kuberl_cli.job_policy import downloaded_policy

    client = api.client()
    try:
        name = job_name(path, "evaluate")
        client.json("GET", client.jobs_path(name))
    except ClientError as exc:
        print(
            f"kuberl evaluate: {path}: no such file or directory, nor a job of the kuberl API at "
            f"{client.server} in namespace {client.namespace} ({' '.join(str(exc).split())})",
            file=sys.stderr,
        )
        return EXIT_NO_FILE
    try:
        with downloaded_policy(client, name) as file:
            note = (
                f"{path}: no such local path; evaluating the exported policy of job {name} "
                f"(namespace {client.namespace}, {client.server})"
            )
            print(note, file=sys.stderr if played[3] == "json" else sys.stdout)
            return evaluate_command(str(file), *played)
    except ClientError as exc:  # the job has no policy yet
        print(f"kuberl evaluate: {exc}", file=sys.stderr)
        return exc.exit_code


def evaluate_command(
    path: str,
    episodes: int,
    seed: int,
    stochastic: bool,
    output: str,
    video: str | None = None,
    video_episodes: int | None = None,
    env: str | None = None,
    trust_env_code: bool = False,
) -> int:
    """0 once the episodes are played (and recorded); 2 when nothing is at `path`, 1 when what is
    there holds no policy kuberl can load, when its env may not be made (it runs code the file
    names, and neither `env` nor `trust_env_code` is given), cannot be made or does not fit the
    policy, or when the video cannot be recorded (the reason on stderr, in one line)."""
    if problem := video_problem(video, video_episodes):
        print(f"kuberl evaluate: {problem}", file=sys.stderr)
        return EXIT_INVALID
    from kuberl_trainer.errors import InvalidJobError
    from kuberl_trainer.trained.inference import load
    from kuberl_trainer.trained.video import RecordingError

    policy, exit_code = named_policy(
        "evaluate", path, lambda named: load(named, trust_env_code, env), OPT_IN
    )
    if policy is None:
        return exit_code
    try:
        evaluation = policy.evaluate(
            episodes,
            seed,
            deterministic=not stochastic,
            video=video,
            video_episodes=video_episodes,
        )
    except ValueError as exc:  # --stochastic of an exported policy
        print(f"kuberl evaluate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except RecordingError as exc:  # the env cannot render, or the file cannot be written
        print(f"kuberl evaluate: cannot record {video}: {one_line(exc, OPT_IN)}", file=sys.stderr)
        return EXIT_INVALID
    except InvalidJobError as exc:  # the env: code not trusted, unbuildable, or a misfit
        print(f"kuberl evaluate: {one_line(exc, OPT_IN)}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        policy.close()
    if output == "json":
        record = {
            "checkpoint": policy.uri,
            "algorithm": policy.config.algorithm,
            "env": policy.config.env,
            "iteration": policy.iteration,
            "timesteps": policy.timesteps,
            **evaluation.as_dict(),
        }
        print(json.dumps(record))
        return EXIT_OK
    print(policy.describe())
    print(evaluation.summary())
    for index, (ret, length) in enumerate(zip(evaluation.returns, evaluation.lengths, strict=True)):
        print(f"  episode {index:3d}  seed {seed + index:<6d} return {ret:10.2f}  length {length}")
    if evaluation.video is not None:
        print(evaluation.video.summary())
        if evaluation.video.note:
            print(f"  note: {evaluation.video.note}")
    return EXIT_OK


def video_problem(video: str | None, video_episodes: int | None) -> str | None:
    """What is wrong with --video and --video-episodes, checked before anything is loaded or
    played, or None."""
    if video is None and video_episodes is not None:
        return "--video-episodes says how many episodes --video records: give --video too"
    if video is None:
        return None
    from kuberl_trainer.trained.video import RecordingError, check_video_path

    try:
        check_video_path(video)
    except RecordingError as exc:
        return str(exc)
    return None
