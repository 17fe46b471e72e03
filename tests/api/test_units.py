"""The API's pure parts: selectors, continue tokens, token files, the phase of an ended trainer,
the rule that an unauthenticated API serves on loopback only (and loopback Host names only), and
a trainer's environment."""

import json
import math
import socket
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from kuberl_api.auth import load_tokens
from kuberl_api.backend import ApiError
from kuberl_api.guard import host_name, is_loopback
from kuberl_api.processes import trainer_environment
from kuberl_api.run_files import with_progress
from kuberl_api.selectors import (
    decode_cluster_continue,
    decode_continue,
    encode_continue,
    matches,
    parse_label_selector,
)
from kuberl_contract.final_record import EXIT_INVALID_JOB, FinalRecord, Outcome
from kuberl_contract.json_values import finite_or_none
from kuberl_operator.spec import Phase, RLJobStatus
from kuberl_operator.status.lifecycle import enter
from kuberl_operator.status.local_decide import Change, EndedTrainer, trainer_ended
from testkit import ROOT, free_port, run_kuberl

LABELS = {"team": "rl", "tier": "gold"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("team=rl", True),
        ("team==rl,tier=gold", True),
        ("team!=rl", False),
        ("team in (rl, vision)", True),
        ("tier notin (gold)", False),
        ("canary", False),
        ("!canary,team", True),
        ("missing!=x", True),
    ],
)
def test_label_selectors(selector, expected):
    assert matches(parse_label_selector(selector), LABELS) is expected


@pytest.mark.parametrize("selector", ["team in rl", "=x", "a b", "team in ()"])
def test_malformed_selectors_are_400(selector):
    with pytest.raises(ApiError) as error:
        parse_label_selector(selector)
    assert error.value.code == 400 and error.value.causes[0].field == "labelSelector"


def test_continue_tokens_round_trip_and_reject_forgeries():
    assert decode_continue(encode_continue("job-7")) == "job-7"
    assert decode_continue(None) is None
    for forged in ("%%%", "bm9wZQ==", encode_continue("x")[:-4]):
        with pytest.raises(ApiError):
            decode_continue(forged)
    # The list of every namespace resumes after a (namespace, name); each list takes only its own.
    assert decode_cluster_continue(encode_continue("job-7", "team-a")) == ("team-a", "job-7")
    assert decode_cluster_continue(None) is None
    for forged in ("%%%", encode_continue("job-7"), encode_continue("x", "y")[:-4]):
        with pytest.raises(ApiError):
            decode_cluster_continue(forged)
    with pytest.raises(ApiError) as error:
        decode_continue(encode_continue("job-7", "team-a"))
    assert error.value.causes[0].field == "continue"


