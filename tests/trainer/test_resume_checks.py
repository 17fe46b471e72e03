"""The checks behind resuming a changed job: which fields changed, which weights do not fit; what
a warm start keeps of its checkpoint."""

from __future__ import annotations

import numpy as np
from torch import nn

from kuberl_trainer.job.checkpoint import Checkpoint
from kuberl_trainer.job.resume import config_changes, other_run_changes, warm_start_part
from kuberl_trainer.policies.base import weight_mismatches


def test_config_changes_name_each_field_by_its_path():
    saved = {"env": "CartPole-v1", "hyperparameters": {"lr": 0.002, "hidden": [64, 64]}, "x": 1}
    current = {"env": "CartPole-v1", "hyperparameters": {"lr": 0.001, "hidden": [64, 64]}, "y": 2}

    assert config_changes(saved, current) == [
        "hyperparameters.lr 0.002 -> 0.001",
        "x 1 -> null",
        "y null -> 2",
    ]
    assert config_changes(saved, saved) == []


def test_only_changes_outside_stop_checkpointing_evaluation_and_reporting_make_another_run():
    saved = {
        "seed": 0,
        "hyperparameters": {"lr": 0.002},
        "stop": {"timesteps": 500},
        "checkpoint": {"everyIterations": 5},
        "evaluation": {"episodes": 10},
        "metricsWindow": 20,
        "tensorboard": False,
    }
    continued = {
        **saved,
        "stop": {"timesteps": 5000},
        "checkpoint": {"everyIterations": 1},
        "evaluation": {"episodes": 20},
        "metricsWindow": 100,
        "tensorboard": True,
    }
    assert len(config_changes(saved, continued)) == 5
    assert other_run_changes(config_changes(saved, continued)) == []

    another = {**continued, "seed": 1, "hyperparameters": {"lr": 0.001}}
    assert other_run_changes(config_changes(saved, another)) == [
        "hyperparameters.lr 0.002 -> 0.001",
        "seed 0 -> 1",
    ]

    # A population's inner trainer alike: its stop continues the run, its learning rate does not.
    population = {"trainer": saved}
    assert other_run_changes(config_changes(population, {"trainer": continued})) == []
    assert other_run_changes(config_changes(population, {"trainer": another})) == [
        "trainer.hyperparameters.lr 0.002 -> 0.001",
        "trainer.seed 0 -> 1",
    ]


def test_weight_mismatches_name_the_layers_and_both_shapes():
    module = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    weights = {k: v.numpy().copy() for k, v in module.state_dict().items()}
    assert weight_mismatches(module, weights) == []

    weights["0.weight"] = np.zeros((16, 4), np.float32)
    weights["extra.bias"] = np.zeros(3, np.float32)
    del weights["1.bias"]
    assert weight_mismatches(module, weights) == [
        "0.weight is (16, 4) in the checkpoint, (8, 4) in this job",
        "1.bias (2,) is not in the checkpoint",
        "extra.bias (3,) is in the checkpoint only",
    ]


def test_a_warm_start_keeps_the_policy_and_the_statistics_of_its_checkpoint_only():
    state = {
        "policy": {"weights": {}},
        "normalization": {"obs": {"count": 3}},
        "optimizer": {"replay": np.zeros(1_000, np.uint8)},
        "driver": {"iteration": 7},
    }
    source = Checkpoint("/runs/a/checkpoints/checkpoint-00000007", {"iteration": 7}, state)

    kept = warm_start_part(source)

    assert (kept.uri, kept.meta) == (source.uri, source.meta)
    assert kept.state == {"policy": state["policy"], "normalization": state["normalization"]}
    without_statistics = Checkpoint(source.uri, source.meta, {"policy": state["policy"]})
    assert warm_start_part(without_statistics).state == {"policy": state["policy"]}
