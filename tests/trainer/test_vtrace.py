"""V-trace (Espeholt et al. 2018) against the paper's sum and a plain loop over its recursion,
against compute_gae on on-policy data, and through IMPALA's sequence layout."""

import copy
import math

import numpy as np
import pytest
import torch

from kuberl_trainer.policies import impala
from kuberl_trainer.policies.appo import APPOPolicy
from kuberl_trainer.policies.impala import IMPALAPolicy, vtrace
from kuberl_trainer.policies.postprocessing import compute_gae
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

GAMMA = 0.9


def reference_vtrace(data, gamma, rho_bar, c_bar, pg_rho_bar):
    """One env and one step at a time, in floats, straight from the paper:
    v_s = V(x_s) + rho_s (r_s + gamma V(x_s+1) - V(x_s)) + gamma c_s (v_s+1 - V(x_s+1)), where
    past an episode's end or the window's there is no v_s+1 to follow: v_s+1 = V(x_s+1) (and
    V(x_s+1) = 0 after a termination)."""
    log_rhos, rewards, values = (data[k] for k in ("log_rhos", "rewards", "values"))
    next_values, terminateds, truncateds = (
        data[k] for k in ("next_values", "terminateds", "truncateds")
    )
    horizon, envs = rewards.shape
    vs = np.zeros((horizon, envs))
    advantages = np.zeros((horizon, envs))
    for b in range(envs):
        for s in reversed(range(horizon)):
            ratio = math.exp(log_rhos[s, b])
            if terminateds[s, b]:
                next_value = next_vs = 0.0
            elif truncateds[s, b] or s == horizon - 1:
                next_value = next_vs = next_values[s, b]  # bootstrap from the next observation
            else:
                next_value, next_vs = values[s + 1, b], vs[s + 1, b]
            delta = min(rho_bar, ratio) * (rewards[s, b] + gamma * next_value - values[s, b])
            vs[s, b] = values[s, b] + delta + gamma * min(c_bar, ratio) * (next_vs - next_value)
            advantages[s, b] = min(pg_rho_bar, ratio) * (
                rewards[s, b] + gamma * next_vs - values[s, b]
            )
    return vs, advantages


def papers_vtrace(data, gamma, rho_bar, c_bar, pg_rho_bar):
    """The paper's eq. 1 as written, a sum over the steps ahead rather than a recursion:

        v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t V
        delta_t V = rho_t (r_t + gamma V(x_t+1) - V(x_t))

    where the n steps run to the episode's end or the window's, whichever comes first (the end
    step included). V(x_t+1) is the next step's value inside the window and episode, 0 after a
    termination, and V of the final (or next window's) observation, next_values[t], after a
    truncation or the window's last step. The advantage is
    min(pg_rho_bar, rho_s) (r_s + gamma v_s+1 - V(x_s)), with v_s+1 = V(x_s+1) where the sum was
    cut after s. In float64, whatever the inputs' type."""
    log_rhos, rewards, values, next_values, terminateds, truncateds = (
        np.asarray(data[k], dtype=np.float64 if data[k].dtype != bool else bool)
        for k in ("log_rhos", "rewards", "values", "next_values", "terminateds", "truncateds")
    )
    horizon, envs = rewards.shape
    ratios = np.exp(log_rhos)
    rhos, cs = np.minimum(rho_bar, ratios), np.minimum(c_bar, ratios)
    cut = terminateds | truncateds
    # V(x_t+1) as the TD error delta_t sees it
    bootstrap = np.where(terminateds, 0.0, next_values)
    bootstrap[:-1] = np.where(cut[:-1], bootstrap[:-1], values[1:])
    deltas = rhos * (rewards + gamma * bootstrap - values)
    vs = np.zeros((horizon, envs))
    for b in range(envs):
        for s in range(horizon):
            total, trace = 0.0, 1.0  # trace: gamma^(t-s) prod_{i=s}^{t-1} c_i
            for t in range(s, horizon):
                total += trace * deltas[t, b]
                if cut[t, b]:
                    break
                trace *= gamma * cs[t, b]
            vs[s, b] = values[s, b] + total
    next_vs = bootstrap.copy()
    next_vs[:-1] = np.where(cut[:-1], bootstrap[:-1], vs[1:])
    advantages = np.minimum(pg_rho_bar, ratios) * (rewards + gamma * next_vs - values)
    return vs, advantages


