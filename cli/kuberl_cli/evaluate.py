"""`kuberl evaluate RUN_DIR | CHECKPOINT [--episodes N] [--seed S] [--stochastic]
[--video FILE.mp4|FILE.gif [--video-episodes N]] [-o json]`: a trained policy on seeded episodes of
its env, greedy unless --stochastic, recorded as a video with --video."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def evaluate_command(
    path: str,
    episodes: int,
    seed: int,
    stochastic: bool,
    output: str,
    video: str | None = None,
    video_episodes: int | None = None,
) -> int:
    """0 once the episodes are played (and recorded); 2 when nothing is at `path`, 1 when what is
    there holds no policy kuberl can load, or the video cannot be recorded (the reason on
    stderr)."""
    if problem := video_problem(video, video_episodes):
        print(f"kuberl evaluate: {problem}", file=sys.stderr)
        return EXIT_INVALID
    if "://" not in path and not Path(path).exists():
        print(f"kuberl evaluate: {path}: no such file or directory", file=sys.stderr)
        return EXIT_NO_FILE
    from kuberl_trainer.inference import LoadError, load
    from kuberl_trainer.video import RecordingError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        policy = load(path)
    except LoadError as exc:
        print(f"kuberl evaluate: {exc}", file=sys.stderr)
        return EXIT_INVALID
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
        print(f"kuberl evaluate: cannot record {video}: {exc}", file=sys.stderr)
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
    from kuberl_trainer.video import RecordingError, check_video_path

    try:
        check_video_path(video)
    except RecordingError as exc:
        return str(exc)
    return None
