"""Policy files nobody vouches for. A checkpoint, an ONNX file or a TorchScript file carries the
job's spec.trainer; one whose env or wrapper names code (a `module:attr` path, gymnasium's
`module:EnvId` form) has nothing made from it when it is evaluated, exported or loaded, and the
refusal is one line naming what the file asks for and how to opt in. The user's own code runs when
they trust the file (--trust-env-code), any policy plays on an env they name (--env), and predict
needs no env at all."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnx
import pytest
import torch
from hostile_code import IMPORT_MARKER

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.envs import making as envs_module
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.trained.export import export
from kuberl_trainer.trained.inference import load
from kuberl_trainer.trained.loaded import LoadError
from testkit import run_kuberl, trainer_config

TESTS = Path(__file__).parents[1]
# The kuberl processes can import the hostile code and the test envs, as a victim's could.
PYTHONPATH = os.pathsep.join([str(TESTS / "e2e"), str(TESTS / "trainer")])
KINDS = ("checkpoint", "onnx", "torchscript")
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}
OPT_IN = ("pass --env ID to evaluate on an env you name", "or --trust-env-code if you trust it")

# torch 2.13 deprecates torch.jit, which is what loads a TorchScript file, as libtorch does.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.(load|save)` is deprecated:DeprecationWarning"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Run directories of PPO trained for two iterations in this process: on CartPole-v1, and on
    custom_envs:SlowCartPole without its sleeps (a `module:Class` env with CartPole's spaces)."""

    def train(name: str, **trainer) -> Path:
        directory = tmp_path_factory.mktemp(name)
        hyperparameters = {"rollout_length": 16, "minibatch_size": 32, "hidden_sizes": [32, 32]}
        config = trainer_config(
            algorithm="PPO", hyperparameters=hyperparameters, stop={"iterations": 2}, **trainer
        )
        Driver(config, RolloutConfig(envs_per_worker=2), directory, name).run()
        return directory

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TESTS / "trainer"))  # custom_envs, for this process too
        yield {
            "cartpole": train("cartpole"),
            "custom": train(
                "custom", env="custom_envs:SlowCartPole", envConfig={"step_seconds": 0}
            ),
        }


def newest_checkpoint(run_dir: Path) -> Path:
    return sorted((run_dir / "checkpoints").glob("checkpoint-*"))[-1]


def policy_file(kind: str, run_dir: Path, directory: Path, **trainer) -> Path:
    """The policy of `run_dir` as a file of `kind` in `directory`, whose spec.trainer has the
    fields of `trainer` (manifest-style keys) in place of its own: what someone else's file may
    say."""
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "checkpoint":
        target = directory / newest_checkpoint(run_dir).name
        shutil.copytree(newest_checkpoint(run_dir), target)
        edit_manifest(target, lambda meta: meta["config"].update(trainer))
        return target
    path = directory / f"policy{SUFFIXES[kind]}"
    policy = load(run_dir)
    try:
        export(policy, path)
    finally:
        policy.close()
    edit_metadata(path, lambda meta: meta.update(trainer=json.dumps(meta_trainer(meta) | trainer)))
    return path


def meta_trainer(meta: dict[str, str]) -> dict:
    return json.loads(meta["trainer"])


def edit_manifest(checkpoint: Path, change) -> None:
    """A checkpoint's manifest.json with `change(meta)` done to its meta: state.pt keeps matching
    its sha256, so the checkpoint is as usable as before."""
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    change(manifest["meta"])
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def edit_metadata(path: Path, change) -> None:
    """An exported file's metadata with `change(meta)` done to it, the graph as it was."""
    if path.suffix == ".onnx":
        model = onnx.load(str(path))
        meta = {prop.key: prop.value for prop in model.metadata_props}
        change(meta)
        del model.metadata_props[:]
        for key, value in meta.items():
            model.metadata_props.add(key=key, value=value)
        onnx.save(model, str(path))
        return
    extra_files = {"kuberl.json": ""}
    module = torch.jit.load(str(path), _extra_files=extra_files)
    meta = json.loads(extra_files["kuberl.json"])
    change(meta)
    torch.jit.save(module, str(path), _extra_files={"kuberl.json": json.dumps(meta)})


def env_attack(marker: Path) -> dict:
    """An env that is a standard-library function running a shell command, envConfig its
    keyword arguments."""
    return {"env": "os:system", "envConfig": {"command": f"touch {marker}"}}


def wrapper_attack(marker: Path) -> dict:
    """A wrapper that is someone's function, its kwargs what it is called with."""
    return {"wrappers": [{"name": "hostile_code:touch_marker", "kwargs": {"path": str(marker)}}]}


