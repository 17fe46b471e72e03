"""Multi-agent jobs: PettingZoo envs as lanes of agents, the mapping of agents to policies, several
policies in one job under every optimizer, frozen policies, and their progress rows.

The Matching env (multi_agent_envs.py) pays each agent for naming its target; its agents come and
go within an episode, and its hunters see one more input than the others, so that a job mapping
them apart has policies of two shapes. An episode pays at most 19 (hunters 6 each, early 3, late
4); acting at random pays about 6.3."""

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from kuberl_contract.config import RolloutConfig, TrainerConfig
from kuberl_trainer.envs.making import EPISODE_ENDED, EnvError
from kuberl_trainer.envs.multi_agent import (
    MultiAgentVectorEnv,
    agent_policies,
    make_multi_agent_vector_env,
    make_parallel_env,
)
from kuberl_trainer.envs.search_path import ENV_PATH
from kuberl_trainer.errors import IncompatibleCheckpointError
from kuberl_trainer.job import algorithms
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.policies.multi_agent import POLICY_COLUMN, MultiAgentPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import progress_rows, trainer_config

MATCHING = "multi_agent_envs:Matching"
APART = {
    "policies": {"hunter": {}, "other": {"hyperparameters": {"learning_rate": 0.001}}},
    "policyMapping": [
        {"agents": "hunter_*", "policy": "hunter"},
        {"regex": "early|late", "policy": "other"},
    ],
}


def config_of(algorithm="PPO", multi_agent=APART, **changes):
    fields = {"stop": {"timesteps": 20_000}, "multi_agent": multi_agent} | changes
    return trainer_config(algorithm=algorithm, env=MATCHING, **fields)


def multi_agent_section(**fields):
    return (
        TypeAdapter(TrainerConfig)
        .validate_python(
            {"algorithm": "PPO", "env": MATCHING, "stop": {"timesteps": 1}, "multiAgent": fields}
        )
        .multi_agent
    )


# -- the mapping ----------------------------------------------------------------------------


AGENTS = ["early", "late", "hunter_0", "hunter_1"]


def test_agents_map_to_policies_by_the_first_rule_that_matches():
    assert agent_policies(AGENTS, multi_agent_section(**APART)) == {
        "early": "other",
        "late": "other",
        "hunter_0": "hunter",
        "hunter_1": "hunter",
    }
    assert agent_policies(AGENTS, None) == dict.fromkeys(AGENTS, "shared")
    assert agent_policies(AGENTS, multi_agent_section(policyPerAgent=True)) == {
        agent: agent for agent in AGENTS
    }
    one = multi_agent_section(policies={"team": {}})
    assert agent_policies(AGENTS, one) == dict.fromkeys(AGENTS, "team")


def test_an_agent_no_rule_maps_is_named_with_the_field():
    section = multi_agent_section(
        policies={"hunter": {}}, policyMapping=[{"agents": "hunter_*", "policy": "hunter"}]
    )
    with pytest.raises(EnvError) as caught:
        agent_policies(AGENTS, section)
    assert caught.value.field == "multiAgent.policyMapping"
    assert "agents early, late" in caught.value.message


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"policies": {"a": {}, "b": {}}}, "2 policies need a mapping"),
        ({"policies": {"a": {}}, "policyMapping": [{"agents": "*", "policy": "b"}]}, "'b' is no"),
        ({"policies": {"a": {}}, "policyMapping": [{"policy": "a"}]}, "give agents"),
        ({"policies": {"a": {}}, "policyMapping": [{"regex": "(", "policy": "a"}]}, "regular"),
        ({"policiesToTrain": ["nobody"]}, "policiesToTrain: 'nobody'"),
        ({"policies": {"a/b": {}}}, "pattern"),
        (
            {"policies": {"a": {"hyperparameters": {"rollout_length": 8}}}},
            "policies.a.hyperparameters.rollout_length: the job's policies share it",
        ),
        (
            {"policies": {"a": {"hyperparameters": {"learning_rate": -1}}}},
            "policies.a.hyperparameters.learning_rate: Input should be greater than 0",
        ),
    ],
)
def test_a_malformed_section_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        multi_agent_section(**fields)


def test_a_shared_policy_over_agents_of_different_spaces_is_refused():
    with pytest.raises(EnvError, match="map them to policies of their own") as caught:
        make_multi_agent_vector_env(config_of(multi_agent=None), 1)
    assert caught.value.field == "multiAgent.policyMapping"


def test_gymnasium_wrappers_are_refused_for_a_multi_agent_env():
    config = config_of(wrappers=[{"name": "TimeLimit", "kwargs": {"max_episode_steps": 5}}])
    with pytest.raises(EnvError, match="SuperSuit") as caught:
        make_multi_agent_vector_env(config, 1)
    assert caught.value.field == "wrappers"


# -- lanes ----------------------------------------------------------------------------------


