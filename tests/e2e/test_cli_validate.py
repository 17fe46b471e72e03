"""`kuberl validate` run as users run it: a real subprocess on real files, real gymnasium envs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit import edited as edited_document
from testkit import rljob, run_kuberl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
PBT = (ROOT / "deploy" / "examples" / "cartpole-pbt.yaml").read_text()
BASE = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text())


kuberl = run_kuberl


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_is_valid(example):
    result = kuberl("validate", example)

    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert result.stdout.startswith(f"{example.stem}: valid RLJob (")
    assert result.stderr == ""


def test_summary_line_of_the_cartpole_example():
    result = kuberl("validate", ROOT / "deploy" / "examples" / "cartpole-ppo.yaml")

    assert result.stdout == (
        "cartpole-ppo: valid RLJob (PPO on CartPole-v1, 0 remote rollout workers x 8 envs, "
        "stop at timesteps>=100000 or episodeReturnMean>=475)\n"
    )


def edited(**changes: Any) -> str:
    """The cartpole-ppo example as YAML, with changes at dotted paths (None deletes the key)."""
    return yaml.safe_dump(edited_document(BASE, **changes), sort_keys=False)


BROKEN = {
    "not-yaml": ("spec:\n  trainer: [unclosed\n", ["line 3, column 1: not valid YAML"]),
    "empty": ("", ["empty"]),
    "configmap": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {}\n",
        ["kind: this is a ConfigMap, not an RLJob"],
    ),
    "unknown-env": (
        edited(**{"spec.trainer.env": "CartPol-v1"}),
        ["spec.trainer.env: 'CartPol-v1' is not a registered gymnasium id", "'CartPole-v1'"],
    ),
    "unmapped-agent": (
        edited(
            **{
                "spec.trainer.env": "pettingzoo:mpe2.simple_spread_v3",
                "spec.trainer.multiAgent": {
                    "policies": {"a": {}},
                    "policyMapping": [{"regex": "agent_[01]", "policy": "a"}],
                },
            }
        ),
        [
            "spec.trainer.multiAgent.policyMapping: no rule maps agent agent_2 to a policy "
            "(the env's agents: agent_0, agent_1, agent_2)"
        ],
    ),
    "tuple-space-for-the-cnn": (
        edited(**{"spec.trainer.env": "Blackjack-v1", "spec.trainer.model": {"encoder": "cnn"}}),
        ["spec.trainer.model.encoder: the observation space Tuple(", "use encoder: mlp"],
    ),
    "unknown-wrapper": (
        edited(
            **{
                "spec.trainer.env": "Blackjack-v1",
                "spec.trainer.wrappers": [{"name": "FlatenObservation"}],
            }
        ),
        [
            "spec.trainer.wrappers[0].name: 'FlatenObservation' is not a class of "
            "gymnasium.wrappers nor a module:Class path; did you mean 'FlattenObservation'?"
        ],
    ),
    "unknown-wrapper-kwarg": (
        edited(**{"spec.trainer.wrappers": [{"name": "TimeLimit", "kwargs": {"max_steps": 200}}]}),
        [
            "spec.trainer.wrappers[0].kwargs.max_steps: TimeLimit takes no keyword argument "
            "'max_steps'; did you mean 'max_episode_steps'?"
        ],
    ),
    "failing-wrapper": (
        edited(
            **{
                "spec.trainer.wrappers": [
                    {"name": "ClipReward", "kwargs": {"min_reward": 1, "max_reward": -1}}
                ]
            }
        ),
        ["spec.trainer.wrappers[0]: cannot wrap the env in ClipReward with kwargs "],
    ),
    "wrapper-without-name": (
        edited(**{"spec.trainer.wrappers": [{"kwargs": {"max_episode_steps": 200}}]}),
        ["spec.trainer.wrappers[0].name: missing required field"],
    ),
    "dqn-on-continuous-actions": (
        edited(**{"spec.trainer.algorithm": "DQN", "spec.trainer.env": "Pendulum-v1"}),
        ["spec.trainer.env: action space Box(", "needs Discrete actions; use PPO"],
    ),
    "sac-on-discrete-actions": (
        edited(
            **{
                "spec.trainer.algorithm": "SAC",
                "spec.trainer.hyperparameters": None,
                "spec.trainer.env": "CartPole-v1",
            }
        ),
        [
            "spec.trainer.env: action space Discrete(2) is discrete but the algorithm needs Box "
            "(continuous) actions; use DQN or PPO for Discrete actions"
        ],
    ),
    "misspelt-hyperparameter": (
        edited(**{"spec.trainer.hyperparameters.lerning_rate": 0.001}),
        ["spec.trainer.hyperparameters.lerning_rate: unknown field; did you mean 'learning_rate'?"],
    ),
    "negative-learning-rate": (
        edited(**{"spec.trainer.hyperparameters.learning_rate": -0.001}),
        ["spec.trainer.hyperparameters.learning_rate: must be > 0.0, got -0.001"],
    ),
    "missing-stop": (
        edited(**{"spec.trainer.stop": None}),
        ["spec.trainer.stop: missing required field"],
    ),
    "bad-optimizer-pairing": (
        edited(**{"spec.trainer.optimizer": "SyncReplay"}),
        [
            (
                "spec.trainer.optimizer: SyncReplay cannot drive PPO: it learns on transitions "
                "replayed from a buffer, but PPO takes several epochs of minibatch SGD on fresh "
                "samples of its current policy; compatible: SyncSamples, AsyncSamples, "
                "LocalMultiGPU"
            )
        ],
    ),
    "apex-on-async-samples": (
        edited(
            **{
                "spec.trainer.algorithm": "APEX",
                "spec.trainer.hyperparameters": None,
                "spec.trainer.optimizer": "AsyncSamples",
            }
        ),
        [
            "spec.trainer.optimizer: AsyncSamples cannot drive APEX: it learns on batches of "
            "slightly older policies, but APEX learns Q-values from replayed transitions; "
            "compatible: AsyncReplay, SyncReplay"
        ],
    ),
    "optimizer-setting-of-another-optimizer": (
        edited(**{"spec.trainer.optimizerConfig": {"replayShards": 4}}),
        [
            "spec.trainer.optimizerConfig.replayShards: used by AsyncReplay only, and this job "
            "runs SyncSamples"
        ],
    ),
    "ray-resources-cpu": (
        edited(**{"spec.rolloutWorkers.rayResources": {"CPU": 1}}),
        ["spec.rolloutWorkers.rayResources: 'CPU' is one of Ray's own resources"],
    ),
    "unknown-algorithm": (
        edited(**{"spec.trainer.algorithm": "PP0"}),
        [
            "spec.trainer.algorithm: 'PP0' is not one of PG, A2C, A3C, PPO, APPO, IMPALA, DQN, "
            "APEX, SAC, ES, PBT; did you mean 'PPO'?"
        ],
    ),
    "pbt-mutation-of-no-hyperparameter": (
        PBT.replace("log: true}", "log: true}\n        lr: {min: 1, max: 2}"),
        ["spec.trainer.hyperparameters.mutations.lr: PPO has no hyperparameter lr; it has "],
    ),
    "pbt-trial-hyperparameters": (
        PBT.replace("{learning_rate: 1.0e-6}", "{learning_rate: -1}"),
        ["spec.trainer.hyperparameters.trials[3]: learning_rate: "],
    ),
    "pbt-another-env-inside": (
        PBT.replace("algorithm: PPO", "algorithm: PPO\n      env: Pendulum-v1"),
        ["spec.trainer.trainer.env: every trial trains on the population's env (CartPole-v1"],
    ),
    "pbt-inner-action-space": (
        PBT.replace("algorithm: PPO", "algorithm: DQN").replace("CartPole-v1", "Pendulum-v1"),
        ["spec.trainer.env: action space Box(-2.0, 2.0, (1,), float32) is continuous"],
    ),
    "tolerations-not-a-list": (
        edited(**{"spec.learner": {"tolerations": {"key": "nvidia.com/gpu"}}}),
        ["spec.learner.tolerations: must be a list"],
    ),
    "toleration-effect": (
        edited(**{"spec.learner": {"tolerations": [{"key": "gpu", "effect": "Noschedule"}]}}),
        ["spec.learner.tolerations[0].effect:", "did you mean 'NoSchedule'?"],
    ),
    "bad-memory": (
        edited(**{"spec.learner": {"memory": "8GB"}}),
        ["spec.learner.memory: '8GB' is not a Kubernetes quantity"],
    ),
    "bad-name": (
        edited(**{"metadata.name": "CartPole_PPO"}),
        ["metadata.name: 'CartPole_PPO' is not a valid job name"],
    ),
    "two-problems-and-an-env": (
        edited(
            **{
                "spec.trainer.env": "CartPol-v1",
                "spec.trainer.hyperparameters.gamma": 1.5,
                "spec.rolloutWorkers.replicas": -2,
            }
        ),
        [
            "spec.trainer.hyperparameters.gamma: must be <= 1.0, got 1.5",
            "spec.rolloutWorkers.replicas: must be >= 0, got -2",
            "spec.trainer.env: 'CartPol-v1'",
        ],
    ),
}


@pytest.mark.parametrize(("text", "expected"), BROKEN.values(), ids=BROKEN.keys())
def test_broken_manifests_are_reported_by_field(tmp_path, text, expected):
    path = tmp_path / "job.yaml"
    path.write_text(text)

    result = kuberl("validate", path)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), result.stderr
    for fragment in expected:
        assert fragment in result.stderr, result.stderr


def test_a_flattening_wrapper_makes_blackjack_valid(tmp_path):
    path = tmp_path / "job.yaml"
    wrappers = [
        {"name": "FlattenObservation"},
        {"name": "gymnasium.wrappers:TimeLimit", "kwargs": {"max_episode_steps": 10}},
    ]
    path.write_text(
        edited(**{"spec.trainer.env": "Blackjack-v1", "spec.trainer.wrappers": wrappers})
    )

    result = kuberl("validate", path)

    assert result.returncode == 0, result.stderr
    assert "(PPO on Blackjack-v1, " in result.stdout


@pytest.mark.parametrize("algorithm", ["A3C", "APEX", "IMPALA", "APPO"])
def test_the_asynchronous_algorithms_validate(tmp_path, algorithm):
    path = tmp_path / "job.yaml"
    path.write_text(
        edited(
            **{
                "spec.trainer.algorithm": algorithm,
                "spec.trainer.hyperparameters": None,  # the algorithm's defaults
                "spec.rolloutWorkers.replicas": 2,
                "spec.rolloutWorkers.rayResources": {"spot": 1},
                "spec.rolloutWorkers.spot": {"enabled": True, "provider": "gke"},
            }
        )
    )

    result = kuberl("validate", path)

    assert result.returncode == 0, result.stderr
    assert f"({algorithm} on CartPole-v1, 2 remote rollout workers x 8 envs on gke spot" in (
        result.stdout
    )


def test_one_line_per_problem(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(BROKEN["two-problems-and-an-env"][0])

    assert len(kuberl("validate", path).stderr.splitlines()) == 3


def test_missing_file(tmp_path):
    result = kuberl("validate", tmp_path / "nope.yaml")

    assert result.returncode == 2
    assert result.stderr == f"{tmp_path / 'nope.yaml'}: no such file\n"


def test_a_job_whose_checkpoints_die_with_its_pods_is_valid_with_a_warning(tmp_path):
    """Every example keeps its checkpoints on the claim (stderr is empty above); without one, the
    job is valid, and the warning says what is lost on a cluster and what to set."""
    document = copy.deepcopy(BASE)
    del document["spec"]["storage"]
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(document))

    result = kuberl("validate", manifest)

    assert result.returncode == 0
    assert result.stderr.startswith(f"{manifest}: warning: on a cluster, the checkpoints, and ")
    assert "spec.storage.persistentVolumeClaim" in result.stderr


def test_each_example_asks_for_a_claim_of_its_own():
    """Two jobs whose heads land on different nodes would wait for one ReadWriteOnce volume: each
    example has the operator create a claim for it alone (spec.storage.size)."""
    for path in (ROOT / "deploy" / "examples").glob("*.yaml"):
        storage = yaml.safe_load(path.read_text())["spec"]["storage"]
        assert "size" in storage and "persistentVolumeClaim" not in storage, path.name


def test_several_files_and_directories_in_one_pass(tmp_path):
    """Every manifest named, a directory's *.yaml and *.yml in order of name, each problem of
    each on a line after its file's name; the valid ones' lines name their files too."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "b-broken.yml").write_text(BROKEN["two-problems-and-an-env"][0])
    (folder / "a-good.yaml").write_text(edited(**{"metadata.name": "good"}))
    (folder / "notes.txt").write_text("not a manifest")
    single = tmp_path / "single.yaml"
    single.write_text(edited(**{"metadata.name": "single"}))

    result = kuberl("validate", single, folder)

    assert result.returncode == 1
    assert [line.split(": ")[:2] for line in result.stdout.splitlines()] == [
        [str(single), "single"],
        [str(folder / "a-good.yaml"), "good"],
    ]
    problems = result.stderr.splitlines()
    assert len(problems) == 3, result.stderr
    assert all(line.startswith(f"{folder / 'b-broken.yml'}: ") for line in problems)

    missing = kuberl("validate", "--no-env", single, tmp_path / "nope.yaml", tmp_path / "jobs")
    assert missing.returncode == 2  # the worst of the files': one is missing
    assert f"{tmp_path / 'nope.yaml'}: no such file" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = kuberl("validate", empty)
    assert nothing.returncode == 2
    assert nothing.stderr == f"{empty}: a directory of no *.yaml or *.yml file\n"


def test_an_env_module_next_to_the_manifest_is_found(tmp_path):
    (tmp_path / "corridor_env.py").write_text(
        "from gymnasium.envs.classic_control import CartPoleEnv\n\n"
        "class Corridor(CartPoleEnv):\n    pass\n"
    )
    job = rljob("beside")
    job["spec"]["trainer"]["env"] = "corridor_env:Corridor"
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))

    checked = run_kuberl("validate", manifest)  # from the repository's root, not tmp_path

    assert checked.returncode == 0, checked.stderr
    assert "valid RLJob (PPO on corridor_env:Corridor" in checked.stdout
