"""The optimizer table is the one place an optimizer is described: its settings agree with the
OptimizerConfig fields and their descriptions, and its classes load."""

import re

import pytest

from kuberl_contract.config import OPTIMIZERS, TRAINER_CONFIGS, OptimizerConfig, optimizers_using
from kuberl_contract.config.algorithms import ALGORITHMS
from kuberl_trainer.job.algorithms import optimizer_class
from kuberl_trainer.optimizers.base import PolicyOptimizer


def test_every_setting_is_read_by_the_optimizers_its_description_names():
    fields = OptimizerConfig.model_fields
    assert set().union(*(row.settings for row in OPTIMIZERS.values())) == set(fields)
    for name, field in fields.items():
        named = re.match(r"([A-Za-z, ]+):", field.description or "")
        assert named, f"{name}: its description does not start with the optimizers that read it"
        listed = {word.strip() for word in named.group(1).split(",")}
        assert listed == {optimizer.value for optimizer in optimizers_using(name)}, name


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_every_optimizer_loads_and_drives_an_algorithm(optimizer):
    algorithm = next(name for name, row in ALGORITHMS.items() if optimizer in row.optimizers)
    config = TRAINER_CONFIGS[algorithm].model_validate(
        {
            "algorithm": algorithm,
            "env": "CartPole-v1",
            "optimizer": optimizer.value,
            "stop": {"timesteps": 1000},
        }
    )
    assert issubclass(optimizer_class(config), PolicyOptimizer)
