"""`kuberl evaluate RUN_DIR | CHECKPOINT [--episodes N] [--seed S] [--stochastic] [-o json]`: a
trained policy on seeded episodes of its env, greedy unless --stochastic."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


def evaluate_command(path: str, episodes: int, seed: int, stochastic: bool, output: str) -> int:
    """0 once the episodes are played; 2 when nothing is at `path`, 1 when what is there holds
    no policy kuberl can load (the reason on stderr)."""
    if "://" not in path and not Path(path).exists():
        print(f"kuberl evaluate: {path}: no such file or directory", file=sys.stderr)
        return EXIT_NO_FILE
    from kuberl_trainer.inference import LoadError, load

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    try:
        policy = load(path)
    except LoadError as exc:
        print(f"kuberl evaluate: {exc}", file=sys.stderr)
        return EXIT_INVALID
    try:
        evaluation = policy.evaluate(episodes, seed, deterministic=not stochastic)
    except ValueError as exc:  # --stochastic of an exported policy
        print(f"kuberl evaluate: {exc}", file=sys.stderr)
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
    return EXIT_OK