def kuberl(*args, **environment) -> object:
    return run_kuberl(*args, env={**os.environ, "PYTHONPATH": PYTHONPATH, **environment})


def assert_one_line(result, exit_code: int, *said: str) -> str:
    """The command exited `exit_code` after one line on stderr, no traceback, saying `said`."""
    assert result.returncode == exit_code, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for text in said:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", KINDS)
def test_evaluating_a_file_whose_env_is_a_function_runs_nothing(kind, trained, tmp_path):
    marker = tmp_path / "ran"
    hostile = policy_file(kind, trained["cartpole"], tmp_path / "file", **env_attack(marker))

    result = kuberl("evaluate", hostile, "--episodes", "1")

    line = assert_one_line(result, 1, "asks for env 'os:system' (a module:attr path", *OPT_IN)
    assert line.startswith(f"kuberl evaluate: {hostile}: ")
    assert not marker.exists()


def test_a_wrapper_named_by_its_module_is_refused_as_an_env_is(trained, tmp_path):
    marker = tmp_path / "ran"
    hostile = policy_file("checkpoint", trained["cartpole"], tmp_path, **wrapper_attack(marker))

    result = kuberl("evaluate", hostile, "--episodes", "1")

    assert_one_line(result, 1, "asks for wrappers[0] 'hostile_code:touch_marker'", *OPT_IN)
    assert not marker.exists()


def test_gymnasiums_module_prefix_imports_code_and_is_refused(trained, tmp_path):
    """gym.make("module:EnvId") imports `module` first: its code runs before any id is looked up."""
    marker = tmp_path / "imported"
    hostile = policy_file("onnx", trained["cartpole"], tmp_path, env="hostile_code:CartPole-v1")

    result = kuberl("evaluate", hostile, "--episodes", "1", **{IMPORT_MARKER: str(marker)})

    assert_one_line(result, 1, "asks for env 'hostile_code:CartPole-v1'", *OPT_IN)
    assert not marker.exists()


def test_a_video_of_a_hostile_file_is_refused_before_any_env_is_made(trained, tmp_path):
    marker = tmp_path / "ran"
    hostile = policy_file("torchscript", trained["cartpole"], tmp_path, **env_attack(marker))
    video = tmp_path / "episodes.gif"

    result = kuberl("evaluate", hostile, "--episodes", "1", "--video", video)

    assert_one_line(result, 1, "asks for env 'os:system'", *OPT_IN)
    assert not marker.exists() and not video.exists()


def test_exporting_a_hostile_checkpoint_makes_no_env_and_its_export_stays_refused(
    trained, tmp_path
):
    marker = tmp_path / "ran"
    hostile = policy_file(
        "checkpoint",
        trained["cartpole"],
        tmp_path / "file",
        **env_attack(marker),
        **wrapper_attack(marker),
    )
    exported = tmp_path / "policy.onnx"

    result = kuberl("export", hostile, "-o", exported)

    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    # The file copies what the checkpoint asked for, and evaluating it is refused the same way.
    refused = kuberl("evaluate", exported, "--episodes", "1")
    assert_one_line(
        refused, 1, "asks for env 'os:system'", "and wrappers[0] 'hostile_code:touch_marker'"
    )
    assert not marker.exists()


