"""`kuberl train` as a user runs it: a real process, real signals, real files and HTTP."""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kuberl_contract.final_record import EXIT_INVALID_JOB, Outcome, read_final_record
from kuberl_operator.observe import progress_from_metrics
from testkit import free_port, rljob

KUBERL = Path(sys.executable).with_name("kuberl")


def manifest(tmp_path: Path, **overrides) -> Path:
    """A small PPO CartPole job; overrides are merged into spec."""
    spec = {
        "trainer": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "seed": 1,
            "hyperparameters": {"rollout_length": 64, "num_epochs": 4},
            "stop": {"iterations": 100_000},
            "checkpoint": {"everyIterations": 100_000, "keep": 2},
        },
        "rolloutWorkers": {"replicas": 0, "envsPerWorker": 4},
    }
    for key, value in overrides.items():
        spec[key] = {**spec[key], **value}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(rljob("job", **spec)))
    return path


def start(path: Path, run_dir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    command = [str(KUBERL), "train", str(path), "--run-dir", str(run_dir), *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def train(path: Path, *args: str) -> subprocess.CompletedProcess:
    """`kuberl train` run to its end."""
    command = [str(KUBERL), "train", str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for_rows(run_dir: Path, count: int, process: subprocess.Popen, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while len(rows(run_dir)) < count:
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, f"fewer than {count} iterations in {timeout}s"
        time.sleep(0.1)


def test_sigterm_checkpoints_within_5s_and_a_rerun_continues(tmp_path):
    job, run_dir, port = manifest(tmp_path), tmp_path / "run", free_port()
    process = start(job, run_dir, "--metrics-port", str(port))
    wait_for_rows(run_dir, 3, process)

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    sampled = re.search(r'kuberl_env_steps_sampled_total\{[^}]*rljob="job"[^}]*\} (\S+)', metrics)
    assert sampled and float(sampled.group(1)) > 0, metrics
    # What the operator reads into the RLJob's status.progress while the driver runs.
    progress = progress_from_metrics(metrics)
    assert progress is not None and progress.row["iteration"] >= 3, metrics
    assert progress.row["timesteps_total"] >= progress.row["iteration"]

    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    checkpoints = run_dir / "checkpoints"
    while not any(checkpoints.glob("checkpoint-*")):
        assert time.monotonic() - sent < 5, "no checkpoint within 5 s of SIGTERM"
        time.sleep(0.02)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "interrupted by SIGTERM" in output and "run the same command again" in output
    [checkpoint] = checkpoints.glob("checkpoint-*")
    stopped_at = rows(run_dir)[-1]
    assert checkpoint.name == f"checkpoint-{stopped_at['iteration']:08d}"
    # ... and, once it has exited, from the final record that ends its log.
    final = read_final_record(output)
    assert output.rstrip().endswith(final.line())
    assert (final.outcome, final.exit_code) == (Outcome.INTERRUPTED, 128 + signal.SIGTERM)
    assert final.message == "interrupted by SIGTERM" and final.checkpoint == str(checkpoint)
    assert final.iteration == stopped_at["iteration"]
    assert final.timesteps_total == stopped_at["timesteps_total"]

    stop_after = stopped_at["iteration"] + 3
    job = manifest(tmp_path, trainer={"stop": {"iterations": stop_after}})
    rerun = train(job, "--run-dir", str(run_dir), "--cpu-price", "0.05")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"Resuming from {checkpoint}" in rerun.stdout
    done = read_final_record(rerun.stdout)
    assert (done.outcome, done.exit_code, done.iteration) == (Outcome.STOPPED, 0, stop_after)
    assert done.message == f"stopped at iterations>={stop_after}"
    # the driver's one CPU (no rollout workers) for the whole training time, at $0.05 an hour
    assert done.cpu_hours == pytest.approx(done.time_total_s / 3600)
    assert (done.gpu_hours, done.dollars) == (0.0, pytest.approx(0.05 * done.cpu_hours))
    assert "CPU-hours: $" in rerun.stdout and "at $0.05 per CPU-hour" in rerun.stdout
    history = rows(run_dir)
    assert [r["iteration"] for r in history] == list(range(1, stop_after + 1))
    # each iteration adds its own steps: 4 envs x 64, less the steps that only reset an env
    this_iter = [r["timesteps_this_iter"] for r in history]
    assert all(200 < steps <= 256 for steps in this_iter), this_iter
    assert [r["timesteps_total"] for r in history] == list(itertools.accumulate(this_iter))


def test_a_population_checkpoints_its_trials_on_sigterm_and_a_rerun_continues(tmp_path):
    """PBT: the round in progress gives way at its trials' next iteration; the checkpoint holds
    every trial, within the grace period."""
    population = {
        "algorithm": "PBT",
        "hyperparameters": {"population": 2, "perturbation_interval": 1_000, "cpus_per_trial": 0.5},
        "trainer": {"algorithm": "PPO", "hyperparameters": {"rollout_length": 64, "num_epochs": 4}},
    }
    job, run_dir = manifest(tmp_path, trainer=population), tmp_path / "run"
    process = start(job, run_dir)
    wait_for_rows(run_dir, 2, process)

    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, output
    grace = 20  # spec.trainer.checkpoint.gracePeriodSeconds' default
    assert time.monotonic() - sent < grace, output
    stopped_at = rows(run_dir)[-1]
    [checkpoint] = (run_dir / "checkpoints").glob("checkpoint-*")
    assert checkpoint.name == f"checkpoint-{stopped_at['iteration']:08d}"
    assert len(stopped_at["trials"]) == 2

    stop_after = stopped_at["iteration"] + 1
    job = manifest(tmp_path, trainer=population | {"stop": {"iterations": stop_after}})
    rerun = train(job, "--run-dir", str(run_dir))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"Resuming from {checkpoint}" in rerun.stdout
    after = rows(run_dir)[-1]
    assert after["iteration"] == stop_after
    for old, new in zip(stopped_at["trials"], after["trials"], strict=True):
        assert new["timesteps_total"] > old["timesteps_total"]


def test_corrupt_checkpoint_skipped_and_other_algorithm_refused(tmp_path):
    job, run_dir = manifest(tmp_path, trainer={"stop": {"iterations": 2}}), tmp_path / "run"
    first = train(job, "--run-dir", str(run_dir))
    assert first.returncode == 0, first.stdout + first.stderr
    broken = run_dir / "checkpoints" / "checkpoint-00000009"
    broken.mkdir()
    (broken / "meta.json").write_text("{ truncated")

    again = manifest(tmp_path, trainer={"stop": {"iterations": 3}})
    second = train(again, "--run-dir", str(run_dir))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "skipping corrupt checkpoint" in second.stderr + second.stdout
    assert "checkpoint-00000002 (iteration 2" in second.stdout

    other = manifest(tmp_path, trainer={"algorithm": "PG", "hyperparameters": {}})
    refused = train(other, "--run-dir", str(run_dir))
    # Retrying would change nothing: the operator fails the job at once with the message.
    assert refused.returncode == EXIT_INVALID_JOB, refused.stdout + refused.stderr
    assert "written for algorithm='PPO', this job has algorithm='PG'" in refused.stderr
    assert read_final_record(refused.stdout).outcome == Outcome.INVALID_JOB


def test_invalid_manifest_and_missing_file(tmp_path):
    bad = manifest(tmp_path, trainer={"hyperparameters": {"lerning_rate": 0.1}})
    out = train(bad)
    assert out.returncode == EXIT_INVALID_JOB
    assert (
        "spec.trainer.hyperparameters.lerning_rate" in out.stderr and "learning_rate" in out.stderr
    )
    record = read_final_record(out.stdout)
    assert (record.outcome, record.exit_code) == (Outcome.INVALID_JOB, EXIT_INVALID_JOB)
    assert "spec.trainer.hyperparameters.lerning_rate" in record.message
    missing = train(tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert read_final_record(missing.stdout) is None  # no job was read to end


def test_what_only_the_driver_finds_is_an_invalid_job(tmp_path):
    # An env id the operator, which has no gymnasium, cannot check.
    unknown_env = train(manifest(tmp_path, trainer={"env": "CartPol-v1"}))
    assert unknown_env.returncode == EXIT_INVALID_JOB, unknown_env.stdout + unknown_env.stderr
    record = read_final_record(unknown_env.stdout)
    assert record.outcome == Outcome.INVALID_JOB
    assert "spec.trainer.env" in record.message and "did you mean 'CartPole-v1'" in record.message

    # More CPUs per worker than any node of this machine's private Ray will ever have.
    too_big = manifest(tmp_path, rolloutWorkers={"replicas": 1, "cpusPerWorker": 4096})
    out = train(too_big, "--run-dir", str(tmp_path / "run"))
    assert out.returncode == EXIT_INVALID_JOB, out.stdout + out.stderr
    record = read_final_record(out.stdout)
    assert record.outcome == Outcome.INVALID_JOB
    assert "rolloutWorkers.cpusPerWorker=4096 but the largest Ray node has" in record.message


def ray_rollout_workers(root: int) -> list[int]:
    """PIDs of rollout-worker actors among the descendants of `root` (Ray names its worker
    processes after the actor class)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            stack.append(child)
            try:
                if b"RolloutWorker" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(child)
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_killed_remote_worker_is_replaced_and_training_finishes(tmp_path):
    job = manifest(
        tmp_path,
        trainer={"stop": {"iterations": 25}},
        # One: a second would start once the first had, and might still be starting below.
        rolloutWorkers={"replicas": 1, "cpusPerWorker": 0.5},
    )
    run_dir = tmp_path / "run"
    process = start(job, run_dir)
    wait_for_rows(run_dir, 3, process, timeout=180)
    workers = ray_rollout_workers(process.pid)
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    history = rows(run_dir)
    assert history[-1]["iteration"] == 25
    assert history[-1]["worker_restarts"] == 1


@pytest.mark.slow
def test_a_local_ray_keeps_its_token_out_of_the_home_directory(tmp_path):
    """Ray turns token authentication on for a new local instance when RAY_AUTH_MODE is unset
    and would save its token in ~/.ray/auth_token, readable by every user and left behind: the
    run's private Ray gets its token through its processes' environment instead."""
    job = manifest(tmp_path, trainer={"stop": {"iterations": 2}}, rolloutWorkers={"replicas": 1})
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {
        "HOME": str(home)
    }
    command = [str(KUBERL), "train", str(job), "--run-dir", str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert rows(tmp_path / "run")[-1]["iteration"] == 2
    # Token authentication is on (the run's own token, in its processes' environment), and Ray's
    # banner saying it turned it on is not shown: nothing is wrong.
    assert "token authentication" not in result.stderr.lower() + result.stdout.lower()
    assert list(home.rglob("*auth_token*")) == []
