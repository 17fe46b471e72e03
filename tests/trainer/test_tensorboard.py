"""TensorBoard event files of real `kuberl train` runs, read back record by record (TFRecord framing
with its CRCs, tensorboardX's Event protobuf) and held against the runs' progress.jsonl."""

import math
import struct
from pathlib import Path

import yaml
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from kuberl_contract.progress_row import PROGRESS_FILE, TIMESTEPS_TOTAL, read_rows
from kuberl_trainer.job.tensorboard import TENSORBOARD_DIR, scalar_tag, scalars
from testkit import edited, rljob, run_kuberl


def read_events(path: Path) -> list[Event]:
    """Every event of one file; a bad length or payload CRC fails the test."""
    events, data = [], path.read_bytes()
    offset = 0
    while offset < len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        assert header_crc == masked_crc32c(header), f"{path}: bad length CRC at {offset}"
        payload = data[offset + 12 : offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])
        assert payload_crc == masked_crc32c(payload), f"{path}: bad data CRC at {offset}"
        events.append(Event.FromString(payload))
        offset += 16 + length
    return events


def logged_scalars(directory: Path) -> dict[tuple[str, int], float]:
    """(tag, step) → value over every event file of `directory`."""
    found = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in read_events(path):
            for value in event.summary.value:
                key = (value.tag, event.step)
                assert key not in found, f"{key} logged twice"
                found[key] = value.simple_value
    return found


def expected_scalars(run_dir: Path) -> dict[tuple[str, int], float]:
    rows = read_rows(run_dir / PROGRESS_FILE)
    return {
        (tag, row[TIMESTEPS_TOTAL]): value for row in rows for tag, value in scalars(row).items()
    }


def test_tags_are_grouped_by_meaning():
    assert scalar_tag("episode_return_mean") == "charts/episode_return_mean"
    assert scalar_tag("evaluation_return_mean") == "charts/evaluation_return_mean"
    assert scalar_tag("episodes_total") == "charts/episodes_total"
    assert scalar_tag("samples_per_s") == "perf/samples_per_s"
    assert scalar_tag("time_this_iter_s") == "perf/time_this_iter_s"
    assert scalar_tag("worker_restarts") == "perf/worker_restarts"
    assert scalar_tag("worker_downtime_s") == "perf/worker_downtime_s"
    assert scalar_tag("policy_lag") == "learner/policy_lag"
    assert scalar_tag("learner_utilisation") == "learner/learner_utilisation"
    assert scalar_tag("policy_loss") == "losses/policy_loss"
    assert scalar_tag("td_error_mean") == "losses/td_error_mean"
    row = {"timesteps_total": 256, "iteration": 2, "episode_return_mean": None, "kl": math.nan}
    assert scalars(row | {"entropy": 0.5, "flag": True}) == {
        "charts/iteration": 2.0,
        "losses/entropy": 0.5,
    }


def test_a_run_and_its_resumption_log_every_progress_value(tmp_path):
    job = edited(
        rljob("board", rolloutWorkers={"replicas": 0, "envsPerWorker": 4}),
        **{
            "spec.trainer.stop": {"iterations": 3},
            "spec.trainer.evaluation": {"everyIterations": 2, "episodes": 2},
        },
    )
    manifest, run_dir = tmp_path / "job.yaml", tmp_path / "run"
    manifest.write_text(yaml.safe_dump(job))

    # First the command-line flag, then the spec's field; the second run resumes.
    first = run_kuberl("train", manifest, "--run-dir", run_dir, "--tensorboard")
    assert first.returncode == 0, first.stdout + first.stderr
    job = edited(job, **{"spec.trainer.stop": {"iterations": 5}, "spec.trainer.tensorboard": True})
    manifest.write_text(yaml.safe_dump(job))
    second = run_kuberl("train", manifest, "--run-dir", run_dir)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Resuming from" in second.stdout

    directory = run_dir / TENSORBOARD_DIR
    assert len(list(directory.glob("events.out.tfevents.*"))) == 2  # one per run
    logged, expected = logged_scalars(directory), expected_scalars(run_dir)
    assert logged.keys() == expected.keys()
    for key, value in expected.items():
        assert math.isclose(logged[key], value, rel_tol=1e-6, abs_tol=1e-6), key
    steps = sorted({step for tag, step in logged if tag == "charts/iteration"})
    assert len(steps) == 5 and steps == sorted({step for _, step in expected})  # both runs' rows
    tags = {tag for tag, _ in logged}
    assert {"charts/episode_return_mean", "perf/samples_per_s", "losses/policy_loss"} <= tags
    assert "charts/evaluation_return_mean" in tags


def test_each_policy_of_a_multi_agent_job_has_its_own_curves():
    from kuberl_trainer.job.tensorboard import scalars

    row = {
        "timesteps_total": 10,
        "episode_return_mean": 1.5,
        "kl": 0.01,
        "win_rate": None,
        "policies": [
            {"policy": "hunter", "episode_return_mean": 5.9, "kl": 0.02},
            {"policy": "prey", "episode_return_mean": float("nan")},
        ],
    }
    assert scalars(row) == {
        "charts/episode_return_mean": 1.5,
        "losses/kl": 0.01,
        "charts/episode_return_mean/hunter": 5.9,
        "losses/kl/hunter": 0.02,
    }