def test_tokens_from_a_file_and_the_environment(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# team tokens\nalpha\n\n  beta  \n")
    assert load_tokens(path, {"KUBERL_API_TOKEN": "gamma"}) == {"alpha", "beta", "gamma"}
    assert load_tokens(None, {}) == set()
    path.write_text("# only a comment\n")
    with pytest.raises(ValueError, match="no tokens"):
        load_tokens(path, {})


RUNNING = RLJobStatus(phase=Phase.RUNNING, attempt=1)
ENDED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def after(change: Change) -> RLJobStatus:
    """A Running job's status once `change` befell it."""
    return enter(RUNNING, change.events, change.entered, ENDED_AT, 1)


@pytest.mark.parametrize(
    ("code", "stopping", "suspend", "phase", "reason", "attempt"),
    [
        (0, False, False, Phase.SUCCEEDED, "DriverSucceeded", 1),
        (0, True, True, Phase.SUCCEEDED, "DriverSucceeded", 1),
        (143, True, True, Phase.SUSPENDED, "Suspended", 1),
        (143, True, False, Phase.RESUMING, "Resuming", 2),  # resumed while it was stopping
        (143, False, False, Phase.FAILED, "DriverFailed", 1),  # someone else's SIGTERM
        (1, False, False, Phase.FAILED, "DriverFailed", 1),
        (EXIT_INVALID_JOB, False, False, Phase.FAILED, "InvalidSpec", 1),
        (None, False, False, Phase.FAILED, "TrainerLost", 1),
    ],
)
def test_the_phase_of_an_ended_trainer(code, stopping, suspend, phase, reason, attempt):
    change = trainer_ended(EndedTrainer(code, 42, stopping), suspend)
    status = after(change)
    assert (status.phase, status.attempt, change.entered.reason) == (phase, attempt, reason)
    assert reason in {condition.reason for condition in status.conditions}


def test_an_invalid_job_says_why_in_the_trainers_words():
    final = FinalRecord(
        Outcome.INVALID_JOB, EXIT_INVALID_JOB, "spec.trainer.env: 'CartPol-v1' is unknown", 1.0
    )
    change = trainer_ended(EndedTrainer(EXIT_INVALID_JOB, 42, final=final), suspend=False)
    reason, message = change.entered.reason, change.entered.message
    assert (after(change).phase, reason) == (Phase.FAILED, "InvalidSpec")
    assert message == "the driver found the job invalid: spec.trainer.env: 'CartPol-v1' is unknown"


def test_a_trainer_that_fails_without_a_final_record_is_known_by_its_last_words():
    crashed = EndedTrainer(1, 42, last_output="MemoryError")
    said = trainer_ended(crashed, suspend=False).entered.message
    assert said == "the trainer exited with status 1; last output: MemoryError"
    final = FinalRecord(Outcome.FAILED, 1, "the learner thread died", 1.0)
    recorded = EndedTrainer(1, 42, final=final, last_output="Traceback (most recent call last)")
    said = trainer_ended(recorded, suspend=False).entered.message
    assert said == "the trainer exited with status 1: the learner thread died"


def test_the_newest_checkpoint_comes_from_the_rows_and_the_final_record(tmp_path):
    def row(iteration: int, checkpoint: str | None) -> str:
        return json.dumps(
            {"iteration": iteration, "timesteps_total": 128, "checkpoint": checkpoint}
        )

    document = {"status": {"progress": {"iteration": 0, "timesteps": 0}}}
    (tmp_path / "progress.jsonl").write_text(row(1, None) + "\n")
    assert "lastCheckpoint" not in with_progress(document, tmp_path)["status"]["progress"]

    (tmp_path / "progress.jsonl").write_text(row(1, None) + "\n" + row(6, "s3://b/ckpt-5") + "\n")
    document = with_progress(document, tmp_path)
    assert document["status"]["progress"]["lastCheckpoint"] == "s3://b/ckpt-5"
    # No folder is looked at: a stray checkpoint directory changes nothing.
    (tmp_path / "checkpoints" / "checkpoint-00000009").mkdir(parents=True)
    assert with_progress(document, tmp_path)["status"]["progress"]["lastCheckpoint"] == (
        "s3://b/ckpt-5"
    )
    final = FinalRecord(
        Outcome.STOPPED,
        0,
        "stopped at iterations>=6",
        2.0,
        6,
        768,
        None,
        None,
        1.0,
        "s3://b/ckpt-6",
    )
    ended = with_progress(document, tmp_path, final)
    assert ended["status"]["progress"]["lastCheckpoint"] == "s3://b/ckpt-6"


def test_numbers_that_are_not_finite_become_null_wherever_they_are():
    document = {"status": {"progress": [1.5, math.nan, {"rate": math.inf}]}, "text": "NaN"}
    assert finite_or_none(document) == {
        "status": {"progress": [1.5, None, {"rate": None}]},
        "text": "NaN",
    }
    assert (finite_or_none(-math.inf), finite_or_none(2.5), finite_or_none(3)) == (None, 2.5, 3)


def test_no_tokens_means_loopback_only(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = run_kuberl(
        "serve", "--host", "0.0.0.0", "--port", free_port(), "--data-dir", tmp_path, env=env
    )
    assert out.returncode == 1
    assert "refusing to serve on 0.0.0.0 without authentication" in out.stderr
    missing = run_kuberl(
        "serve", "--token-file", tmp_path / "nope", "--data-dir", tmp_path, env=env
    )
    assert missing.returncode == 1 and "--token-file" in missing.stderr


def test_serve_without_the_api_extra_says_in_one_line_what_to_install(tmp_path):
    # As after an install of the trainer extra only: fastapi cannot be imported.
    script = (
        "import sys; sys.modules['fastapi'] = None; sys.argv = ['kuberl', 'serve', "
        f"'--data-dir', {str(tmp_path)!r}]; from kuberl_cli.main import app; app()"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("kuberl serve needs kuberl's 'api' extra (fastapi not installed): ")
    assert line.endswith(f"{sys.executable} -m pip install -e '{ROOT}[api]'")


def test_serve_on_a_port_in_use_says_so_in_one_line_naming_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_kuberl("serve", "--port", port, "--data-dir", tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"kuberl serve: port {port} on 127.0.0.1 is in use by another program: pass --port"
    )
    assert "Errno" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LocalHost:8080", True),
        ("127.0.0.1:1", True),
        ("127.9.9.9", True),
        ("[::1]:8080", True),
        ("[::1]", True),
        ("localhost.evil.example", False),
        ("evil.localhost", False),
        ("10.0.0.1:8080", False),
        ("::1", False),  # not a Host header: an IPv6 address needs brackets
        ("", False),
    ],
)
def test_loopback_host_names(host, loopback):
    assert is_loopback(host_name(host)) is loopback


def test_a_trainer_gets_the_environment_without_the_api_token():
    environ = {"KUBERL_API_TOKEN": "secret", "PATH": "/bin", "KUBERL_SERVER": "http://x"}
    assert trainer_environment(environ) == {
        "PATH": "/bin",
        "KUBERL_SERVER": "http://x",
        "PYTHONUNBUFFERED": "1",
    }