def forbid_making_envs(monkeypatch) -> None:
    """Any env made from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"an env was made: {args} {kwargs}")

    monkeypatch.setattr(gym, "make", refuse)
    monkeypatch.setattr(gym, "make_vec", refuse)
    monkeypatch.setattr(envs_module, "env_creator", refuse)


@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_file_predicts_without_an_env_and_evaluates_on_none_it_names(
    kind, trained, tmp_path, monkeypatch
):
    marker = tmp_path / "ran"
    attack = env_attack(marker) | wrapper_attack(marker)
    hostile = policy_file(kind, trained["cartpole"], tmp_path / "file", **attack)
    own = load(trained["cartpole"])
    obs = np.random.default_rng(0).normal(0, 0.1, size=(16, 4)).astype(np.float32)
    expected, _ = own.predict(obs)
    own.close()

    forbid_making_envs(monkeypatch)
    policy = load(hostile)
    try:
        np.testing.assert_array_equal(policy.predict(obs)[0], expected)
        assert policy.predict(obs[3])[0] == expected[3]
        with pytest.raises(
            LoadError,
            match=r"asks for env 'os:system' .* and wrappers\[0\] 'hostile_code:touch_marker' "
            r".*load\(path, env=ID\).*load\(path, trust_env_code=True\)",
        ):
            policy.evaluate(episodes=1)
    finally:
        policy.close()
    assert not marker.exists()


def test_the_users_own_env_runs_when_they_trust_the_file(trained):
    checkpoint = newest_checkpoint(trained["custom"])

    refused = kuberl("evaluate", checkpoint, "--episodes", "1")
    assert_one_line(refused, 1, "asks for env 'custom_envs:SlowCartPole'", *OPT_IN)

    trusted = kuberl("evaluate", checkpoint, "--episodes", "2", "--trust-env-code", "-o", "json")
    assert trusted.returncode == 0, trusted.stderr
    evaluation = json.loads(trusted.stdout)
    assert evaluation["env"] == "custom_envs:SlowCartPole" and evaluation["episodes"] == 2

    policy = load(checkpoint, trust_env_code=True)
    try:
        assert len(policy.evaluate(episodes=2).returns) == 2
    finally:
        policy.close()


def test_any_policy_plays_on_an_env_the_user_names(trained):
    checkpoint = newest_checkpoint(trained["custom"])
    # Without the test envs on the path: custom_envs could not even be imported.
    environment = {"PYTHONPATH": str(TESTS / "e2e")}

    named = kuberl("evaluate", checkpoint, "--env", "CartPole-v1", "-o", "json", **environment)

    assert named.returncode == 0, named.stderr
    evaluation = json.loads(named.stdout)
    assert (evaluation["env"], evaluation["episodes"]) == ("CartPole-v1", 10)
    policy = load(checkpoint, env="CartPole-v1")
    try:
        assert policy.config.env == "CartPole-v1" and policy.config.wrappers == []
        assert len(policy.evaluate(episodes=3, seed=4).returns) == 3
    finally:
        policy.close()


def test_an_env_that_does_not_fit_the_policy_is_one_line(trained):
    result = kuberl("evaluate", trained["cartpole"], "--env", "Pendulum-v1", "--episodes", "1")

    assert_one_line(result, 1, "Pendulum-v1", "observations", "(4,)", "(3,)")


def test_an_env_that_fails_to_build_is_one_line(trained, tmp_path):
    unbuildable = policy_file(
        "checkpoint", trained["cartpole"], tmp_path, envConfig={"no_such_option": 1}
    )

    result = kuberl("evaluate", unbuildable, "--episodes", "1")
    assert_one_line(result, 1, "cannot make 'CartPole-v1' with envConfig", "no_such_option")

    unknown = kuberl("evaluate", trained["cartpole"], "--env", "NoSuchEnv-v0", "--episodes", "1")
    assert_one_line(unknown, 1, "'NoSuchEnv-v0' is not a registered gymnasium id")


def test_a_checkpoint_of_an_older_kuberl_gets_its_spaces_from_a_registered_env_only(
    trained, tmp_path
):
    """Before the spaces were recorded, loading made one env of the job to learn them: that is
    kept for a registered id, and refused for code unless the user trusts the file."""
    registered = policy_file("checkpoint", trained["cartpole"], tmp_path / "registered")
    custom = policy_file("checkpoint", trained["custom"], tmp_path / "custom")
    for checkpoint in (registered, custom):
        edit_manifest(checkpoint, lambda meta: meta.pop("spaces", None))

    policy = load(registered)
    try:
        assert policy.observation_space == gym.make("CartPole-v1").observation_space
        assert policy.action_space == gym.spaces.Discrete(2)
    finally:
        policy.close()
    with pytest.raises(
        LoadError,
        match=r"records no observation and action spaces.*asks for env 'custom_envs:SlowCartPole'",
    ):
        load(custom)
    trusted = load(custom, trust_env_code=True)
    trusted.close()

    refused = kuberl("export", custom, "-o", tmp_path / "custom.onnx")
    assert_one_line(refused, 1, "asks for env 'custom_envs:SlowCartPole'", "pass --trust-env-code")
    exported = kuberl("export", custom, "-o", tmp_path / "custom.onnx", "--trust-env-code")
    assert exported.returncode == 0, exported.stderr


def test_a_file_exported_by_an_older_kuberl_acts_and_plays_on_its_shape_alone(trained, tmp_path):
    exported = policy_file("onnx", trained["cartpole"], tmp_path)
    edit_metadata(exported, lambda meta: meta.pop("spaces"))
    own = load(trained["cartpole"])

    policy = load(exported)
    obs = np.zeros((2, 4), np.float32)
    assert (policy.observation_space, policy.action_space) == (None, None)
    np.testing.assert_array_equal(policy.predict(obs)[0], own.predict(obs)[0])
    assert (
        policy.evaluate(episodes=2, seed=1).as_dict() == own.evaluate(episodes=2, seed=1).as_dict()
    )
    with pytest.raises(
        envs_module.EnvError, match=r"Pendulum-v1 does not fit .* shape \(3,\), the policy's \(4,\)"
    ):
        load(exported, env="Pendulum-v1").evaluate(episodes=1)
