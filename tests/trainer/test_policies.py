"""What the sampler records must be what the loss assumes: log-probabilities and values of the
policy that acted, and GAE columns consistent with them."""

import numpy as np
import pytest
import torch

from kuberl_trainer.policies.ppo import PPOPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

CATCH_CNN = {"convFilters": [[8, 3, 1]], "features": 16}


@pytest.mark.parametrize(
    "env, model",
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {}),
        # one encoder under both heads: the values are recorded while acting
        ("CartPole-v1", {"vfShareLayers": True}),
        ("custom_envs:Catch", CATCH_CNN),
    ],
)
def test_recorded_logp_and_values_match_the_policy(env, model):
    config = trainer_config(
        algorithm="PPO", env=env, model=model, hyperparameters={"rollout_length": 40}
    )
    worker = RolloutWorker(PPOPolicy, config, num_envs=3, seed=0)
    assert worker.policy.records_values == bool(model)
    batch = worker.sample()
    # 3 envs x 40 steps, less each env's reset step after an episode's end: one row per step of
    # the episodes that ended and of those still going
    assert len(batch) == batch.episode_lengths.sum() + worker.episodes.lengths.sum()
    assert len(batch) < 120 if env != "Pendulum-v1" else len(batch) == 120
    obs = torch.from_numpy(batch["obs"])
    with torch.no_grad():
        logp, _ = worker.policy.model.logp_entropy(obs, torch.from_numpy(batch["actions"]))
        values = worker.policy.model.value(obs)
    np.testing.assert_allclose(batch["logp"], logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch["values"], values.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        batch["value_targets"], batch["advantages"] + batch["values"], rtol=1e-5, atol=1e-5
    )


def test_sampled_actions_follow_the_policy_distribution():
    """Gumbel-max sampling from pre-drawn noise: action frequencies match softmax(logits)."""
    config = trainer_config(algorithm="PPO", hyperparameters={"rollout_length": 1})
    worker = RolloutWorker(PPOPolicy, config, num_envs=1, seed=0)
    obs = np.tile(worker.obs, (20_000, 1))
    actions, columns = worker.policy.compute_actions(obs)
    probs = torch.softmax(torch.from_numpy(columns["dist_inputs"][0]), -1).numpy()
    frequencies = np.bincount(actions, minlength=2) / len(actions)
    np.testing.assert_allclose(frequencies, probs, atol=0.015)
