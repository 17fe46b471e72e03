"""`kuberl.train` and `kuberl.load`: a job trained from Python as `kuberl train` trains it, the
run's final record and directory returned, a progress line or none, bad input refused naming
the field."""

from __future__ import annotations

import pytest
import yaml

import kuberl
from kuberl_contract.final_record import Outcome
from testkit import rljob

TRAINER = {
    "algorithm": "PPO",
    "env": "CartPole-v1",
    "seed": 0,
    "stop": {"iterations": 2},
    "hyperparameters": {"rollout_length": 64, "num_epochs": 1},
}


def tiny_job(**trainer) -> dict:
    """PPO on CartPole for 2 short iterations on the local worker, checkpointed at its end."""
    return rljob("api", trainer=TRAINER | trainer)


def test_a_dict_trains_and_returns_the_final_record_and_run_dir(tmp_path, capsys):
    run = kuberl.train(tiny_job(), run_dir=tmp_path / "run", progress=False)

    assert run.run_dir == tmp_path / "run"
    assert run.record.outcome is Outcome.STOPPED
    assert run.record.exit_code == 0
    assert run.record.iteration == 2
    assert run.record.timesteps_total > 0
    assert run.record.checkpoint == str(tmp_path / "run" / "checkpoints" / "checkpoint-00000002")
    assert (run.run_dir / "progress.jsonl").is_file()
    assert capsys.readouterr().out == ""  # progress=False: nothing shown
    with pytest.raises(AttributeError):  # frozen
        run.run_dir = tmp_path  # type: ignore[misc]

    policy = kuberl.load(run.run_dir)
    try:
        assert policy.iteration == 2
        assert len(policy.evaluate(episodes=2, seed=0).returns) == 2
    finally:
        policy.close()


def test_a_file_trains_with_overrides_and_shows_one_redrawn_progress_line(tmp_path, capsys):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(tiny_job()))

    run = kuberl.train(manifest, run_dir=tmp_path / "run", trainer__stop__iterations=3)

    assert run.record.iteration == 3
    shown = capsys.readouterr().out
    assert shown.count("\r") == 3  # one redraw per iteration, on one line
    assert shown.endswith("\n")
    last = shown.rstrip("\n").split("\r")[-1]
    assert last.startswith("api [####################]  ")  # stop.iterations reached
    assert "iter 3" in last


@pytest.mark.parametrize(
    "job, overrides, field",
    [
        (tiny_job(algorithm="NOPE"), {}, "spec.trainer.algorithm"),
        (tiny_job(), {"trainer__stop__iterations": "many"}, "spec.trainer.stop.iterations"),
        (tiny_job(env="CartPol-v1"), {}, "spec.trainer.env"),
    ],
)
def test_bad_input_raises_a_job_error_naming_the_field(job, overrides, field, tmp_path):
    with pytest.raises(kuberl.JobError, match=field) as raised:
        kuberl.train(job, run_dir=tmp_path / "run", progress=False, **overrides)
    assert "kuberl-job-" not in str(raised.value)  # a dict's problems name no temporary file
    assert raised.value.record.outcome is Outcome.INVALID_JOB
    assert not (tmp_path / "run").exists()


def test_a_missing_manifest_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no RLJob manifest"):
        kuberl.train(tmp_path / "nothing.yaml")


def test_a_changed_spec_resumes_only_when_told_to(tmp_path):
    run_dir = tmp_path / "run"
    kuberl.train(tiny_job(), run_dir=run_dir, progress=False)
    changed = {"trainer__hyperparameters__learning_rate": 0.001, "trainer__stop__iterations": 3}

    with pytest.raises(kuberl.JobError, match=r"hyperparameters\.learning_rate"):
        kuberl.train(tiny_job(), run_dir=run_dir, progress=False, **changed)
    resumed = kuberl.train(tiny_job(), run_dir=run_dir, progress=False, resume=True, **changed)

    assert resumed.record.iteration == 3
