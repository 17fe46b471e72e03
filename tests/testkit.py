"""Helpers shared by the tests: manifests edited at dotted paths, the CLI in a subprocess, trainer
configs built the way manifests are. (A module of its own: `conftest` names clash between test
directories.)"""

import copy
import re
import socket
import subprocess
import sys
import time
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


def run_kuberl(
    *args, env: dict[str, str] | None = None, timeout: float = 120, **options
) -> subprocess.CompletedProcess[str]:
    """The `kuberl` CLI in a subprocess, from the repository root; `options` go to
    subprocess.run (a preexec_fn that caps its memory, say)."""
    return subprocess.run(
        [sys.executable, "-m", "kuberl_cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        **options,
    )


def trainer_config(**fields):
    """`spec.trainer` validated from manifest-style keys."""
    from pydantic import TypeAdapter

    from kuberl_contract.config import TrainerConfig

    document = {"env": "CartPole-v1", "stop": {"timesteps": 100_000}, "seed": 0, **fields}
    document["checkpoint"] = without_export(document.get("checkpoint"))
    return TypeAdapter(TrainerConfig).validate_python(document)


def without_export(checkpoint: dict | None) -> dict:
    """`spec.trainer.checkpoint` that exports no policy at the end unless it says so: the export
    (a few seconds) is tested where it is meant, not paid by every small job of the suite."""
    return {"exportPolicy": False, **(checkpoint or {})}


def locked_versions() -> dict[str, str]:
    """{normalized package name: version} of requirements.lock, what `make` installs."""
    versions = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            versions[normalized_name(name)] = version
    return versions


def normalized_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them (extras dropped)."""
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def free_port() -> int:
    """A TCP port free on loopback right now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout: float = 10, what: str = "", interval: float = 0.1):
    """The first truthy value of `condition()` within `timeout` seconds; fails the test naming
    `what` otherwise."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, (
            f"timed out after {timeout} s waiting for {what or condition}"
        )
        time.sleep(interval)
    return result


def all_started(workers, timeout: float = 120):
    """Wait until every remote worker of `workers` (a WorkerSet) has started. No more start at
    once than the Ray cluster has CPUs to spare (one at a time on ray_local's two, beside the
    learner's), so a test of what running workers do waits for all of them first."""
    wait_until(
        lambda: len(workers.healthy_indices) == workers.num_remote,
        timeout,
        what="every remote worker to start",
    )


def rljob(
    name: str,
    *,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    minimal: bool = False,
    **spec,
) -> dict:
    """An RLJob manifest of PPO on CartPole. By default a small valid job that trains: 20k steps,
    short rollouts, a checkpoint every 5 iterations, no rollout workers. `minimal` gives only the
    required fields (a 1000-step stop), everything else left to the defaults. `spec` adds or
    replaces top-level spec fields; `namespace` and `labels` (when any) go to the metadata."""
    if minimal:
        defaults = {
            "trainer": {"algorithm": "PPO", "env": "CartPole-v1", "stop": {"timesteps": 1000}}
        }
    else:
        trainer = {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "seed": 0,
            "stop": {"timesteps": 20_000},
            "hyperparameters": {"rollout_length": 64, "num_epochs": 4},
            "checkpoint": {"everyIterations": 5},
        }
        defaults = {"trainer": trainer, "rolloutWorkers": {"replicas": 0}}
    metadata = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    spec = defaults | spec
    if not minimal and isinstance(spec.get("trainer"), dict):
        trainer = spec["trainer"]
        spec["trainer"] = trainer | {"checkpoint": without_export(trainer.get("checkpoint"))}
    return {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJob", "metadata": metadata, "spec": spec}


def as_strict_json_schema(node: dict) -> dict:
    """A CRD's OpenAPI v3 schema as jsonschema's Draft 4 reads it, with `nullable` spelt as a null
    type and unknown fields rejected (as `kubectl apply --validate=strict` rejects them), except
    where the schema preserves them."""
    node = dict(node)
    if "properties" in node:
        node["properties"] = {k: as_strict_json_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
    if "items" in node:
        node["items"] = as_strict_json_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = as_strict_json_schema(node["additionalProperties"])
    if node.pop("nullable", False):
        node = {"anyOf": [{"type": "null"}, node]}
    return node


def progress_rows(run_dir) -> list[dict]:
    """The progress rows a Driver run wrote to its run directory."""
    from kuberl_contract.progress_row import PROGRESS_FILE, read_rows

    return read_rows(Path(run_dir) / PROGRESS_FILE)


def killing_optimizer(base: type, after_steps: int) -> type:
    """`base` that SIGKILLs its first remote rollout worker once, after `after_steps` env steps
    (installed with monkeypatch on `kuberl_trainer.job.algorithms.optimizer_class`)."""
    import os
    import signal

    import ray

    class KillingOptimizer(base):
        killed = False

        def step(self):
            result = super().step()
            if not self.killed and self.counters.steps_sampled >= after_steps:
                os.kill(ray.get(self.workers.remote_workers[0].pid.remote()), signal.SIGKILL)
                self.killed = True
            return result

    return KillingOptimizer


def fast_cartpole_job(path: Path, **trainer) -> Path:
    """deploy/examples/cartpole-ppo-fast.yaml (seed 1) with `trainer` merged into spec.trainer,
    written to `path`: a job that solves CartPole in about 15k env steps, a few seconds."""
    import yaml

    manifest = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-ppo-fast.yaml").read_text())
    manifest["spec"]["trainer"] |= {"seed": 1, **trainer}
    path.write_text(yaml.safe_dump(manifest))
    return path
