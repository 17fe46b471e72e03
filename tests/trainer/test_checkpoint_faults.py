"""Checkpoints under faults, with real processes and stores: a driver preempted and resumed from an
S3 bucket (moto on loopback), saves killed half-way (SIGKILL during an upload and during a local
re-save of the same iteration), a store that becomes unreachable, and a disk that fills up (a
small tmpfs in a private mount namespace). Nothing complete is ever lost, training goes on, and
the next save retries."""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from s3server import fresh_bucket, moto_server, s3_environment

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.checkpoint import CheckpointError, CheckpointStore
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.progress import ConsoleReport
from testkit import ROOT, free_port, trainer_config, wait_until

PG_META = {"algorithm": "PG", "env": "CartPole-v1"}
ROLLOUT = RolloutConfig(envs_per_worker=2)
# Large enough that saving it takes a while, so the kills below land mid-save, and that s3fs
# uploads it in parts (over 100 MiB), which S3 lists while they are in flight.
BIG_STATE_BYTES = 120 * 2**20


@pytest.fixture
def s3(tmp_path, monkeypatch):
    """A bucket on a server of its own, which the test may stop and start."""
    with moto_server() as server:
        yield fresh_bucket(server, monkeypatch, tmp_path)


def small_pg(uri: str, iterations: int, every: int = 1, keep: int = 1):
    return trainer_config(
        algorithm="PG",
        stop={"iterations": iterations},
        hyperparameters={"rollout_length": 16},
        checkpoint={"uri": uri, "everyIterations": every, "keep": keep},
    )


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def failures(driver: Driver) -> float:
    registry = driver.metrics.registry
    return registry.get_sample_value("kuberl_checkpoint_failures_total", driver.metrics.labels)


class Scripted(ConsoleReport):
    """The console report, plus actions run in the driver's loop when an iteration's row arrives
    (before that iteration's checkpoint): faults at known iterations, no timers."""

    def __init__(self, actions):
        super().__init__("test", None)
        self.actions = actions

    def update(self, row):
        super().update(row)
        if action := self.actions.get(row["iteration"]):
            action()


def test_a_preempted_driver_resumes_from_the_bucket_with_no_iteration_lost(s3, tmp_path):
    uri = f"s3://{s3.name}/jobs/preempted"
    first_pod, second_pod = tmp_path / "first", tmp_path / "second"  # nothing shared but S3
    first = Driver(small_pg(uri, 3, every=2, keep=2), ROLLOUT, first_pod, "job").run()
    assert first.checkpoint == f"{uri}/checkpoint-00000003"
    # Each row names the newest complete checkpoint, its own iteration's when one was saved.
    assert [r["checkpoint"] for r in rows(first_pod)] == [
        None,
        f"{uri}/checkpoint-00000002",
        f"{uri}/checkpoint-00000003",
    ]

    second = Driver(small_pg(uri, 5, every=2, keep=2), ROLLOUT, second_pod, "job").run()
    assert second.resumed_from == first.checkpoint
    assert second.iteration == 5
    assert [r["iteration"] for r in rows(second_pod)] == [4, 5]
    this_iter = [r["timesteps_this_iter"] for r in rows(second_pod)]
    assert second.timesteps == first.timesteps + sum(this_iter)
    assert second.checkpoint == f"{uri}/checkpoint-00000005"
    assert [r["checkpoint"] for r in rows(second_pod)] == [
        f"{uri}/checkpoint-00000004",
        second.checkpoint,
    ]
    assert s3.keys("jobs/preempted/") == [
        f"jobs/preempted/checkpoint-{i:08d}/{file}"
        for i in (4, 5)
        for file in ("manifest.json", "state.pt")
    ]