def random_sequences(
    seed: int, horizon: int = 12, envs: int = 5, off_policy: float = 0.7, dtype=np.float32
):
    """Rewards and values of `envs` sequences with terminations and truncations here and there,
    and log importance ratios spread around 0 so that every clip applies somewhere."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(horizon, envs)).astype(dtype)
    ends = rng.random((horizon, envs))
    terminateds, truncateds = ends < 0.15, (ends >= 0.15) & (ends < 0.25)
    # V(next observation): the next step's value inside an episode, a value of its own elsewhere
    next_values = np.concatenate([values[1:], rng.normal(size=(1, envs))]).astype(dtype)
    cut = terminateds | truncateds
    next_values[cut] = rng.normal(size=cut.sum())
    return {
        "log_rhos": (off_policy * rng.normal(size=(horizon, envs))).astype(dtype),
        "rewards": rng.normal(size=(horizon, envs)).astype(dtype),
        "values": values,
        "next_values": next_values,
        "terminateds": terminateds,
        "truncateds": truncateds,
    }


def run_vtrace(data, gamma=GAMMA, **clips):
    vs, advantages = vtrace(
        **{k: torch.from_numpy(v) for k, v in data.items()}, gamma=gamma, **clips
    )
    return vs.numpy(), advantages.numpy()


@pytest.fixture(params=["matrix", "loop"])
def summed_by(request, monkeypatch):
    """vtrace's sums of discounted TD errors as a (T, T) matrix or by a loop over time, whichever
    the shapes would pick."""
    if request.param == "loop":
        monkeypatch.setattr(impala, "MATRIX_MAX_STEPS", 0)
    else:
        monkeypatch.setattr(impala, "MATRIX_MAX_STEPS_TIMES_SEQUENCES", 10**9)
    return request.param


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("horizon", [1, 5, 33])
@pytest.mark.parametrize("envs", [1, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("gamma", "clips"),
    [
        (0.99, {"rho_bar": 1.0, "c_bar": 1.0, "pg_rho_bar": 1.0}),
        (0.9, {"rho_bar": 1.5, "c_bar": 0.8, "pg_rho_bar": 1.2}),
        (0.97, {"rho_bar": 0.7, "c_bar": 2.0, "pg_rho_bar": 0.5}),
    ],
)
def test_vtrace_matches_the_papers_sum_over_the_steps_ahead(
    seed, horizon, envs, dtype, gamma, clips, summed_by
):
    data = random_sequences(seed, horizon, envs, off_policy=1.0, dtype=dtype)
    ratios = np.exp(data["log_rhos"])
    if horizon * envs > 30:  # enough steps that every clip cuts somewhere and somewhere not
        for bar in clips.values():
            assert (ratios > bar).any() and (ratios < bar).any()
        assert data["terminateds"].any() and data["truncateds"].any()
    vs, advantages = run_vtrace(data, gamma, **clips)
    assert vs.dtype == advantages.dtype == dtype
    expected_vs, expected_advantages = papers_vtrace(data, gamma, **clips)
    np.testing.assert_allclose(vs, expected_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, expected_advantages, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "clips",
    [
        {"rho_bar": 1.0, "c_bar": 1.0, "pg_rho_bar": 1.0},
        {"rho_bar": 1.5, "c_bar": 0.8, "pg_rho_bar": 1.2},
    ],
)
def test_vtrace_matches_the_papers_recursion_step_by_step(seed, clips):
    data = random_sequences(seed)
    assert data["terminateds"].any() and data["truncateds"].any()
    vs, advantages = run_vtrace(data, **clips)
    expected_vs, expected_advantages = reference_vtrace(data, gamma=GAMMA, **clips)
    np.testing.assert_allclose(vs, expected_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, expected_advantages, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_on_policy_vtrace_is_the_n_step_return_of_gae_with_lambda_1(seed):
    """pi = mu: every rho and c is 1, so v_s is the return bootstrapped at the end of the window
    (or of the episode), and the advantage is GAE's with lambda 1."""
    data = random_sequences(seed, off_policy=0.0)
    vs, advantages = run_vtrace(data)
    gae_advantages, targets = compute_gae(
        data["rewards"],
        data["values"],
        data["next_values"],
        data["terminateds"],
        data["truncateds"],
        GAMMA,
        1.0,
    )
    np.testing.assert_allclose(vs, targets, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, gae_advantages, rtol=1e-5, atol=1e-5)


