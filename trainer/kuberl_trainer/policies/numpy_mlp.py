"""The numpy pieces of the MLPs that the numpy policies (acting.py) compute: the torch networks'
linear layers read from their state dicts, and the activations computed in place."""

from __future__ import annotations

import numpy as np

from kuberl_trainer.policies.interface import Weights

ACTIVATIONS_IN_PLACE = {
    "tanh": lambda x: np.tanh(x, out=x),
    "relu": lambda x: np.maximum(x, 0, out=x),
}
"""The activations, overwriting an intermediate result that needs no copy."""


def linear_layers(weights: Weights, network: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W^T, b) of each linear layer of the nn.Sequential at `network` (a state dict prefix), in
    order: its Linear layers are at indices 0, 2, 4, ..., the activations between them."""
    prefix = f"{network}."
    indices = sorted(
        int(name[len(prefix) :].split(".")[0])
        for name in weights
        if name.startswith(prefix)
        and name.count(".") == network.count(".") + 2
        and name.endswith(".weight")
    )
    return [
        (
            np.ascontiguousarray(weights[f"{prefix}{i}.weight"].T),
            np.array(weights[f"{prefix}{i}.bias"]),
        )
        for i in indices
    ]
