"""Running a job again in its run directory after changing spec.trainer: a change that makes it
another run (a hyperparameter, the seed) is refused unless --resume says to continue that run, a
change that continues it (a later stop) resumes, each with one line saying what changed; a network
of other shapes is an invalid job even then (exit 65, the final record naming the layers and the
fields changed, the checkpoint kept)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kuberl_contract.final_record import EXIT_INVALID_JOB, Outcome, read_final_record
from testkit import rljob, run_kuberl


def write_job(path: Path, hidden_sizes: list[int], learning_rate: float, iterations: int) -> Path:
    trainer = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "seed": 0,
        "hyperparameters": {
            "rollout_length": 16,
            "num_epochs": 1,
            "hidden_sizes": hidden_sizes,
            "learning_rate": learning_rate,
        },
        "stop": {"iterations": iterations},
        "checkpoint": {"everyIterations": 1, "keep": 2},
    }
    rollout = {"replicas": 0, "envsPerWorker": 2}
    path.write_text(yaml.safe_dump(rljob("job", trainer=trainer, rolloutWorkers=rollout)))
    return path


def test_other_hidden_sizes_on_resume_are_an_invalid_job_that_keeps_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    first = run_kuberl(
        "train", write_job(tmp_path / "a.yaml", [16, 16], 3e-4, 2), "--run-dir", run_dir
    )
    assert first.returncode == 0, first.stderr
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())

    again = run_kuberl(
        "train", write_job(tmp_path / "b.yaml", [8, 8], 3e-4, 3), "--run-dir", run_dir, "--resume"
    )

    assert again.returncode == EXIT_INVALID_JOB, again.stdout + again.stderr
    record = read_final_record(again.stdout)
    assert record is not None and again.stdout.rstrip().endswith(record.line())
    assert record.outcome == Outcome.INVALID_JOB
    assert "actor.0.weight is (16, 4) in the checkpoint, (8, 4) in this job" in record.message
    assert "hyperparameters.hidden_sizes [16, 16] -> [8, 8]" in record.message
    assert "Traceback" not in again.stderr
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints


def test_a_changed_hyperparameter_is_refused_without_resume_and_continues_with_it(tmp_path):
    run_dir = tmp_path / "run"
    first = run_kuberl(
        "train", write_job(tmp_path / "a.yaml", [16, 16], 3e-4, 2), "--run-dir", run_dir
    )
    assert first.returncode == 0, first.stderr
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    changed = write_job(tmp_path / "b.yaml", [16, 16], 1e-3, 3)

    refused = run_kuberl("train", changed, "--run-dir", run_dir)

    # A sweep's second value never "resumes" into the first value's result.
    assert refused.returncode == EXIT_INVALID_JOB, refused.stdout + refused.stderr
    record = read_final_record(refused.stdout)
    assert record.outcome == Outcome.INVALID_JOB
    assert "hyperparameters.learning_rate 0.0003 -> 0.001" in record.message
    assert "stop.iterations" not in record.message  # training further is the same run
    assert "--run-dir" in record.message and "--resume" in record.message
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints

    again = run_kuberl("train", changed, "--run-dir", run_dir, "--resume")

    assert again.returncode == 0, again.stdout + again.stderr
    said = [line for line in again.stdout.splitlines() if "changed since" in line]
    assert said == [
        "Resuming with spec.trainer changed since the checkpoint: "
        "hyperparameters.learning_rate 0.0003 -> 0.001, stop.iterations 2 -> 3"
    ]
    assert read_final_record(again.stdout).iteration == 3


def test_a_later_stop_trains_further_without_resume(tmp_path):
    run_dir = tmp_path / "run"
    first = run_kuberl(
        "train", write_job(tmp_path / "a.yaml", [16, 16], 3e-4, 2), "--run-dir", run_dir
    )
    assert first.returncode == 0, first.stderr

    further = run_kuberl(
        "train", write_job(tmp_path / "b.yaml", [16, 16], 3e-4, 3), "--run-dir", run_dir
    )

    assert further.returncode == 0, further.stdout + further.stderr
    assert "Resuming from" in further.stdout
    assert read_final_record(further.stdout).iteration == 3
