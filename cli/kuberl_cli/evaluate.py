"""`kuberl evaluate RUN_DIR | CHECKPOINT | EXPORTED_FILE [--episodes N] [--seed S] [--stochastic]
[--video FILE.mp4|FILE.gif [--video-episodes N]] [--env ID] [--trust-env-code] [-o json]`: a
trained policy on seeded episodes of its env (or of the env named with --env), greedy unless
--stochastic, recorded as a video with --video. An env that would run code the file names is made
only with --trust-env-code (see kuberl_trainer.envs.trust)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer

from kuberl_cli.policies import EXIT_INVALID, EXIT_OK, named_policy, one_line

OPT_IN = "pass --env ID to evaluate on an env you name, or --trust-env-code if you trust it"
"""How a user lets `kuberl evaluate` play a policy whose file names code for its env."""


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


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
