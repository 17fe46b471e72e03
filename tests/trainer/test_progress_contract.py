"""The progress contract (progress_row.py): the progress rows of a run directory, read back as every
reader reads them, and the final record `kuberl train` prints as it ends, read back the way the
operator and the API read a driver's log."""

import json
import math

import pytest

from kuberl_contract.final_record import (
    EXIT_INVALID_JOB,
    FINAL_RECORD_PREFIX,
    FinalRecord,
    Outcome,
    read_final_record,
)
from kuberl_contract.progress_row import (
    PROGRESS_FILE,
    ROW_GROUPS,
    ProgressFileError,
    RowGroup,
    parse_rows,
    read_progress_file,
    read_rows,
    row_group,
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


ROWS = [{"iteration": 1, "timesteps_total": 256}, {"iteration": 2, "timesteps_total": 512}]
TEXT = "".join(json.dumps(row) + "\n" for row in ROWS)


def test_rows_read_back_whole_and_a_row_being_written_is_left_for_later(tmp_path):
    path = tmp_path / PROGRESS_FILE
    assert read_rows(path) == []  # not started yet
    path.write_text(TEXT + '{"iteration": 3, "timest')
    assert read_rows(path) == ROWS
    path.write_text(TEXT + '{"iteration": 3}')  # whole, its newline not yet written
    assert read_rows(path) == [*ROWS, {"iteration": 3}]


def test_reading_a_progress_file_once_tells_whether_it_ends_within_a_line(tmp_path):
    path = tmp_path / PROGRESS_FILE
    assert read_progress_file(path) is None  # not started yet
    path.write_text("")
    assert read_progress_file(path) == ([], True)
    path.write_text(TEXT)
    assert read_progress_file(path) == (ROWS, True)
    path.write_text(TEXT + '{"iteration": 3, "timest')  # cut short: left out
    assert read_progress_file(path) == (ROWS, False)
    path.write_text(TEXT + '{"iteration": 3}')  # whole, but appending would join its line
    assert read_progress_file(path) == ([*ROWS, {"iteration": 3}], False)


@pytest.mark.parametrize("line", ["garbage", '{"timesteps_total": 1}', "[1, 2]"])
def test_a_line_that_is_not_a_row_before_the_last_is_reported_with_its_number(line):
    with pytest.raises(ProgressFileError, match=r"^run/progress.jsonl:2: not a progress row"):
        parse_rows(f"{json.dumps(ROWS[0])}\n{line}\n{json.dumps(ROWS[1])}\n", "run/progress.jsonl")


def test_every_key_the_driver_writes_has_its_group_and_the_rest_are_the_policys():
    assert row_group("episode_return_mean") is RowGroup.CHARTS
    assert row_group("best_trial") is RowGroup.CHARTS
    for key in ("samples_per_s", "worker_downtime_s", "workers_ready", "stragglers_dropped"):
        assert row_group(key) is RowGroup.PERF, key
    assert row_group("learn_time_s") is RowGroup.PERF  # an optimizer's timer
    for key in ("policy_lag", "policy_lag_max", "learner_queue_depth", "learner_utilisation"):
        assert row_group(key) is RowGroup.LEARNER, key
    assert row_group("policy_loss") is RowGroup.LOSSES
    assert row_group("a_new_statistic") is RowGroup.LOSSES
    assert {row_group(key) for key in ROW_GROUPS} == set(RowGroup)
