"""A local run says nothing when nothing is wrong: no cluster storage warning, no export when a
finished run is run again, and no path of this machine in what it shares (the exported policy's
metadata, the summary); `kuberl render`, bound for a cluster, does warn of emptyDir checkpoints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import yaml

from testkit import rljob

KUBERL = [sys.executable, "-m", "kuberl_cli.main"]


def write_job(directory: Path) -> Path:
    """A tiny PPO CartPole job with no storage and no checkpoint.uri: on a cluster, an emptyDir."""
    trainer = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "seed": 0,
        "hyperparameters": {"rollout_length": 16, "num_epochs": 1},
        "stop": {"iterations": 2},
        "checkpoint": {"exportPolicy": True},  # testkit's jobs export nothing unless asked
    }
    rollout = {"replicas": 0, "envsPerWorker": 2}
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(rljob("job", trainer=trainer, rolloutWorkers=rollout)))
    return path


def kuberl(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [*KUBERL, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_finished_run_run_again_is_quiet_and_shares_no_path_of_this_machine(tmp_path):
    job = write_job(tmp_path)
    first = kuberl("train", job, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    policy = tmp_path / "runs" / "job" / "checkpoints" / "policy.onnx"
    exported = policy.stat().st_mtime_ns

    again = kuberl("train", job, cwd=tmp_path)

    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to train" in again.stdout
    assert "Exported" not in again.stdout and policy.stat().st_mtime_ns == exported
    for run in (first, again):
        assert "emptyDir" not in run.stdout + run.stderr
        summary = run.stdout.split("job: stopped at", 1)[1].split("kuberl-final-record", 1)[0]
        assert str(tmp_path) not in summary, summary
        assert "  policy             runs/job/checkpoints/policy.onnx" in summary
    metadata = {prop.key: prop.value for prop in onnx.load(str(policy)).metadata_props}
    assert metadata["checkpoint"] == "checkpoints/checkpoint-00000002"
    assert not any(str(tmp_path) in value for value in metadata.values())


def test_render_warns_that_the_checkpoints_would_die_with_the_cluster(tmp_path):
    rendered = kuberl("render", write_job(tmp_path), "--no-env", cwd=tmp_path)

    assert rendered.returncode == 0, rendered.stderr
    warnings = [line for line in rendered.stderr.splitlines() if ": warning: " in line]
    assert len(warnings) == 1 and "emptyDir" in warnings[0], rendered.stderr
