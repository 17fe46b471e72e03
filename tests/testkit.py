"""Helpers shared by the tests: manifests edited at dotted paths, the CLI in a subprocess, trainer
configs built the way manifests are. (A module of its own: `conftest` names clash between test
directories.)"""

import copy
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def edited(document: dict, **changes) -> dict:
    """A deep copy of `document` with values set at dotted paths (`**{"spec.learner.gpus": 1}`);
    None deletes the key."""
    document = copy.deepcopy(document)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return document


def run_kuberl(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The `kuberl` CLI in a subprocess, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "kuberl_cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


def trainer_config(**fields):
    """`spec.trainer` validated from manifest-style keys."""
    from pydantic import TypeAdapter

    from kuberl_trainer.config import TrainerConfig

    document = {"env": "CartPole-v1", "stop": {"timesteps": 100_000}, "seed": 0, **fields}
    return TypeAdapter(TrainerConfig).validate_python(document)


def free_port() -> int:
    """A TCP port free on loopback right now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
