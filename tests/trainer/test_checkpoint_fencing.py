"""Fenced checkpoint writes, the same on a local path (a PVC) and on S3 (moto on loopback): once a
newer attempt has written, an older attempt's saves and files are refused with nothing lost, equal
attempts go on, a run without an attempt is never fenced, and two writers racing for the fence
cannot both win (a lock on local disk, conditional writes on S3)."""

import fcntl
import os
import re
import threading
import time
from pathlib import Path

import pytest
from s3server import fresh_bucket

from kuberl_contract.attempt import ATTEMPT_ENV
from kuberl_contract.config import RolloutConfig
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.job.checkpoint import CheckpointStore
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.fencing import (
    FENCE,
    FENCE_LOCK,
    CheckpointFenced,
    attempt_from_env,
    fence_of,
)
from testkit import trainer_config

META = {"algorithm": "PPO", "env": "CartPole-v1"}


def save(store, iteration):
    return store.save(iteration, {"value": iteration}, {**META, "iteration": iteration})


def checkpoints(store):
    """The checkpoint folders at the location, temporary ones included."""
    store.fs.invalidate_cache()
    if not store.fs.exists(store.root):
        return []
    names = [path.rstrip("/").rsplit("/", 1)[-1] for path in store.fs.ls(store.root)]
    return sorted(name for name in names if name not in (FENCE, FENCE_LOCK))


def recorded(store):
    """The newest attempt the location's fence records."""
    return fence_of(store.fs, store.root, store.uri(FENCE)).read()[0]


# -- the attempt from the environment ------------------------------------------------------------


def test_the_attempt_comes_from_the_environment():
    assert attempt_from_env({ATTEMPT_ENV: "3"}) == 3
    assert attempt_from_env({}) is None


@pytest.mark.parametrize(
    "value, reason",
    [
        ("", "it is empty"),
        ("two", "it is not a whole number"),
        ("1.5", "it is not a whole number"),
        ("-1", "it is not a whole number"),
        (" 2", "it is not a whole number"),
        ("0", "attempts start at 1"),
    ],
)
def test_an_invalid_attempt_is_an_error_naming_the_variable(value, reason):
    with pytest.raises(
        InvalidJobError, match=rf"^KUBERL_ATTEMPT={re.escape(repr(value))}: {reason}"
    ):
        attempt_from_env({ATTEMPT_ENV: value})


# -- one store against another --------------------------------------------------------------------


def test_an_older_attempt_is_refused_once_a_newer_one_saved(location, tmp_path):
    stale, newer = CheckpointStore(location, 2, attempt=1), CheckpointStore(location, 2, attempt=2)
    save(stale, 1)
    save(newer, 2)
    before = checkpoints(newer)
    with pytest.raises(CheckpointFenced, match="attempt 1 is stale: attempt 2 of this job"):
        save(stale, 9)  # ahead of the newer attempt: its pruning would remove the newer ones
    policy = tmp_path / "policy.onnx"
    policy.write_bytes(b"stale policy")
    with pytest.raises(CheckpointFenced, match="attempt 1 is stale"):
        stale.put_file(policy, "policy.onnx")
    assert checkpoints(newer) == before
    assert not newer.fs.exists(f"{newer.root}/policy.onnx")
    save(newer, 3)  # the newer attempt goes on saving
    latest = newer.latest(expect=META)
    assert (latest.meta["iteration"], latest.meta["attempt"]) == (3, 2)
    assert recorded(newer) == 2


def test_each_checkpoint_records_the_attempt_that_wrote_it(location):
    save(CheckpointStore(location, 3), 1)
    save(CheckpointStore(location, 3, attempt=4), 2)
    store = CheckpointStore(location, 3)
    assert [store.read(name).meta.get("attempt") for name in checkpoints(store)] == [None, 4]


def test_equal_attempts_go_on(location):
    first, second = CheckpointStore(location, 4, attempt=3), CheckpointStore(location, 4, attempt=3)
    for iteration, store in enumerate([first, second, first, second], start=1):
        save(store, iteration)
    assert len(checkpoints(first)) == 4
    assert recorded(first) == 3


def test_a_run_without_an_attempt_is_never_fenced_and_never_fences(location):
    unfenced = CheckpointStore(location, 3)
    save(unfenced, 1)
    assert recorded(unfenced) is None  # nothing written for the fence
    save(CheckpointStore(location, 3, attempt=5), 2)
    save(unfenced, 3)
    assert recorded(unfenced) == 5
    save(CheckpointStore(location, 3, attempt=5), 4)  # the attempt was not displaced


class NewerAttemptArrives:
    """Saved in the stale attempt's state: pickling it, while the stale checkpoint is being
    written and before it counts, has the newer attempt save."""

    def __init__(self, newer: CheckpointStore):
        self.newer = newer

    def __reduce_ex__(self, protocol):
        save(self.newer, 1)
        return (int, (0,))


