"""The checkpoint store, the same on a local path and on S3 (moto on loopback): complete before it
counts, a save never replaces an older checkpoint, damaged ones skipped, tampered ones refused
without running anything, other jobs' refused."""

import hashlib
import importlib.util
import io
import json
import logging
import random

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from kuberl_contract.config import CheckpointConfig
from kuberl_trainer.job.checkpoint import (
    CheckpointRefused,
    CheckpointSaveError,
    CheckpointStore,
    checkpoint_location,
    new_name,
    sort_key,
)

META = {"algorithm": "PPO", "env": "CartPole-v1"}


def save(store, iteration, value=None):
    state = {"value": iteration if value is None else value}
    return store.save(iteration, state, {**META, "iteration": iteration, "created": 0.0})


def folders(store):
    """Everything at the location, temporary folders included."""
    store.fs.invalidate_cache()
    if not store.fs.exists(store.root):
        return []
    return sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in store.fs.ls(store.root))


def put(store, name, file, data: bytes):
    folder = f"{store.root}/{name}"
    store.fs.makedirs(folder, exist_ok=True)
    store.fs.pipe_file(f"{folder}/{file}", data)


def read(store, name, file) -> bytes:
    return store.fs.cat_file(f"{store.root}/{name}/{file}")


def manifest_for(state_bytes: bytes, iteration: int, **changes) -> bytes:
    """A manifest as the store writes one; what a tamperer who rewrites state.pt also rewrites."""
    entry = {"size": len(state_bytes), "sha256": hashlib.sha256(state_bytes).hexdigest()}
    meta = {**META, "iteration": iteration, "created": 0.0}
    return json.dumps({"format": 2, "files": {"state.pt": entry}, "meta": meta, **changes}).encode()


def test_newest_kept_and_returned(location):
    store = CheckpointStore(location, keep=2)
    for iteration in (1, 2, 3):
        uri = save(store, iteration)
    assert uri == f"{location}/checkpoint-00000003"
    assert folders(store) == ["checkpoint-00000002", "checkpoint-00000003"]
    found = CheckpointStore(location, keep=2).latest(META)
    assert found.state == {"value": 3} and found.meta["iteration"] == 3 and found.uri == uri


def test_the_manifest_lists_each_file_with_its_size_and_digest(location):
    store = CheckpointStore(location, keep=1)
    save(store, 1)
    manifest = json.loads(read(store, "checkpoint-00000001", "manifest.json"))
    state = read(store, "checkpoint-00000001", "state.pt")
    assert manifest["files"] == {
        "state.pt": {"size": len(state), "sha256": hashlib.sha256(state).hexdigest()}
    }
    assert manifest["format"] == 2 and manifest["meta"] == {**META, "iteration": 1, "created": 0.0}


def test_tensors_arrays_and_rng_states_round_trip(location):
    state = {
        "weights": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.float64(0.5)},
        "columns": {
            dtype: np.arange(4).astype(dtype) for dtype in ("bool", "uint8", "int64", "float16")
        },
        "adam": {"step": torch.tensor(3.0), "betas": (0.9, 0.999), "foreach": None},
        "rng": {
            "python": random.getstate(),
            "numpy": np.random.get_state(legacy=False),
            "pcg64": np.random.default_rng(0).bit_generator.state,
            "torch": torch.get_rng_state(),
        },
    }
    store = CheckpointStore(location, keep=1)
    store.save(1, state, {**META, "iteration": 1})
    loaded = store.latest(META).state
    assert loaded["weights"]["w"].tolist() == state["weights"]["w"].tolist()
    assert loaded["weights"]["n"] == 0.5
    for dtype, column in loaded["columns"].items():
        assert (
            column.dtype == np.dtype(dtype) and column.tolist() == state["columns"][dtype].tolist()
        )
    assert loaded["adam"]["betas"] == (0.9, 0.999) and loaded["adam"]["step"].item() == 3.0
    assert loaded["rng"]["python"] == state["rng"]["python"]
    assert loaded["rng"]["pcg64"] == state["rng"]["pcg64"]
    assert torch.equal(loaded["rng"]["torch"], state["rng"]["torch"])
    np.random.set_state(loaded["rng"]["numpy"])  # what resuming does with it


