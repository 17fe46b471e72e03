"""A local checkpoint store reads and removes only what lies inside it: an entry that is a symbolic
link, or a checkpoint folder holding one, is skipped with a warning, never read and never pruned,
so neither a planted link nor pruning reaches files elsewhere."""

import logging
import shutil

import pytest

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.checkpoint import CheckpointStore
from kuberl_trainer.job.driver import Driver
from testkit import trainer_config

META = {"algorithm": "PPO", "env": "CartPole-v1"}


@pytest.fixture(params=["path", "file-uri"])
def location(request, tmp_path):
    """The store's location as a plain path, or as a file:// URI."""
    directory = tmp_path / "checkpoints"
    return str(directory) if request.param == "path" else f"file://{directory}"


def save(store, iteration, value=None):
    state = {"value": iteration if value is None else value}
    return store.save(iteration, state, {**META, "iteration": iteration, "created": 0.0})


def elsewhere(tmp_path, iteration=1, value="outside"):
    """A complete checkpoint outside the store (another job's, say): a real target for a link."""
    other = CheckpointStore(str(tmp_path / "elsewhere"), keep=1)
    save(other, iteration, value)
    return tmp_path / "elsewhere" / f"checkpoint-{iteration:08d}"


def contents(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def skip_warnings(caplog, name):
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and name in record.getMessage()
    ]


def test_pruning_leaves_a_linked_folder_and_its_target_alone(location, tmp_path, caplog):
    store = CheckpointStore(location, keep=1)
    target = elsewhere(tmp_path)
    before = contents(target)
    link = tmp_path / "checkpoints" / "checkpoint-00000001"
    link.parent.mkdir()
    link.symlink_to(target, target_is_directory=True)  # old enough to be pruned by the saves below

    with caplog.at_level(logging.WARNING):
        for iteration in (2, 3, 4):
            save(store, iteration)

    assert contents(target) == before  # manifest.json and state.pt of the other job both intact
    assert link.is_symlink() and link.resolve() == target  # left alone: not even the link removed
    assert sorted(p.name for p in link.parent.iterdir()) == [link.name, "checkpoint-00000004"]
    warned = skip_warnings(caplog, f"{location}/checkpoint-00000001")
    assert len(warned) == 1  # once, not at every save
    assert "neither read nor removed" in warned[0] and f"a symbolic link to {target}" in warned[0]


def test_a_folder_swapped_for_a_link_after_listing_is_not_followed(tmp_path, caplog):
    """The race: the folder was the store's own when listed, and is a link when pruned."""
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=1)
    save(store, 1)
    folder = tmp_path / "checkpoints" / "checkpoint-00000001"
    shutil.rmtree(folder)
    target = elsewhere(tmp_path)
    before = contents(target)
    folder.symlink_to(target, target_is_directory=True)
    store._foreign = lambda name: None  # what the check said before the swap

    with caplog.at_level(logging.WARNING):
        assert save(store, 2).endswith("/checkpoint-00000002")  # the new one still counts

    assert contents(target) == before
    assert "could not prune old checkpoints" in caplog.text


def test_a_linked_newest_checkpoint_is_not_loaded(location, tmp_path, caplog):
    store = CheckpointStore(location, keep=3)
    save(store, 1)
    link = tmp_path / "checkpoints" / "checkpoint-00000009"
    link.symlink_to(elsewhere(tmp_path, 9), target_is_directory=True)

    with caplog.at_level(logging.WARNING):
        found = store.latest(META)

    assert (found.uri, found.state) == (f"{location}/checkpoint-00000001", {"value": 1})
    assert skip_warnings(caplog, f"{location}/checkpoint-00000009")


def test_a_linked_folder_alone_means_a_fresh_start(location, tmp_path, caplog):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint-00000009").symlink_to(elsewhere(tmp_path, 9))
    with caplog.at_level(logging.WARNING):
        assert CheckpointStore(location, keep=1).latest(META) is None
    assert skip_warnings(caplog, f"{location}/checkpoint-00000009")


@pytest.mark.parametrize("linked", ["state.pt", "manifest.json"])
def test_a_checkpoint_holding_a_linked_file_is_skipped(location, tmp_path, caplog, linked):
    store = CheckpointStore(location, keep=3)
    save(store, 1)
    save(store, 2)
    # Its file moved outside and linked back: the contents still match the manifest, byte for byte.
    folder = tmp_path / "checkpoints" / "checkpoint-00000002"
    outside = tmp_path / f"outside-{linked}"
    shutil.move(folder / linked, outside)
    (folder / linked).symlink_to(outside)

    with caplog.at_level(logging.WARNING):
        found = store.latest(META)
        save(CheckpointStore(location, keep=1), 3)  # prunes 1; 2 is not the store's own

    assert found.state == {"value": 1}
    warned = skip_warnings(caplog, f"{location}/checkpoint-00000002")
    assert warned and f"symbolic links ({linked})" in warned[0]
    assert outside.exists() and (folder / linked).is_symlink()
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        "checkpoint-00000002",
        "checkpoint-00000003",
    ]


def test_a_driver_resumes_from_the_newest_real_checkpoint_past_a_planted_link(tmp_path, caplog):
    config = trainer_config(
        algorithm="PG",
        stop={"iterations": 2},
        hyperparameters={"rollout_length": 16},
        checkpoint={"everyIterations": 1, "keep": 2},
    )
    rollout = RolloutConfig(envs_per_worker=2)
    first = Driver(config, rollout, tmp_path, "job").run()
    # Another copy of the same job's checkpoint, elsewhere, linked in under a newer name.
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(checkpoints / "checkpoint-00000002", tmp_path / "planted")
    (checkpoints / "checkpoint-00000009").symlink_to(tmp_path / "planted")

    more = config.model_copy(update={"stop": config.stop.model_copy(update={"iterations": 3})})
    with caplog.at_level(logging.WARNING):
        resumed = Driver(more, rollout, tmp_path, "job").run()

    assert resumed.resumed_from == first.checkpoint == f"{checkpoints}/checkpoint-00000002"
    assert resumed.iteration == 3
    assert skip_warnings(caplog, f"{checkpoints}/checkpoint-00000009")
    assert sorted(p.name for p in (tmp_path / "planted").iterdir()) == [
        "manifest.json",
        "state.pt",
    ]