def test_lanes_follow_agents_that_come_and_go():
    section = multi_agent_section(**APART)
    envs = MultiAgentVectorEnv(
        lambda: make_parallel_env(MATCHING, {}), 2, section, config_of().model, True
    )
    assert envs.num_envs == 8 and envs.agents == AGENTS
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (8, 4)  # the hunters' 4 inputs; the others' 3, padded
    assert (obs[[0, 4], 3] == 0).all() and (obs[[2, 3], 3] == 1).all()
    actives, ended = [envs.active.copy()], []
    for _ in range(7):
        *_, info = envs.step(np.zeros(8, dtype=np.int64))
        actives.append(envs.active.copy())
        ended.append(info[EPISODE_ENDED][:4].all())
    late, early = [a[1] for a in actives], [a[0] for a in actives]
    assert late == [False, False, True, True, True, True, False, False]
    assert early == [True, True, True, False, False, False, False, True]
    assert ended == [False] * 5 + [True, False]  # the step after the end only resets


def test_a_worker_counts_whole_episodes_and_each_policys_agents():
    worker = RolloutWorker(algorithms.worker_policies(config_of())[0], config_of(), 4, seed=0)
    assert isinstance(worker.policy, MultiAgentPolicy)
    batch = worker.sample(60)
    # 8 whole episodes per copy: 6 steps and a reset step each, and 4 steps of a ninth
    assert len(batch.episode_returns) == 32
    assert (batch.episode_lengths == 6).all()
    assert set(batch.policy_returns) == {"hunter", "other"}
    assert len(batch.policy_returns["hunter"]) == len(batch.policy_returns["other"]) == 64
    total = batch.policy_returns["hunter"].sum() + batch.policy_returns["other"].sum()
    assert total == pytest.approx(batch.episode_returns.sum())
    # agent steps: 19 per episode (hunters 6 each, early 3, late 4), 13 in the ninth's first 4
    assert batch.env_steps == 4 * (8 * 19 + 13)
    assert set(np.unique(batch[POLICY_COLUMN])) == {0, 1}


# -- learning ---------------------------------------------------------------------------------


def test_two_policies_of_two_shapes_learn_and_report_apart(tmp_path):
    result = Driver(config_of(), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert result.episode_return_mean >= 17, result
    last = progress_rows(tmp_path)[-1]
    by_name = {entry["policy"]: entry for entry in last["policies"]}
    assert by_name["hunter"]["episode_return_mean"] >= 5.5  # of 6
    assert by_name["other"]["episode_return_mean"] >= 3.0  # of 3.5: early's 3 and late's 4
    assert {"policy_loss", "kl", "entropy"} <= by_name["hunter"].keys()
    assert "policy_loss/hunter" not in last  # each policy's own is in its entry only
    json.dumps(last, allow_nan=False)


def test_a_frozen_policy_acts_and_never_learns():
    config = config_of(multi_agent=APART | {"policiesToTrain": ["hunter"]})
    worker = RolloutWorker(algorithms.worker_policies(config)[0], config, 4, seed=0)
    policy = worker.policy
    before = {name: member.get_weights() for name, member in policy.members.items()}
    for _ in range(3):
        batch = worker.sample()
        assert set(np.unique(batch[POLICY_COLUMN])) == {policy.names.index("hunter")}
        stats = policy.learn_on_batch(batch)
        assert "kl/hunter" in stats and "kl/other" not in stats
    after = {name: member.get_weights() for name, member in policy.members.items()}
    assert all(np.array_equal(before["other"][k], v) for k, v in after["other"].items())
    assert not all(np.array_equal(before["hunter"][k], v) for k, v in after["hunter"].items())


def test_a_warm_start_with_other_policies_is_refused():
    worker = RolloutWorker(algorithms.worker_policies(config_of())[0], config_of(), 1, seed=0)
    state = worker.policy.get_state()
    renamed = {"policies": {"hunter": state["policies"]["hunter"], "prey": {}}}
    with pytest.raises(IncompatibleCheckpointError, match="policies are hunter, prey"):
        worker.policy.warm_start(renamed)
    swapped = {"policies": {"hunter": state["policies"]["other"], "other": {}}}
    with pytest.raises(IncompatibleCheckpointError, match="does not fit"):
        worker.policy.warm_start(swapped)  # the 3-input network where the 4-input one goes


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm, replicas, target",
    [
        ("A2C", 0, 12),
        ("APPO", 0, 12),
        ("DQN", 0, 12),
        ("A3C", 1, 10),  # AsyncGradients: remote workers compute the gradients
        ("IMPALA", 1, 10),  # AsyncSamples with a remote worker acting in numpy
        ("APEX", 1, 10),  # AsyncReplay: replay shards and a remote worker
    ],
)
def test_every_optimizer_drives_two_policies(tmp_path, monkeypatch, algorithm, replicas, target):
    # the remote workers find the test's env where the driver does
    monkeypatch.setenv(ENV_PATH, str(Path(__file__).parent))
    stop = {"timesteps": 30_000, "episodeReturnMean": target}
    config = config_of(algorithm, stop=stop)
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=4)
    result = Driver(config, rollout, tmp_path, "job").run()
    assert result.stopped_by == f"episodeReturnMean>={target}", result
    rows = progress_rows(tmp_path)
    learned = {
        entry["policy"] for row in rows for entry in row.get("policies", ()) if len(entry) > 2
    }
    assert learned == {"hunter", "other"}


def test_normalized_observations_of_several_policies_are_refused():
    config = config_of(normalization={"observations": True})
    with pytest.raises(EnvError, match="mix the observations") as caught:
        make_multi_agent_vector_env(config, 1)
    assert caught.value.field == "normalization.observations"
