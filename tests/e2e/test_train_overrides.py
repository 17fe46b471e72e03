"""`kuberl train FILE --set PATH=VALUE --seed N`, and what `kuberl train` shows on a terminal:
a progress bar that keeps its bar on a 100-column terminal, and no final record for people."""

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from kuberl_cli.overrides import OverrideError, parse_override, with_overrides
from kuberl_cli.terminal_report import TerminalReport
from kuberl_cli.train import train_command
from kuberl_contract.config import StopConditions
from kuberl_contract.final_record import (
    EXIT_INVALID_JOB,
    FINAL_RECORD_PREFIX,
    Outcome,
    read_final_record,
)
from kuberl_operator import validation
from kuberl_operator.bounded import MAX_DEPTH, load_yaml_documents
from testkit import rljob

pytestmark = pytest.mark.timeout(180)

KUBERL = Path(sys.executable).with_name("kuberl")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def manifest(tmp_path: Path) -> Path:
    """A small PPO CartPole job with a seed of its own and no stop in reach."""
    spec = {
        "trainer": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "seed": 1,
            "hyperparameters": {"rollout_length": 64, "num_epochs": 2},
            "stop": {"iterations": 100_000},
            "checkpoint": {"everyIterations": 100_000, "keep": 2, "exportPolicy": False},
        },
        "rolloutWorkers": {"replicas": 0, "envsPerWorker": 4},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(rljob("job", **spec)))
    return path


def train(*args, cwd: Path) -> subprocess.CompletedProcess:
    command = [str(KUBERL), "train", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=150, cwd=cwd)


# --- the overrides, as pure functions -----------------------------------------------------------


def test_a_path_is_dotted_below_the_manifest_or_below_spec():
    assert parse_override("spec.trainer.hyperparameters.learning_rate=0.001") == (
        ["spec", "trainer", "hyperparameters", "learning_rate"],
        0.001,
    )
    assert parse_override("trainer.stop.timesteps=10000") == (
        ["spec", "trainer", "stop", "timesteps"],
        10000,
    )
    assert parse_override(r"metadata.labels.kuberl\.io/sweep=a=b") == (
        ["metadata", "labels", "kuberl.io/sweep"],
        "a=b",
    )
    assert parse_override("trainer.hyperparameters.hidden_sizes=[32, 32]")[1] == [32, 32]
    assert parse_override("suspend=true")[1] is True


def test_overrides_change_a_copy_and_make_missing_mappings():
    document = {"spec": {"trainer": {"seed": 1, "wrappers": [{"name": "a"}]}}}
    changed = with_overrides(
        document, ["trainer.evaluation.episodes=3", "trainer.wrappers.0.name=b"], seed=9
    )
    assert changed["spec"]["trainer"] == {
        "seed": 9,
        "wrappers": [{"name": "b"}],
        "evaluation": {"episodes": 3},
    }
    assert document["spec"]["trainer"] == {"seed": 1, "wrappers": [{"name": "a"}]}


def test_null_clears_a_field_so_its_default_applies_and_makes_nothing_on_the_way():
    document = {"spec": {"trainer": {"seed": 1, "stop": {"timesteps": 5}}}}
    changed = with_overrides(
        document, ["trainer.stop.timesteps=null", "trainer.seed=null", "trainer.x.y=null"]
    )
    assert changed["spec"]["trainer"] == {"stop": {}}
    trainer = {"algorithm": "PPO", "env": "CartPole-v1", "stop": {"iterations": 1}}
    default_seed = validation.validate_rljob(rljob("cleared", trainer=trainer)).spec.trainer.seed
    document = rljob("cleared", trainer={**trainer, "seed": 7})
    cleared = validation.validate_rljob(with_overrides(document, ["trainer.seed=null"]))
    assert cleared.spec.trainer.seed == default_seed != 7


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.seed", "--set trainer.seed: expected PATH=VALUE"),
        ("=3", "--set =3: expected PATH=VALUE"),
        ("trainer..seed=3", "has an empty key between dots"),
        ("trainer.seed=", "no value: write trainer.seed=null"),
        ("trainer.seed=[1", "the value is not YAML"),
        ("trainer.env.id=3", "spec.trainer.env is a string, not a mapping"),
        ("trainer.wrappers.5.name=b", "spec.trainer.wrappers is a list of 1 items: '5'"),
    ],
)
def test_a_bad_override_is_named_with_the_reason(override, message):
    document = {"spec": {"trainer": {"env": "CartPole-v1", "wrappers": [{"name": "a"}]}}}
    with pytest.raises(OverrideError, match=re.escape(message)):
        with_overrides(document, [override])


def test_a_path_and_its_value_nest_no_deeper_than_a_manifest_may():
    document = {"spec": {"trainer": {"env": "CartPole-v1"}}}
    # spec, trainer and 61 more keys: 63 keys and the manifest's own mapping make 64 levels
    deepest = "trainer." + ".".join(["a"] * 61)
    assert len(parse_override(f"{deepest}=1")[0]) == MAX_DEPTH - 1
    for override, message in (
        (f"{deepest}.b=1", f"64 keys, and a PATH has at most {MAX_DEPTH - 1}"),
        (f"{deepest}=[1]", "its value would nest the manifest 65 levels deep"),
        ("trainer." + ".".join(["a"] * 5000) + "=1", "5002 keys"),
    ):
        with pytest.raises(OverrideError, match=re.escape(message)) as raised:
            with_overrides(document, [override])
        assert len(str(raised.value)) < 200, "a long PATH is not repeated whole"


# --- kuberl train with overrides ----------------------------------------------------------------


