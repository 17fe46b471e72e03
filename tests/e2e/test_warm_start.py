"""spec.trainer.warmStart: a new run starts from a trained policy's checkpoint, as a user runs it
(`kuberl train` in a subprocess), and refuses one that does not fit, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kuberl_cli.train import train_command
from kuberl_contract.final_record import (
    EXIT_INVALID_JOB,
    EXIT_SUCCEEDED,
    Outcome,
    read_final_record,
)
from kuberl_trainer.job import resume
from kuberl_trainer.job.checkpoint import checkpoint_named
from testkit import fast_cartpole_job, run_kuberl


def fast_job(path: Path, **trainer) -> Path:
    """cartpole-ppo-fast.yaml, greedy evaluation every iteration, with `trainer` merged in."""
    settings = {
        "evaluation": {"everyIterations": 1, "episodes": 10},
        "checkpoint": {"everyIterations": 10, "keep": 1},
    }
    return fast_cartpole_job(path, **(settings | trainer))


def train(manifest: Path, run_dir: Path):
    result = run_kuberl("train", manifest, "--run-dir", run_dir, timeout=300)
    return result, read_final_record(result.stdout)


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> tuple[Path, int]:
    """A run that solved CartPole from scratch, normalizing observations, and its env steps."""
    directory = tmp_path_factory.mktemp("source")
    job = fast_job(directory / "job.yaml", normalization={"observations": True})
    result, record = train(job, directory / "run")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert record.evaluation_return_mean >= 475
    return directory / "run", record.timesteps_total


def test_a_warm_start_solves_in_fewer_steps_than_from_scratch(solved, tmp_path):
    source, scratch_steps = solved
    job = fast_job(
        tmp_path / "job.yaml",
        normalization={"observations": True},
        warmStart={"checkpoint": str(source)},
    )
    result, record = train(job, tmp_path / "run")

    assert result.returncode == 0, result.stderr[-2000:]
    source_checkpoint = checkpoint_named(str(source))
    assert f"Warm start from {source_checkpoint.uri} (PPO on CartPole-v1" in result.stdout
    assert record.evaluation_return_mean >= 475
    assert record.timesteps_total < scratch_steps, (record.timesteps_total, scratch_steps)
    # The observation statistics came along: the new run's count starts at the source's.
    started = checkpoint_named(str(tmp_path / "run")).state["normalization"]["obs"]["count"]
    assert started > source_checkpoint.state["normalization"]["obs"]["count"]


def test_kuberl_train_reads_a_local_warm_start_once(solved, tmp_path, monkeypatch, capsys):
    """Checked before anything starts and used by the driver: one read of the checkpoint (a
    replay buffer saved with it can be gigabytes)."""
    source, _ = solved
    reads = []
    read = resume.checkpoint_named
    monkeypatch.setattr(
        resume, "checkpoint_named", lambda named: reads.append(named) or read(named)
    )
    job = fast_job(
        tmp_path / "job.yaml",
        normalization={"observations": True},
        warmStart={"checkpoint": str(source)},
        stop={"iterations": 1, "timesteps": 50_000},
    )

    assert train_command(job, tmp_path / "run", None) == EXIT_SUCCEEDED

    assert reads == [str(source)]
    assert "Warm start from" in capsys.readouterr().out


def test_a_run_with_checkpoints_of_its_own_resumes_from_them_not_from_the_warm_start(
    solved, tmp_path
):
    source, _ = solved
    job = fast_job(
        tmp_path / "job.yaml",
        warmStart={"checkpoint": str(source)},
        stop={"iterations": 2, "timesteps": 50_000},
    )
    first, _ = train(job, tmp_path / "run")
    assert "Warm start from" in first.stdout
    fast_job(
        tmp_path / "job.yaml",
        warmStart={"checkpoint": str(source)},
        stop={"iterations": 3, "timesteps": 50_000},
    )

    again, record = train(job, tmp_path / "run")

    assert again.returncode == 0, again.stderr[-2000:]
    assert "Warm start from" not in again.stdout
    assert "Resuming from" in again.stdout and record.iteration == 3


def test_a_network_that_does_not_fit_is_an_invalid_job_naming_the_field_and_layers(
    solved, tmp_path
):
    source, _ = solved
    job = fast_job(
        tmp_path / "job.yaml",
        warmStart={"checkpoint": str(source)},
        hyperparameters={"hidden_sizes": [32, 32], "rollout_length": 32},
    )
    result, record = train(job, tmp_path / "run")

    assert result.returncode == EXIT_INVALID_JOB, result.stdout[-2000:]
    assert record.outcome == Outcome.INVALID_JOB
    # kuberl train validates first, as kuberl validate does: the file names the job.
    assert record.message.startswith(f"{job}: spec.trainer.warmStart.checkpoint: cannot start ")
    assert "actor.0.weight is (64, 4) in the checkpoint, (32, 4) in this job" in record.message


def test_a_warm_start_that_names_nothing_is_an_invalid_job(tmp_path):
    job = fast_job(tmp_path / "job.yaml", warmStart={"checkpoint": str(tmp_path / "missing")})
    result, record = train(job, tmp_path / "run")

    assert result.returncode == EXIT_INVALID_JOB
    assert record.message == (
        f"{job}: spec.trainer.warmStart.checkpoint: {tmp_path / 'missing'}: "
        "no such file or directory"
    )


def test_kuberl_train_says_a_warm_start_from_a_job_needs_the_api_or_a_cluster(tmp_path):
    """Only the kuberl API and the operator know where a job keeps its checkpoints; a file
    trained here names the run directory instead."""
    job = fast_job(tmp_path / "job.yaml", warmStart={"job": "teacher"})
    result, record = train(job, tmp_path / "run")

    assert result.returncode == EXIT_INVALID_JOB
    assert record.message.startswith(
        "spec.trainer.warmStart.job: 'teacher' names a job of the kuberl API or a cluster"
    )
    assert "set warmStart.checkpoint to that job's run directory" in record.message


def test_the_driver_refuses_a_warm_start_that_does_not_fit(solved, tmp_path):
    """What validation cannot see (an object store's checkpoint), the driver refuses alike."""
    from kuberl_contract.config import RolloutConfig
    from kuberl_trainer.errors import IncompatibleCheckpointError
    from kuberl_trainer.job.driver import Driver
    from testkit import trainer_config

    source, _ = solved
    config = trainer_config(
        algorithm="PPO",
        warmStart={"checkpoint": f"file://{source}/checkpoints"},
        hyperparameters={"hidden_sizes": [32, 32]},
        stop={"iterations": 1},
    )
    driver = Driver(config, RolloutConfig(replicas=0, envsPerWorker=2), tmp_path / "run", "job")
    with pytest.raises(IncompatibleCheckpointError) as raised:
        driver.run()
    assert str(raised.value).startswith(
        f"spec.trainer.warmStart.checkpoint: cannot start from file://{source}/checkpoints/"
    )
    assert "actor.0.weight is (64, 4) in the checkpoint, (32, 4) in this job" in str(raised.value)


def test_validate_refuses_a_warm_start_that_does_not_fit_naming_the_field(solved, tmp_path):
    source, _ = solved
    fits = fast_job(tmp_path / "fits.yaml", warmStart={"checkpoint": str(source)})
    misfit = fast_job(
        tmp_path / "misfit.yaml",
        warmStart={"checkpoint": str(source)},
        hyperparameters={"hidden_sizes": [32], "rollout_length": 32},
    )

    assert run_kuberl("validate", fits).returncode == 0
    result = run_kuberl("validate", misfit)
    assert result.returncode == 1
    assert f"{misfit}: spec.trainer.warmStart.checkpoint: cannot start from " in result.stderr
    assert "actor.0.weight is (64, 4) in the checkpoint, (32, 4) in this job" in result.stderr
