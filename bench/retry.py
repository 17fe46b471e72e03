"""A retry on the same Ray cluster against one on a rebuilt cluster, side by side.

The operator gives a failed driver its next attempt as a new Ray job on the same RayCluster;
before, it deleted the cluster and built a new one. This measures what that saves on a loopback
multi-node Ray (tests/multinode.py: a head and two spot worker nodes, each its own `ray start`),
from the moment the next attempt is decided to its first training iteration:

- same cluster: `kuberl train` attaches to the running cluster (RAY_ADDRESS, as the operator runs
  the driver) and resumes the run's checkpoint;
- rebuilt: a new head and worker nodes start, then the same `kuberl train` attaches and resumes.

On Kubernetes a rebuild also waits for the scheduler, node start-ups and image pulls (minutes on a
cold node), none of which a loopback cluster has, so the ratio here is the least the retry saves.
Each round measures both, alternating which goes first, on the same machine and load.

    python bench/retry.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from multinode import SPOT, LoopbackCluster, loopback_cluster  # noqa: E402

KUBERL = Path(sys.executable).with_name("kuberl")


def job_manifest(path: Path) -> Path:
    """PPO on CartPole with two rollout workers on the spot nodes, an iteration a checkpoint."""
    job = {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "retry"},
        "spec": {
            "trainer": {
                "algorithm": "PPO",
                "env": "CartPole-v1",
                "seed": 0,
                "hyperparameters": {"rollout_length": 64, "num_epochs": 2},
                "stop": {"iterations": 1_000_000},
                "checkpoint": {"everyIterations": 1, "keep": 2},
            },
            "rolloutWorkers": {
                "replicas": 2,
                "envsPerWorker": 4,
                "spot": {"enabled": True, "provider": "gke"},
                "rayResources": {SPOT: 1},
            },
        },
    }
    path.write_text(yaml.safe_dump(job))
    return path


def iterations(run_dir: Path) -> int:
    """The newest iteration in the run's progress rows (0 before the first)."""
    progress = run_dir / "progress.jsonl"
    if not progress.exists():
        return 0
    lines = [line for line in progress.read_text().splitlines() if line.strip()]
    return json.loads(lines[-1])["iteration"] if lines else 0


def train_until_next_iteration(
    cluster: LoopbackCluster, job: Path, run_dir: Path, started: float, timeout_s: float
) -> float:
    """Run `kuberl train` on `cluster` until it reports an iteration past the run's newest, then
    stop it (SIGTERM: it checkpoints); seconds from `started` to that iteration."""
    before = iterations(run_dir)
    command = [str(KUBERL), "train", str(job), "--run-dir", str(run_dir)]
    driver = subprocess.Popen(
        command, env=cluster.client_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        while iterations(run_dir) <= before:
            if driver.poll() is not None:
                raise RuntimeError(f"kuberl train exited {driver.returncode} before training")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"no iteration within {timeout_s:g} s")
            time.sleep(0.05)  # a polling interval of the measurement, not a wait for a result
        return time.monotonic() - started
    finally:
        driver.terminate()
        driver.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kuberl-retry-") as scratch:
        job = job_manifest(Path(scratch) / "job.yaml")
        run_dir = Path(scratch) / "run"
        same, rebuilt = [], []
        with loopback_cluster() as kept:
            # The failed attempt: it trained and checkpointed on this cluster.
            train_until_next_iteration(kept, job, run_dir, time.monotonic(), args.timeout)
            for round_ in range(args.rounds):
                order = ("same", "rebuilt") if round_ % 2 == 0 else ("rebuilt", "same")
                for kind in order:
                    started = time.monotonic()
                    if kind == "same":
                        took = train_until_next_iteration(kept, job, run_dir, started, args.timeout)
                        same.append(took)
                    else:
                        with loopback_cluster() as fresh:
                            took = train_until_next_iteration(
                                fresh, job, run_dir, started, args.timeout
                            )
                        rebuilt.append(took)
                    print(f"round {round_ + 1} {kind:8s} {took:6.1f} s", flush=True)

    same_s, rebuilt_s = statistics.median(same), statistics.median(rebuilt)
    print(
        f"\nto the next attempt's first iteration (median of {args.rounds}; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}):\n"
        f"  same cluster     {same_s:6.1f} s\n"
        f"  rebuilt cluster  {rebuilt_s:6.1f} s\n"
        f"  ratio            {same_s / rebuilt_s:6.2f}"
    )


if __name__ == "__main__":
    main()
