"""Checkpoints: atomic, pruned, corrupt ones skipped, other jobs' refused."""

import logging

import pytest

from kuberl_trainer.checkpoint import CheckpointError, CheckpointStore, checkpoint_dir

META = {"algorithm": "PPO", "env": "CartPole-v1"}


def save(store, iteration):
    return store.save(iteration, {"value": iteration}, {**META, "iteration": iteration})


def test_newest_kept_and_returned(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for iteration in (1, 2, 3):
        save(store, iteration)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-00000002",
        "checkpoint-00000003",
    ]
    found = store.latest(META)
    assert found.state == {"value": 3} and found.meta["iteration"] == 3


def test_corrupt_newest_is_skipped_with_a_warning(tmp_path, caplog):
    store = CheckpointStore(tmp_path, keep=3)
    save(store, 1)
    (save(store, 2) / "state.pt").write_bytes(b"not a checkpoint")
    with caplog.at_level(logging.WARNING):
        found = store.latest(META)
    assert found.state == {"value": 1}
    assert "skipping corrupt checkpoint" in caplog.text and "checkpoint-00000002" in caplog.text


def test_half_written_checkpoint_is_never_picked(tmp_path):
    store = CheckpointStore(tmp_path, keep=3)
    save(store, 1)
    partial = tmp_path / ".tmp-checkpoint-00000002-12345"  # a writer died before the rename
    partial.mkdir()
    (partial / "state.pt").write_bytes(b"\x80")
    assert store.latest(META).state == {"value": 1}
    save(store, 3)
    assert not partial.exists()  # cleaned up by the next save


def test_checkpoint_of_another_algorithm_is_refused(tmp_path):
    save(CheckpointStore(tmp_path, keep=3), 1)
    with pytest.raises(CheckpointError, match="algorithm='PPO', this job has algorithm='DQN'"):
        CheckpointStore(tmp_path, keep=3).latest({"algorithm": "DQN", "env": "CartPole-v1"})


def test_empty_location_has_no_checkpoint(tmp_path):
    assert CheckpointStore(tmp_path / "missing", keep=1).latest(META) is None


def test_checkpoint_locations(tmp_path):
    assert checkpoint_dir(None, tmp_path) == tmp_path / "checkpoints"
    assert checkpoint_dir("file:///data/ckpt", tmp_path).as_posix() == "/data/ckpt"
    assert checkpoint_dir("relative/dir", tmp_path).as_posix() == "relative/dir"
    with pytest.raises(CheckpointError, match="s3:// storage"):
        checkpoint_dir("s3://bucket/prefix", tmp_path)
