"""kuberl's Adam against torch.optim.Adam(fused=True): the same steps, bit for bit, and state
dicts that load in either. And why it exists: building a policy must not import torch._dynamo."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.policies.adam import Adam
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config


def two_models() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    twin = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    twin.load_state_dict(model.state_dict())
    return model, twin


def train(model: nn.Module, optimizer, steps: int, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 4, generator=generator)
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        optimizer.step()


def assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def train_both_alike(ours: tuple, torchs: tuple, steps: int, seed: int = 1) -> None:
    """Train each (model, optimizer) pair on the same batches; the models must end equal."""
    train(*ours, steps, seed)
    train(*torchs, steps, seed)
    assert_same_parameters(ours[0], torchs[0])


@pytest.mark.parametrize("weight_decay", [0.0, 0.005])
def test_steps_are_torchs_bit_for_bit(weight_decay):
    ours_model, torchs_model = two_models()
    ours = Adam(ours_model.parameters(), lr=1e-2, eps=1e-5)
    ours.weight_decay = weight_decay
    torchs = torch.optim.Adam(
        torchs_model.parameters(), lr=1e-2, eps=1e-5, weight_decay=weight_decay, fused=True
    )
    train_both_alike((ours_model, ours), (torchs_model, torchs), 25)
    before = [p.clone() for p in ours_model.parameters()]
    train(ours_model, ours, 1)
    assert not all(torch.equal(a, b) for a, b in zip(before, ours_model.parameters(), strict=True))


def test_a_changed_step_size_applies_from_the_next_step():
    ours_model, torchs_model = two_models()
    ours = Adam(ours_model.parameters(), lr=1e-2, eps=1e-5)
    torchs = torch.optim.Adam(torchs_model.parameters(), lr=1e-2, eps=1e-5, fused=True)
    train_both_alike((ours_model, ours), (torchs_model, torchs), 5)
    ours.lr = 3e-3
    torchs.param_groups[0]["lr"] = 3e-3
    train_both_alike((ours_model, ours), (torchs_model, torchs), 5, seed=2)


def test_scaled_parameters_step_as_a_param_group_of_their_own_and_follow_lr():
    ours_model, torchs_model = two_models()
    ours = Adam(ours_model.parameters(), lr=1e-3, eps=1e-5)
    ours.scale_steps(ours_model[2].parameters(), 30.0)
    torchs = torch.optim.Adam(
        [
            {"params": torchs_model[0].parameters()},
            {"params": torchs_model[2].parameters(), "lr": 1e-3 * 30.0},
        ],
        lr=1e-3,
        eps=1e-5,
        fused=True,
    )
    train_both_alike((ours_model, ours), (torchs_model, torchs), 10)
    ours.lr = 2e-4  # a schedule's change: the scaled group takes 30x the new rate
    torchs.param_groups[0]["lr"], torchs.param_groups[1]["lr"] = 2e-4, 2e-4 * 30.0
    train_both_alike((ours_model, ours), (torchs_model, torchs), 5, seed=2)
    assert ours.state_dict()["param_groups"][0]["lr"] == 2e-4  # the scales are settings


def test_state_dicts_load_both_ways_and_training_goes_on_alike():
    ours_model, torchs_model = two_models()
    ours = Adam(ours_model.parameters(), lr=1e-2, eps=1e-5)
    train(ours_model, ours, 10)
    torchs_model.load_state_dict(ours_model.state_dict())
    torchs = torch.optim.Adam(torchs_model.parameters(), lr=1e-2, eps=1e-5, fused=True)
    torchs.load_state_dict(copy.deepcopy(ours.state_dict()))  # ours → torch's: torch shares
    train_both_alike((ours_model, ours), (torchs_model, torchs), 10, seed=3)

    again = Adam(torchs_model.parameters(), lr=1e-2, eps=1e-5)
    again.load_state_dict(torchs.state_dict())  # torch's → ours
    train_both_alike((ours_model, ours), (torchs_model, again), 10, seed=4)


def test_loaded_moments_are_copies_and_settings_stay_the_loaders():
    model, twin = two_models()
    donor = Adam(model.parameters(), lr=1e-2, eps=1e-5)
    train(model, donor, 3)
    taker = Adam(twin.parameters(), lr=5e-4, eps=1e-5)
    taker.load_state_dict(donor.state_dict())
    assert taker.lr == 5e-4
    train(twin, taker, 1)
    donor_moments = donor.state_dict()["state"]
    taker_moments = taker.state_dict()["state"]
    assert not torch.equal(donor_moments[0]["exp_avg"], taker_moments[0]["exp_avg"])
    assert float(donor_moments[0]["step"]) == 3 and float(taker_moments[0]["step"]) == 4


def test_a_state_of_another_model_is_refused_and_changes_nothing():
    model, _ = two_models()
    adam = Adam(model.parameters(), lr=1e-2)
    train(model, adam, 2)
    kept = adam.state_dict()
    other = nn.Linear(3, 16)
    wrong = Adam(other.parameters(), lr=1e-2)
    other(torch.ones(1, 3)).sum().backward()
    wrong.step()
    with pytest.raises(ValueError, match=r"exp_avg of parameter 0 has shape \(16, 3\)"):
        adam.load_state_dict(wrong.state_dict())
    too_many = {"state": {7: kept["state"][0]}}
    with pytest.raises(ValueError, match="names parameter 7, but the model has 4"):
        adam.load_state_dict(too_many)
    assert all(
        torch.equal(adam.state_dict()["state"][i]["exp_avg"], kept["state"][i]["exp_avg"])
        for i in range(4)
    )


def test_a_training_run_and_its_export_leave_torch_dynamo_unimported(tmp_path):
    """Importing it took 1.1-1.3 s; torch's torch.export-based ONNX exporter imports it too,
    which made the export at the end of `make run` 2 s, a third of the command."""
    script = f"""
import sys
from pathlib import Path
from pydantic import TypeAdapter
from kuberl_contract.config import RolloutConfig, TrainerConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.trained.export import export_checkpoint
config = TypeAdapter(TrainerConfig).validate_python(
    {{"algorithm": "PPO", "env": "CartPole-v1", "stop": {{"timesteps": 512}}}}
)
run_dir = Path({str(tmp_path)!r})
result = Driver(config, RolloutConfig(replicas=0), run_dir, "adam", export=export_checkpoint).run()
print(result.timesteps, result.policy, "torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    timesteps, policy, dynamo = out.stdout.split()[-3:]
    assert int(timesteps) >= 512 and dynamo == "False"
    assert policy.endswith("policy.onnx") and Path(policy).stat().st_size > 0


@pytest.mark.parametrize(("algorithm", "ratio"), [("A2C", 1.0), ("PPO", 3.0), ("IMPALA", 30.0)])
def test_an_actor_critic_steps_its_value_network_at_its_ratio(algorithm, ratio):
    """vf_learning_rate_ratio scales the steps of the value network's parameters, and only
    theirs (its default where the ratio is 1 or 30)."""
    hyperparameters = {"vf_learning_rate_ratio": ratio} if ratio == 3.0 else {}
    config = trainer_config(algorithm=algorithm, hyperparameters=hyperparameters)
    policy = RolloutWorker(policy_class(config), config, num_envs=1, seed=0).policy
    scaled = {id(p) for p, scale in policy.optimizer.step_scales.items() if scale != 1.0}
    expected = {id(p) for p in policy.model.critic.parameters()} if ratio != 1.0 else set()
    assert scaled == expected
    assert set(policy.optimizer.step_scales.values()) == {ratio}