def test_an_unreachable_store_costs_no_training_and_the_next_save_retries(s3, tmp_path, caplog):
    uri = f"s3://{s3.name}/jobs/outage"
    seen_during_outage = []

    def back_again():
        s3.server.start()
        seen_during_outage.append(CheckpointStore(uri, keep=1).latest(PG_META).uri)

    report = Scripted({2: s3.server.stop, 4: back_again})  # saves of iterations 2 and 3 fail
    driver = Driver(small_pg(uri, 6), ROLLOUT, tmp_path, "job", report=report)
    result = driver.run()

    assert (result.iteration, result.checkpoint) == (6, f"{uri}/checkpoint-00000006")
    assert failures(driver) == 2
    assert seen_during_outage == [f"{uri}/checkpoint-00000001"]  # intact all along
    assert "checkpoint failed, training goes on: could not save iteration 2" in caplog.text
    assert [r["iteration"] for r in rows(tmp_path)] == [1, 2, 3, 4, 5, 6]
    assert [r["checkpoint"] for r in rows(tmp_path)] == [  # the failed saves: the one before
        f"{uri}/checkpoint-{i:08d}" for i in (1, 1, 1, 4, 5, 6)
    ]
    assert s3.keys("jobs/outage/") == [
        "jobs/outage/checkpoint-00000006/manifest.json",
        "jobs/outage/checkpoint-00000006/state.pt",
    ]


def test_an_unreachable_store_at_start_is_an_error_not_a_fresh_start(tmp_path, monkeypatch):
    nobody_listens = f"http://127.0.0.1:{free_port()}"
    for name, value in s3_environment(nobody_listens, tmp_path).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CheckpointError, match="cannot list the checkpoints in s3://bucket/job"):
        CheckpointStore("s3://bucket/job", keep=1).latest(PG_META)


SAVE_BIG_STATE = """
import sys
import numpy as np
from kuberl_trainer.job.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1], keep=1)
meta = {"algorithm": "PG", "env": "CartPole-v1", "iteration": int(sys.argv[2]), "created": 0.0}
store.save(int(sys.argv[2]), {"value": np.ones(int(sys.argv[3]), np.uint8)}, meta)
"""


