"""APPO's target network (IMPACT's, the surrogate's reference policy) on a real sampled batch:
refreshed on its schedule of learner steps, kept by checkpoints, and the ratio the surrogate clips
taken to it."""

import numpy as np
import torch

from kuberl_trainer.policies.appo import APPOPolicy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config


def appo_worker(**hyperparameters) -> RolloutWorker:
    hyperparameters = {"rollout_length": 16, "num_epochs": 1} | hyperparameters
    config = trainer_config(algorithm="APPO", hyperparameters=hyperparameters)
    return RolloutWorker(APPOPolicy, config, num_envs=4, seed=0)


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_the_target_network_is_refreshed_every_target_update_interval_updates():
    worker = appo_worker(target_update_interval=2)
    policy: APPOPolicy = worker.policy
    initial = [v.clone() for v in policy.target_model.state_dict().values()]
    policy.learn_on_batch(worker.sample())  # step 1: the target is still the initial policy
    assert policy.num_updates == 1 and not same(policy.target_model, policy.model)
    assert all(
        torch.equal(a, b)
        for a, b in zip(initial, policy.target_model.state_dict().values(), strict=True)
    )
    for _ in range(2):  # refreshed after step 2, then step 3
        policy.learn_on_batch(worker.sample())
    assert policy.num_updates == 3 and not same(policy.target_model, policy.model)
    assert not all(
        torch.equal(a, b)
        for a, b in zip(initial, policy.target_model.state_dict().values(), strict=True)
    )
    policy.learn_on_batch(worker.sample())  # step 4, refreshed after it
    assert same(policy.target_model, policy.model)


def test_the_target_network_and_its_schedule_survive_a_checkpoint():
    worker = appo_worker(target_update_interval=5)
    policy: APPOPolicy = worker.policy
    for _ in range(2):
        policy.learn_on_batch(worker.sample())
    restored = appo_worker(target_update_interval=5).policy
    restored.set_state(policy.get_state())
    assert restored.num_updates == 2
    assert same(restored.target_model, policy.target_model)
    assert not same(restored.target_model, restored.model)  # not refreshed by the restore


def test_ratio_is_to_the_target_network_capped_from_the_behaviour_policy():
    """With a target network equal to the learner's policy the ratio is 1 wherever the behaviour
    policy was at most twice as likely as the target to act so, and 2 pi/mu elsewhere."""
    worker = appo_worker(target_update_interval=1)
    policy: APPOPolicy = worker.policy
    batch = policy.learnable_rows(policy.batch_tensors(worker.sample()))
    behaviour = batch["reference_logp"] + torch.linspace(-2.0, 2.0, len(batch["logp"]))
    batch["logp"] = behaviour
    captured = {}
    original_min = torch.min

    def spy(a, b):
        captured.setdefault("ratio_times_advantages", a)
        return original_min(a, b)

    advantages = policy.advantages(batch)
    torch_min = torch.min
    try:
        torch.min = spy
        policy.loss(batch)
    finally:
        torch.min = torch_min
    ratio = (captured["ratio_times_advantages"] / advantages).detach().numpy()
    excess = (behaviour - batch["reference_logp"]).numpy()
    expected = np.where(excess > np.log(2.0), 2.0 * np.exp(-excess), 1.0)
    np.testing.assert_allclose(ratio, expected, rtol=1e-4)


def test_without_a_target_network_the_reference_is_the_behaviour_policy():
    worker = appo_worker()
    policy: APPOPolicy = worker.policy
    assert policy.target_model is None and policy.reference_policy is policy.model
    policy.learn_on_batch(worker.sample())
    assert "target_weights" not in policy.get_state()
    # a job that turns the target network on resumes from such a checkpoint with the policy
    restored = appo_worker(target_update_interval=3).policy
    restored.set_state(policy.get_state())
    assert same(restored.target_model, policy.model)