def test_a_stale_save_already_under_way_never_completes(location):
    stale, newer = CheckpointStore(location, 2, attempt=1), CheckpointStore(location, 2, attempt=2)
    state = {"value": 5, "interleaved": NewerAttemptArrives(newer)}
    with pytest.raises(CheckpointFenced, match="attempt 1 is stale: attempt 2"):
        stale.save(5, state, {**META, "iteration": 5})
    assert checkpoints(newer) == ["checkpoint-00000001"]  # nothing of the stale save is left
    assert newer.latest(expect=META).meta["attempt"] == 2


# -- writers racing for the fence -----------------------------------------------------------------


def blocked_on(lock: Path) -> bool:
    """Whether some process or thread waits for a flock on `lock` (/proc/locks marks waiters)."""
    inode = os.stat(lock).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and f":{inode} " in line for line in lines)


def test_on_a_pvc_the_fence_is_read_under_the_lock(tmp_path):
    """Two pods mounting the same PVC: while one holds the lock (mid read-compare-write), the
    other's admission waits and then reads what the first wrote, so both cannot win."""
    shared = tmp_path / "pvc" / "checkpoints"
    pod_a, pod_b = (
        CheckpointStore(str(shared), 2, attempt=2),
        CheckpointStore(str(shared), 2, attempt=3),
    )
    save(pod_a, 1)
    outcome: list[BaseException | str] = []

    def pod_a_saves():
        try:
            outcome.append(save(pod_a, 2))
        except BaseException as exc:
            outcome.append(exc)

    fd = os.open(shared / FENCE_LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # pod B, between its read and its write of the fence
        saver = threading.Thread(target=pod_a_saves)
        saver.start()
        deadline = time.monotonic() + 10
        while not blocked_on(shared / FENCE_LOCK):
            assert saver.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.01)
        pod_b.fence.replace(3, None)
    finally:
        os.close(fd)
    saver.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], CheckpointFenced), outcome
    assert checkpoints(pod_a) == ["checkpoint-00000001"]
    assert recorded(pod_b) == 3


def s3_fences(tmp_path, monkeypatch, server):
    bucket = fresh_bucket(server, monkeypatch, tmp_path)
    location = f"s3://{bucket.name}/jobs/test"
    return CheckpointStore(location, 2, attempt=2), CheckpointStore(location, 2, attempt=3)


def test_on_s3_only_one_of_two_writers_creates_the_fence(tmp_path, monkeypatch, s3_server):
    stale, newer = s3_fences(tmp_path, monkeypatch, s3_server)
    assert stale.fence.read() == (None, None) and newer.fence.read() == (None, None)
    assert newer.fence.replace(3, None)  # If-None-Match: *
    assert not stale.fence.replace(2, None)  # the same condition, now false
    assert recorded(stale) == 3
    with pytest.raises(CheckpointFenced, match="attempt 2 is stale: attempt 3"):
        save(stale, 1)


def test_on_s3_only_one_of_two_writers_replaces_the_fence(tmp_path, monkeypatch, s3_server):
    stale, newer = s3_fences(tmp_path, monkeypatch, s3_server)
    save(CheckpointStore(stale.location, 2, attempt=1), 1)
    (seen_by_stale, etag), (seen_by_newer, same_etag) = stale.fence.read(), newer.fence.read()
    assert seen_by_stale == seen_by_newer == 1 and etag == same_etag
    assert newer.fence.replace(3, same_etag)  # If-Match on the ETag both read
    assert not stale.fence.replace(2, etag)  # the ETag changed under it
    assert recorded(stale) == 3


# -- the driver ---------------------------------------------------------------------------------


def test_a_stale_driver_stops_at_its_first_save(tmp_path, monkeypatch):
    def run(attempt, iterations):
        monkeypatch.setenv(ATTEMPT_ENV, str(attempt))
        config = trainer_config(
            algorithm="PG",
            stop={"iterations": iterations},
            hyperparameters={"rollout_length": 16},
            checkpoint={"everyIterations": 1, "keep": 2},
        )
        return Driver(config, RolloutConfig(envs_per_worker=2), tmp_path, "job").run()

    assert run(attempt=2, iterations=2).checkpoint.endswith("checkpoint-00000002")
    folder = tmp_path / "checkpoints"
    before = sorted(path.name for path in folder.iterdir())
    with pytest.raises(CheckpointFenced, match="attempt 1 is stale: attempt 2 of this job"):
        run(attempt=1, iterations=4)  # resumes at iteration 2, refused at iteration 3's save
    assert sorted(path.name for path in folder.iterdir()) == before