def start_saving(uri: str, iteration: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SAVE_BIG_STATE, uri, str(iteration), str(BIG_STATE_BYTES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def killed(process: subprocess.Popen) -> None:
    process.kill()  # SIGKILL: no cleanup of any kind
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, process.stdout.read()


def test_an_upload_killed_half_way_is_ignored_and_the_previous_checkpoint_used(s3):
    uri = f"s3://{s3.name}/jobs/killed"
    store = CheckpointStore(uri, keep=1)
    store.save(1, {"value": 1}, {**PG_META, "iteration": 1, "created": 0.0})
    saving = start_saving(uri, 2)
    client = s3.client()

    def uploading():
        uploads = client.list_multipart_uploads(Bucket=s3.name).get("Uploads", [])
        return [u["Key"] for u in uploads]

    state_key = "jobs/killed/checkpoint-00000002/state.pt"
    wait_until(lambda: state_key in uploading(), 120, "the state's upload", interval=0.02)
    killed(saving)

    assert uploading() == [state_key]  # it died mid-upload: never completed
    assert s3.keys("jobs/killed/") == [
        "jobs/killed/checkpoint-00000001/manifest.json",
        "jobs/killed/checkpoint-00000001/state.pt",
    ]
    found = store.latest(PG_META)
    assert (found.uri, found.state) == (f"{uri}/checkpoint-00000001", {"value": 1})
    assert store.save(2, {"value": 2}, {**PG_META, "iteration": 2, "created": 0.0}).endswith(
        "/checkpoint-00000002"
    )
    assert store.latest(PG_META).state == {"value": 2}


def test_a_local_resave_killed_half_way_keeps_the_only_checkpoint(tmp_path):
    """keep: 1 and the same iteration saved again (say, a SIGTERM right after a periodic save):
    the old copy stays until the new one is complete, whenever the writer dies."""
    directory = tmp_path / "checkpoints"
    store = CheckpointStore(str(directory), keep=1)
    store.save(1, {"value": "first"}, {**PG_META, "iteration": 1, "created": 0.0})
    saving = start_saving(str(directory), 1)

    def writing():
        return any(p.stat().st_size > 0 for p in directory.glob(".tmp-*/state.pt"))

    wait_until(writing, timeout=120, what="the state to be written", interval=0.01)
    killed(saving)

    leftovers = sorted(p.name for p in directory.iterdir())
    assert leftovers[0].startswith(".tmp-checkpoint-00000001-1-")  # it died mid-save
    assert leftovers[1:] == ["checkpoint-00000001"]
    assert store.latest(PG_META).state == {"value": "first"}
    store.save(1, {"value": "second"}, {**PG_META, "iteration": 1, "created": 0.0})
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint-00000001-1"]


FULL_DISK_RUN = """
import json, os, sys
from pathlib import Path
from pydantic import TypeAdapter
from kuberl_trainer.job.checkpoint import CheckpointStore
from kuberl_contract.config import RolloutConfig, TrainerConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.progress import ConsoleReport

disk, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
filler, location = disk / "filler", str(disk / "checkpoints")
seen = []

def fill_the_disk():
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(65536))
    except OSError as exc:
        assert exc.errno == 28, exc  # ENOSPC
    finally:
        os.close(fd)

def free_the_disk():
    found = CheckpointStore(location, keep=1).latest({"algorithm": "PG", "env": "CartPole-v1"})
    seen.append(found.uri)
    filler.unlink()

class Scripted(ConsoleReport):
    def update(self, row):
        super().update(row)
        {2: fill_the_disk, 4: free_the_disk}.get(row["iteration"], lambda: None)()

config = TypeAdapter(TrainerConfig).validate_python({
    "algorithm": "PG", "env": "CartPole-v1", "seed": 0, "stop": {"iterations": 6},
    "hyperparameters": {"rollout_length": 16},
    "checkpoint": {"uri": location, "everyIterations": 1, "keep": 1, "exportPolicy": False},
})
report = Scripted("job", None)
driver = Driver(config, RolloutConfig(envs_per_worker=2), run_dir, "job", report=report)
result = driver.run()
print(json.dumps({
    "iteration": result.iteration,
    "checkpoint": result.checkpoint,
    "failures": driver.metrics.registry.get_sample_value(
        "kuberl_checkpoint_failures_total", driver.metrics.labels),
    "seen_while_full": seen,
    "folders": sorted(os.listdir(location)),
}))
"""


def private_tmpfs_command(mountpoint: Path, size: str) -> list[str]:
    """A shell in a new user and mount namespace with a tmpfs of `size` at `mountpoint`: a real
    full disk, visible to nothing else and gone when the process ends."""
    mount = f"mount -t tmpfs -o size={size} kuberl-test {mountpoint}"
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", f'{mount} && exec "$@"']


def test_a_full_disk_costs_no_training_and_the_next_save_retries(tmp_path):
    disk, run_dir = tmp_path / "disk", tmp_path / "run"
    disk.mkdir()
    wrap = private_tmpfs_command(disk, "4m")
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    probe = subprocess.run([*wrap, "sh", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here (user namespaces off?): {probe.stderr}")

    out = subprocess.run(
        [*wrap, "sh", sys.executable, "-c", FULL_DISK_RUN, str(disk), str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    location = f"{disk}/checkpoints"
    assert result["iteration"] == 6 and result["checkpoint"] == f"{location}/checkpoint-00000006"
    assert result["failures"] == 2  # iterations 2 and 3, while the disk was full
    assert result["seen_while_full"] == [f"{location}/checkpoint-00000001"]
    assert result["folders"] == ["checkpoint-00000006"]  # no half-written leftovers
    assert "No space left on device" in out.stderr
    assert [r["iteration"] for r in rows(run_dir)] == [1, 2, 3, 4, 5, 6]


def test_real_training_state_loads_as_data_only(tmp_path):
    """A DQN state with its replay buffer (numpy columns, RNG states of Python, numpy and torch,
    Adam's moments) goes through the safe loader intact."""
    config = trainer_config(
        algorithm="DQN",
        stop={"iterations": 2},
        hyperparameters={"rollout_length": 16, "learning_starts": 16, "gradient_steps": 2},
        checkpoint={"everyIterations": 1, "keep": 1, "replayBuffer": True},
    )
    first = Driver(config, ROLLOUT, tmp_path, "job").run()
    resumed = Driver(
        config.model_copy(update={"stop": config.stop.model_copy(update={"iterations": 3})}),
        ROLLOUT,
        tmp_path,
        "job",
    ).run()
    assert resumed.resumed_from == first.checkpoint and resumed.iteration == 3
    found = CheckpointStore(str(tmp_path / "checkpoints"), keep=1).latest(
        {"algorithm": "DQN", "env": "CartPole-v1"}
    )
    # every transition of the 3 iterations (2 envs x 16 steps each, less the reset steps)
    assert len(found.state["optimizer"]["replay_buffer"]["columns"]["obs"]) == resumed.timesteps
