"""The progress contract (progress_row.py): the final record `kuberl train` prints as it ends, read
back the way the operator and the API read a driver's log."""

import json
import math

from kuberl_trainer.progress_row import (
    EXIT_INVALID_JOB,
    FINAL_RECORD_PREFIX,
    FinalRecord,
    Outcome,
    read_final_record,
)

STOPPED = FinalRecord(
    outcome=Outcome.STOPPED,
    exit_code=0,
    message="stopped at timesteps>=20000",
    time=1_700_000_000.5,
    iteration=40,
    timesteps_total=20_480,
    episode_return_mean=187.25,
    evaluation_return_mean=None,
    time_total_s=12.5,
    checkpoint="s3://bucket/walker/checkpoint-00000040",
)


def test_a_final_record_is_one_line_of_json_and_reads_back_equal():
    line = STOPPED.line()
    assert line.startswith(FINAL_RECORD_PREFIX) and "\n" not in line
    assert json.loads(line.removeprefix(FINAL_RECORD_PREFIX))["outcome"] == "Stopped"
    log = f"Training walker: PPO on CartPole-v1\nwalker: stopped at ...\n{line}\n"
    assert read_final_record(log) == STOPPED


def test_nan_is_written_as_null_so_the_line_stays_strict_json():
    record = FinalRecord(Outcome.INTERRUPTED, 143, "interrupted by SIGTERM", 1.0, 3, 300, math.nan)
    values = json.loads(record.line().removeprefix(FINAL_RECORD_PREFIX))
    assert values["episode_return_mean"] is None
    assert read_final_record(record.line()).episode_return_mean is None
    assert record.row() == {"iteration": 3, "timesteps_total": 300}


def test_the_last_whole_record_counts_and_garbage_is_skipped():
    invalid = FinalRecord(Outcome.INVALID_JOB, EXIT_INVALID_JOB, "'CartPol-v1' is unknown", 2.0)
    log = "\n".join(
        [
            STOPPED.line(),
            invalid.line(),
            FINAL_RECORD_PREFIX + '{"outcome": "Stopped", "exit_co',  # cut short by a kill
            FINAL_RECORD_PREFIX + '{"outcome": "NoSuchOutcome", "exit_code": 0, "time": 1}',
            "Traceback (most recent call last):",
        ]
    )
    assert read_final_record(log) == invalid
    assert read_final_record("no record here\n") is None
    assert read_final_record("") is None