def test_train_applies_overrides_and_a_seed_gets_a_run_directory_of_its_own(tmp_path):
    job = manifest(tmp_path)
    first = train(job, "--seed", 7, "--set", "trainer.stop.iterations=2", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "stop at iterations>=2" in first.stdout
    run_dir = tmp_path / "runs" / "job-seed7"
    assert f"run directory {Path('runs') / 'job-seed7'}" in first.stdout
    assert (run_dir / "progress.jsonl").exists()
    assert read_final_record(first.stdout).iteration == 2

    # The checkpoint holds the seed and learning rate the overrides gave: resuming it with
    # others (--resume, or it is refused) says what changed since.
    second = train(
        job,
        "--resume",
        "--run-dir",
        run_dir,
        "--seed",
        8,
        "--set",
        "spec.trainer.stop.iterations=3",
        "--set",
        "trainer.hyperparameters.learning_rate=0.002",
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "seed 7 -> 8" in second.stdout, second.stdout
    assert "hyperparameters.learning_rate" in second.stdout and "-> 0.002" in second.stdout
    assert read_final_record(second.stdout).iteration == 3


def test_a_bad_override_is_an_invalid_job_naming_the_field(tmp_path):
    job = manifest(tmp_path)
    for override, named in (
        ("trainer.stop.timesteps=many", "spec.trainer.stop.timesteps"),
        ("trainer.hyperparameters.lerning_rate=0.1", "spec.trainer.hyperparameters.lerning_rate"),
        ("trainer.env.id=3", "spec.trainer.env is a string, not a mapping"),
    ):
        out = train(job, "--set", override, cwd=tmp_path)
        assert out.returncode == EXIT_INVALID_JOB, out.stdout + out.stderr
        assert named in out.stderr and f"{job}: " in out.stderr, out.stderr
        assert read_final_record(out.stdout).outcome == Outcome.INVALID_JOB
    assert not (tmp_path / "runs").exists()


def test_the_overridden_manifest_is_checked_as_parsed_not_written_out_and_read_again(
    tmp_path, monkeypatch, capsys
):
    """YAML is parsed once per text, the file's and each --set value's: the changed manifest is
    checked as it is, and its problem line still names the field and the reason."""
    parsed = []

    def counted(text):
        parsed.append(text)
        return load_yaml_documents(text)

    monkeypatch.setattr(validation, "load_yaml_documents", counted)
    job = manifest(tmp_path)
    overrides = ["trainer.stop.timesteps=many", "trainer.hyperparameters.num_epochs=3"]

    exit_code = train_command(job, tmp_path / "run", None, overrides=overrides)

    assert exit_code == EXIT_INVALID_JOB
    assert parsed == [job.read_text(), "many", "3"]
    problem = f"{job}: spec.trainer.stop.timesteps: must be an integer, got a string (many)"
    assert capsys.readouterr().err.splitlines() == [problem]
    assert not (tmp_path / "run").exists()


def test_a_path_thousands_of_keys_deep_is_an_invalid_job_in_one_line(tmp_path):
    job = manifest(tmp_path)
    out = train(job, "--set", "trainer." + ".".join(["a"] * 3000) + "=1", cwd=tmp_path)
    assert out.returncode == EXIT_INVALID_JOB, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and "3002 keys" in out.stderr, out.stderr
    assert read_final_record(out.stdout).outcome == Outcome.INVALID_JOB


# --- on a terminal ------------------------------------------------------------------------------


def drawn(title: str, width: int) -> list[str]:
    """The live report's lines at `width` columns after one iteration of a 100,000-step job."""
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    report = TerminalReport(title, StopConditions(timesteps=100_000), console)
    report.update(
        {
            "iteration": 123,
            "timesteps_total": 45_000,
            "timesteps_this_iter": 500,
            "time_total_s": 9.1,
            "time_this_iter_s": 0.1,
            "episode_return_mean": 123.4,
            "evaluation_return_mean": 200.0,
        }
    )
    console.print(report.progress.get_renderable())
    return console.file.getvalue().splitlines()


def test_the_progress_bar_keeps_the_whole_env_name_and_its_bar_on_100_columns():
    title = "a-job-with-a-rather-long-name PPO ALE/MontezumaRevengeNoFrameskip-v4"
    bar, figures = drawn(title, 100)
    assert bar.startswith(title) and len(bar) <= 100, bar
    assert bar.rstrip().endswith("0:00:00") and bar.count("━") >= 10, bar
    assert figures == (
        "iter 123  45,000 / 100,000 steps  return 123.4  eval 200.0  5,000 steps/s"
        "  ETA 0:00:11 (timesteps)"
    )


def test_a_narrow_terminal_drops_the_bar_and_columns_but_not_the_env_name():
    title = "a-job-with-a-rather-long-name PPO ALE/MontezumaRevengeNoFrameskip-v4"
    *title_lines, figures = drawn(title, 40)
    assert " ".join(line.strip() for line in title_lines) == f"{title} 0:00:00"
    assert all(len(line) <= 40 for line in [*title_lines, figures])
    assert figures == "45,000 / 100,000 steps"


def test_on_a_terminal_train_draws_the_bar_and_leaves_the_final_record_out(tmp_path):
    job = manifest(tmp_path)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    command = [str(KUBERL), "train", str(job), "--set", "trainer.stop.iterations=3"]
    process = subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, cwd=tmp_path, env=env
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=150) == 0
    text = ANSI.sub("", output.decode(errors="replace"))
    assert FINAL_RECORD_PREFIX not in text
    assert "job: stopped at iterations>=3 after 3 iterations" in text
    bars = [line for line in text.splitlines() if "job PPO CartPole-v1 " in line and "━" in line]
    assert bars and all(line.count("━") >= 30 for line in bars), text
    assert any("iter " in line and " steps" in line for line in text.splitlines()), text