def test_clipping_cuts_the_traces_of_unlikely_actions():
    """An action the learner would hardly take (rho ~ 0) adds nothing: its v_s is V(x_s), and the
    steps before it bootstrap from V(x_s) instead of following the rewards past it."""
    data = random_sequences(0, horizon=4, envs=1)
    data["terminateds"][:] = data["truncateds"][:] = False
    data["log_rhos"][:] = 0.0
    data["log_rhos"][2] = -50.0
    vs, advantages = run_vtrace(data)
    np.testing.assert_allclose(vs[2], data["values"][2], atol=1e-6)
    expected = data["rewards"][1] + GAMMA * data["values"][2]  # r_1 + gamma V(x_2)
    np.testing.assert_allclose(vs[1], expected, rtol=1e-5)
    assert abs(advantages[2, 0]) < 1e-6


@pytest.mark.parametrize("policy_class", [IMPALAPolicy, APPOPolicy])
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_the_learner_recovers_each_envs_sequence_from_concatenated_batches(policy_class, env):
    """Two workers' batches, concatenated as the optimizer does: with the weights that sampled
    them, V-trace's targets are GAE's (lambda 1) worked out on each env's own sequence."""
    horizon = 16
    config = trainer_config(
        algorithm="IMPALA" if policy_class is IMPALAPolicy else "APPO",
        env=env,
        hyperparameters={"rollout_length": horizon},
    )
    workers = [RolloutWorker(policy_class, config, num_envs=3, seed=s) for s in (0, 1)]
    workers[1].set_weights(workers[0].get_weights(), 0)
    batch = SampleBatch.concat([w.sample() for w in workers])
    assert len(batch) == 2 * 3 * horizon
    policy = workers[0].policy
    targets = policy.vtrace_targets(policy.as_tensors(batch.columns))

    obs = batch["obs"].reshape(6, horizon, -1)
    next_obs = batch["next_obs"].reshape(6, horizon, -1)
    ended = (batch["terminateds"] | batch["truncateds"]).reshape(6, horizon)
    # rows n*T + t: env n's steps in order, each next observation the following step's
    np.testing.assert_array_equal(next_obs[:, :-1][~ended[:, :-1]], obs[:, 1:][~ended[:, :-1]])
    with torch.no_grad():
        values = policy.model.value(torch.from_numpy(batch["obs"])).numpy()
        next_values = policy.model.value(torch.from_numpy(batch["next_obs"])).numpy()
        logp, _ = policy.model.logp_entropy(
            torch.from_numpy(batch["obs"]), torch.from_numpy(batch["actions"])
        )
    np.testing.assert_allclose(batch["logp"], logp.numpy(), rtol=1e-5, atol=1e-5)

    def time_major(column):
        return column.reshape(6, horizon).T

    advantages, value_targets = compute_gae(
        time_major(batch["rewards"]),
        time_major(values),
        time_major(next_values),
        time_major(batch["terminateds"]),
        time_major(batch["truncateds"]),
        config.hyperparameters.gamma,
        1.0,
    )
    np.testing.assert_allclose(
        targets["value_targets"].numpy(), value_targets.T.reshape(-1), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        targets["advantages"].numpy(), advantages.T.reshape(-1), rtol=1e-4, atol=1e-4
    )

    stats = policy.learn_on_batch(batch)
    assert all(math.isfinite(v) for v in stats.values()), stats


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a_whole_batch_step_sharing_its_forward_pass_with_vtrace_learns_the_same(env):
    """IMPALA's one-SGD-step learn call takes V-trace's inputs from the step's own forward pass
    (and each next observation's value from the following step's): the same update as V-trace
    from separate passes without gradients, then the loss on the learnable rows."""
    config = trainer_config(algorithm="IMPALA", env=env, hyperparameters={"rollout_length": 16})
    worker = RolloutWorker(IMPALAPolicy, config, num_envs=4, seed=0)
    batch = SampleBatch.concat([worker.sample() for _ in range(2)])
    shared, separate = worker.policy, copy.deepcopy(worker.policy)
    separate.one_forward = False
    stats = shared.learn_on_batch(batch)
    expected = separate.learn_on_batch(batch)
    assert stats.keys() == expected.keys()
    for key in stats:
        assert stats[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-5), key
    for a, b in zip(shared.model.parameters(), separate.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def impala_batch(lag: float, **hyperparameters):
    """An IMPALA worker's batch of 64 envs x 32 steps (1,800-2,048 env steps, less the reset
    steps) lagging `lag` learner steps, and its policy, learning in steps of 250 rows."""
    hyperparameters = {"train_batch_size": 250, "lag_sgd_steps": 16} | hyperparameters
    config = trainer_config(algorithm="IMPALA", hyperparameters=hyperparameters)
    worker = RolloutWorker(IMPALAPolicy, config, num_envs=64, seed=0)
    batch = worker.sample()
    assert 1_800 <= batch.env_steps <= 2_048
    batch.policy_lag = lag
    return batch, worker.policy


@pytest.mark.parametrize(("lag", "minibatches"), [(2.5, 6), (5.0, 3), (12.0, 1), (40.0, 1)])
def test_impala_takes_as_many_minibatches_as_the_batchs_lag_allows(lag, minibatches):
    """minibatch_size null: min(env steps // train_batch_size, lag_sgd_steps // lag), at
    least 1, so that the batch's samples lag at most about lag_sgd_steps SGD steps."""
    batch, policy = impala_batch(lag)
    assert policy.learn_on_batch(batch)["sgd_steps"] == minibatches


def test_impala_minibatches_go_by_size_without_lag_or_with_a_minibatch_size():
    batch, policy = impala_batch(0.0)
    assert policy.learn_on_batch(batch)["sgd_steps"] == batch.env_steps // 250
    batch, policy = impala_batch(12.0, minibatch_size=300)
    assert policy.learn_on_batch(batch)["sgd_steps"] == batch.env_steps // 300


@pytest.mark.parametrize(
    ("env_steps", "lag", "plan"),
    [
        (512, 0.8, (4, 1)),  # 2 workers x 8 envs on an idle machine: every pass
        (512, 2.0, (2, 1)),
        (2_048, 2.0, (1, 2)),  # a busy node's lag: minibatches first, then passes
        (2_048, 0.0, (1, 4)),
        (4_096, 1.0, (1, 4)),
        (512, 8.0, (1, 1)),
    ],
)
def test_appos_passes_and_minibatches_keep_within_the_lag(env_steps, lag, plan):
    """APPO's defaults (minibatch_size null, num_epochs 4, lag_sgd_steps 4, train_batch_size
    500): (passes, minibatches per pass) whose product times the lag stays within lag_sgd_steps
    where a single step does not already pass it."""
    config = trainer_config(algorithm="APPO")
    policy = RolloutWorker(APPOPolicy, config, num_envs=1, seed=0).policy
    assert policy.sgd_plan(env_steps, lag) == plan
    assert config.hyperparameters.minibatch_size is None
    sized = trainer_config(algorithm="APPO", hyperparameters={"minibatch_size": 128})
    policy = RolloutWorker(APPOPolicy, sized, num_envs=1, seed=0).policy
    assert policy.sgd_plan(env_steps, lag) == (4, env_steps // 128)  # a size: every pass


def test_appo_learns_on_a_batch_in_its_planned_sgd_steps():
    config = trainer_config(algorithm="APPO")
    worker = RolloutWorker(APPOPolicy, config, num_envs=64, seed=0)
    batch = worker.sample()
    batch.policy_lag = 2.0
    passes, splits = worker.policy.sgd_plan(batch.env_steps, 2.0)
    assert worker.policy.learn_on_batch(batch)["sgd_steps"] == passes * splits == 2


@pytest.mark.parametrize("policy_class", [IMPALAPolicy, APPOPolicy])
def test_the_value_network_steps_at_its_ratio_of_the_learning_rate(policy_class):
    """Adam's first step moves every parameter by about its step size: the value network's by
    vf_learning_rate_ratio x learning_rate, the policy network's by learning_rate."""
    hyperparameters = {"learning_rate": 1e-4, "vf_learning_rate_ratio": 10.0}
    if policy_class is APPOPolicy:  # one SGD step: one pass over one minibatch
        hyperparameters |= {"num_epochs": 1, "minibatch_size": 4096}
    config = trainer_config(
        algorithm="IMPALA" if policy_class is IMPALAPolicy else "APPO",
        hyperparameters=hyperparameters | {"train_batch_size": 4096},
    )
    worker = RolloutWorker(policy_class, config, num_envs=8, seed=0)
    batch = worker.sample()
    model = worker.policy.model
    before = copy.deepcopy(model)
    assert worker.policy.learn_on_batch(batch)["sgd_steps"] == 1

    def largest_step(net: torch.nn.Module, was: torch.nn.Module) -> float:
        return max(
            (a - b).abs().max().item()
            for a, b in zip(net.parameters(), was.parameters(), strict=True)
        )

    assert largest_step(model.critic, before.critic) == pytest.approx(1e-3, rel=0.02)
    assert largest_step(model.actor, before.actor) == pytest.approx(1e-4, rel=0.02)


@pytest.mark.parametrize(("policy_class", "envs"), [(IMPALAPolicy, 64), (APPOPolicy, 16)])
def test_a_solved_task_leaves_the_policy_where_it_is(policy_class, envs):
    """Once a task is solved, its critic fits the return (CartPole's every episode truncated at
    500: V = 1 / (1 - gamma) everywhere) and the V-trace advantages are what is left of its
    error, about 1e-4. With the defaults, 20 learner calls on such batches (IMPALA's of 3 SGD
    steps, APPO's of 16), after Adam's momentum from 20 calls of learning has died down in 20
    more, leave every action's probability within 0.01. Standardizing the advantages
    (normalize_advantages, once the default) divided them by that 1e-4 and moved the policy by
    full steps on noise, the walk that ended in collapses: 0.05 for IMPALA, 0.11 for APPO."""
    assert largest_change_on_a_solved_task(policy_class, envs) < 0.01


def largest_change_on_a_solved_task(
    policy_class: type[IMPALAPolicy], envs: int, hyperparameters: dict | None = None
) -> float:
    """The largest change of an action's probability over 20 learner calls on a solved task's
    batches, after 20 calls of learning and 20 more on those batches."""
    calls = 20
    algorithm = "IMPALA" if policy_class is IMPALAPolicy else "APPO"
    config = trainer_config(algorithm=algorithm, hyperparameters=hyperparameters or {})
    worker = RolloutWorker(policy_class, config, num_envs=envs, seed=0)
    policy = worker.policy
    for _ in range(calls):  # Adam's moments as learning leaves them
        batch = worker.sample()
        batch.policy_lag = 0.0
        policy.learn_on_batch(batch)
    solved = worker.sample()
    solved["terminateds"][:] = False
    solved["truncateds"][:] = False
    solved.policy_lag = 0.0
    obs = torch.from_numpy(solved["obs"])
    last = [m for m in policy.model.critic.modules() if isinstance(m, torch.nn.Linear)][-1]
    rng = np.random.default_rng(0)

    def first_action_probabilities() -> torch.Tensor:
        with torch.no_grad():
            logp, _ = policy.model.logp_entropy(obs, torch.zeros(len(obs), dtype=torch.long))
        return logp.exp()

    for call in range(2 * calls):
        if call == calls:  # the momentum of learning spent
            before = first_action_probabilities()
        with torch.no_grad():  # the critic knows the solved task's return
            last.weight.zero_()
            last.bias.fill_(1 / (1 - config.hyperparameters.gamma))
        solved["rewards"][:] = 1 + rng.normal(0, 1e-4, len(solved)).astype(np.float32)
        policy.learn_on_batch(solved)
    return float((first_action_probabilities() - before).abs().max())


def test_failed_episodes_after_a_long_solved_stretch_move_the_policy_as_far_as_while_learning():
    """After hundreds of learner calls on a solved task's batches, whose gradients are near 0,
    three calls on a batch of episodes that end move IMPALA's policy about as far (within 2x) as
    the same three calls right after learning. With Adam's beta2 at 0.999 (torch's default) its
    averages of squared gradients had faded meanwhile and the same calls moved it 4x as far
    (0.51 against 0.13 in an action's probability), the steps that lost solved policies."""

    def moved(solved_calls: int) -> float:
        config = trainer_config(algorithm="IMPALA")
        worker = RolloutWorker(IMPALAPolicy, config, num_envs=64, seed=0)
        policy = worker.policy
        for _ in range(20):
            batch = worker.sample()
            batch.policy_lag = 0.0
            policy.learn_on_batch(batch)
        failing = worker.sample()  # the untrained policy's episodes end: large advantages
        failing.policy_lag = 0.0
        solved = worker.sample()
        solved["terminateds"][:] = False
        solved["truncateds"][:] = False
        solved.policy_lag = 0.0
        last = [m for m in policy.model.critic.modules() if isinstance(m, torch.nn.Linear)][-1]
        rng = np.random.default_rng(0)
        for _ in range(solved_calls):
            with torch.no_grad():  # the critic knows the solved task's return
                last.weight.zero_()
                last.bias.fill_(1 / (1 - config.hyperparameters.gamma))
            solved["rewards"][:] = 1 + rng.normal(0, 1e-4, len(solved)).astype(np.float32)
            policy.learn_on_batch(solved)
        obs, first = torch.from_numpy(failing["obs"]), torch.zeros(len(failing), dtype=torch.long)
        with torch.no_grad():
            before = policy.model.logp_entropy(obs, first)[0].exp()
        for _ in range(3):
            policy.learn_on_batch(failing)
        with torch.no_grad():
            return float((policy.model.logp_entropy(obs, first)[0].exp() - before).abs().max())

    assert moved(300) < 2 * moved(0)
