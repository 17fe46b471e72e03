"""Shared fixtures: a private Ray instance and RLJob configs built the way manifests are."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# Explicit, so a token file in the home directory never changes how test clusters behave.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def ray_local():
    """A Ray instance of this test process only (address="local" never joins someone else's);
    shut down at the end, which ends exactly the processes it started."""
    import ray

    # Actors defined in test modules (mock workers) must be importable by Ray's worker processes,
    # which inherit this environment.
    paths = [str(TESTS), *(str(p) for p in TESTS.iterdir() if p.is_dir())]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


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
        cwd=TESTS.parent,
        env=env,
    )


def trainer_config(**fields):
    """`spec.trainer` validated from manifest-style keys."""
    from pydantic import TypeAdapter

    from kuberl_trainer.config import TrainerConfig

    document = {"env": "CartPole-v1", "stop": {"timesteps": 100_000}, "seed": 0, **fields}
    return TypeAdapter(TrainerConfig).validate_python(document)