def test_saving_an_iteration_again_lands_beside_the_old_copy(location):
    store = CheckpointStore(location, keep=1)
    save(store, 3, "first")
    uri = save(store, 3, "second")  # e.g. SIGTERM right after the periodic save
    assert uri == f"{location}/checkpoint-00000003-1"
    assert folders(store) == ["checkpoint-00000003-1"]  # the first pruned only after
    assert store.latest(META).state == {"value": "second"}
    assert save(store, 4).endswith("/checkpoint-00000004")


def test_a_failed_save_keeps_the_only_checkpoint(location):
    store = CheckpointStore(location, keep=1)
    save(store, 3, "first")
    with pytest.raises(CheckpointSaveError, match=f"could not save iteration 3 to {location}"):
        save(store, 3, lambda: "not data")  # fails half-way: torch.save cannot pickle it
    assert folders(store) == ["checkpoint-00000003"]  # nothing deleted, nothing left behind
    assert store.latest(META).state == {"value": "first"}


def test_an_incomplete_checkpoint_is_skipped_then_pruned(location, caplog):
    store = CheckpointStore(location, keep=2)
    save(store, 1)
    # A save that died after its state and before its manifest (a killed upload).
    put(store, "checkpoint-00000002", "state.pt", read(store, "checkpoint-00000001", "state.pt"))
    with caplog.at_level(logging.WARNING):
        found = store.latest(META)
    assert found.state == {"value": 1}
    assert "skipping corrupt checkpoint" in caplog.text and "checkpoint-00000002" in caplog.text
    assert "no manifest.json: its save never finished" in caplog.text

    assert save(store, 2).endswith("/checkpoint-00000002-1")  # the dead save's name is taken
    assert folders(store) == ["checkpoint-00000001", "checkpoint-00000002-1"]


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda state, manifest: (state[:-100], manifest), "differs from its manifest"),
        (lambda state, manifest: (state[:-8] + b"\0" * 8, manifest), "differs from its manifest"),
        (lambda state, manifest: (state, manifest[:-5]), "manifest.json is not JSON"),
        (lambda state, manifest: (state, b'{"format": 1}'), "has format 1, expected 2"),
        (
            lambda state, manifest: (state, manifest.replace(b'"state.pt"', b'"../state.pt"')),
            "must list exactly state.pt",
        ),
    ],
    ids=["truncated", "altered", "garbled-manifest", "old-format", "stray-file"],
)
def test_a_damaged_checkpoint_is_skipped_for_the_previous_one(location, caplog, damage, reason):
    store = CheckpointStore(location, keep=3)
    save(store, 1)
    save(store, 2)
    state, manifest = damage(
        read(store, "checkpoint-00000002", "state.pt"),
        read(store, "checkpoint-00000002", "manifest.json"),
    )
    put(store, "checkpoint-00000002", "state.pt", state)
    put(store, "checkpoint-00000002", "manifest.json", manifest)
    with caplog.at_level(logging.WARNING):
        assert store.latest(META).state == {"value": 1}
    assert f"skipping corrupt checkpoint {location}/checkpoint-00000002" in caplog.text
    assert reason in caplog.text


class WritesAFile:
    """What a tampered checkpoint may carry: unpickling it runs code (here, writing a file)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return exec, (f"open({self.path!r}, 'w').write('ran')",)


def test_a_checkpoint_carrying_code_is_refused_and_runs_nothing(location, tmp_path, caplog):
    store = CheckpointStore(location, keep=3)
    save(store, 1)
    marker = tmp_path / "the-payload-ran"
    buffer = io.BytesIO()
    torch.save({"policy": WritesAFile(marker)}, buffer)
    payload = buffer.getvalue()
    torch.load(io.BytesIO(payload), weights_only=False)  # the payload is live: this runs it
    assert marker.read_text() == "ran"
    marker.unlink()

    put(store, "checkpoint-00000002", "state.pt", payload)
    put(store, "checkpoint-00000002", "manifest.json", manifest_for(payload, 2))
    with caplog.at_level(logging.WARNING):
        found = store.latest(META)
    assert found.state == {"value": 1}
    assert not marker.exists()
    assert "refused to load" in caplog.text and "(the global exec)" in caplog.text
    assert "weights_only=False" not in caplog.text  # torch's advice, wrong for untrusted files


def test_a_checkpoint_of_another_algorithm_is_refused(location):
    save(CheckpointStore(location, keep=3), 1)
    with pytest.raises(CheckpointRefused, match="algorithm='PPO', this job has algorithm='DQN'"):
        CheckpointStore(location, keep=3).latest({"algorithm": "DQN", "env": "CartPole-v1"})


def test_a_checkpoint_of_a_newer_format_is_refused(location):
    store = CheckpointStore(location, keep=3)
    save(store, 1)
    put(store, "checkpoint-00000002", "manifest.json", b'{"format": 3}')
    with pytest.raises(CheckpointRefused, match="format 3, newer than this kuberl reads"):
        store.latest(META)


def test_an_empty_location_has_no_checkpoint(location):
    assert CheckpointStore(location, keep=1).latest(META) is None


def test_a_local_folder_being_written_is_never_picked(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=3)
    save(store, 1)
    partial = tmp_path / ".tmp-checkpoint-00000002-12345"  # a writer died before the rename
    partial.mkdir()
    (partial / "state.pt").write_bytes(b"\x80")
    assert store.latest(META).state == {"value": 1}
    save(store, 3)
    assert not partial.exists()  # cleaned up by the next save


def test_names_order_by_iteration_then_resave():
    assert new_name(7, set()) == "checkpoint-00000007"
    taken = {"checkpoint-00000007", "checkpoint-00000007-1"}
    assert new_name(7, taken) == "checkpoint-00000007-2"
    names = ["checkpoint-00000010", "checkpoint-00000007-10", "checkpoint-00000007-2"]
    assert sorted(names, key=sort_key) == [
        "checkpoint-00000007-2",
        "checkpoint-00000007-10",
        "checkpoint-00000010",
    ]
    assert sort_key(".tmp-checkpoint-00000007-99") is None and sort_key("notes.txt") is None


def test_checkpoint_locations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert checkpoint_location(None, tmp_path) == str(tmp_path / "checkpoints")
    assert checkpoint_location("file:///data/ckpt", tmp_path) == "/data/ckpt"
    assert checkpoint_location("relative/dir", tmp_path) == str(tmp_path / "relative/dir")
    assert checkpoint_location("s3://bucket/prefix/", tmp_path) == "s3://bucket/prefix"


@pytest.mark.parametrize("scheme, package", [("gs", "gcsfs"), ("az", "adlfs")])
def test_a_store_whose_package_is_missing_says_which(scheme, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(CheckpointRefused, match=f"need {package}.*pip install {package}"):
        CheckpointStore(f"{scheme}://bucket/prefix", keep=1)


@pytest.mark.parametrize(
    "uri, message",
    [
        ("http://example.com/ckpt", "http:// is not a checkpoint store"),
        ("s3://", "names no bucket"),
        ("", "empty"),
    ],
)
def test_unusable_uris_are_rejected_at_validation(uri, message):
    with pytest.raises(ValidationError, match=message) as error:
        CheckpointConfig(uri=uri)
    assert error.value.errors()[0]["loc"] == ("uri",)


def test_the_credentials_secret_must_be_a_kubernetes_name():
    assert CheckpointConfig.model_validate({"credentialsSecret": "s3-creds"}).credentials_secret
    with pytest.raises(ValidationError, match="credentialsSecret"):
        CheckpointConfig.model_validate({"credentialsSecret": "S3_Creds"})


def test_a_file_beside_the_checkpoints_is_no_checkpoint_and_outlives_pruning(location, tmp_path):
    """The exported policy lies beside the checkpoints: never listed, resumed or pruned."""
    store = CheckpointStore(location, keep=1)
    save(store, 1)
    policy = tmp_path / "exported.onnx"
    policy.write_bytes(b"first")
    assert store.put_file(policy, "policy.onnx") == f"{location}/policy.onnx"
    policy.write_bytes(b"second")
    store.put_file(policy, "policy.onnx")  # replaced whole
    save(store, 2)

    assert store.latest(META).uri == f"{location}/checkpoint-00000002"
    assert store.fs.cat_file(f"{store.root}/policy.onnx") == b"second"
    with pytest.raises(ValueError, match="is a checkpoint's name"):
        store.put_file(policy, "checkpoint-00000003")
