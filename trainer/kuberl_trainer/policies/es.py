"""The policy of evolution strategies: a deterministic network whose parameters ES treats as one
flat vector. A worker acts with a perturbed copy of it in each of its envs at once (one batched
forward pass per step); the driver steps the vector with Adam along the gradient the perturbations'
returns estimate (optimizers/perturbations.py).

The noise table (evolution.py's `noise_table`) is read the same way by the workers'
perturbations and the driver's gradient estimate."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kuberl_contract.config import AnyTrainerConfig
from kuberl_contract.progress_row import ES_GRADIENT_NORM, ES_UPDATE_RATIO, ES_WEIGHTS_NORM
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.policies.distributions import action_distribution, features_of, legal_only
from kuberl_trainer.policies.evolution import (
    STANDARDIZED_CLIP,
    PerturbedActing,
    nothing_seen,
    standardizer,
)
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.models import ACTIVATIONS, mlp


class ObservationStats(nn.Module):
    """Running count, sum and sum of squares of observations, as buffers: they are in the state
    dict, so they travel with the weights to the workers and into checkpoints, but they are no
    parameters, so perturbations and Adam leave them alone."""

    def __init__(self, obs_dim: int):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("sum", torch.zeros(obs_dim, dtype=torch.float64))
        self.register_buffer("sumsq", torch.zeros(obs_dim, dtype=torch.float64))

    def add(self, count: float, total: np.ndarray, sumsq: np.ndarray) -> None:
        self.count += count
        self.sum += torch.from_numpy(total).to(self.sum.device)
        self.sumsq += torch.from_numpy(sumsq).to(self.sumsq.device)

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The standardizer's mean and standard deviation; None before two observations."""
        return standardizer(torch, self.count, self.sum, self.sumsq)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """(obs - mean) / std, clipped to +-5 standard deviations; unchanged before any count."""
        if (mean_std := self.mean_std()) is None:
            return obs
        mean, std = mean_std
        return ((obs - mean) / std).clamp(-STANDARDIZED_CLIP, STANDARDIZED_CLIP).to(obs.dtype)


class ESNetwork(nn.Module):
    """The policy network behind an observation standardizer (the ES paper's, as RLlib's
    MeanStdFilter). An action mask's columns are neither standardized nor taken by the network:
    they mask its logits (distributions.py's legal_only)."""

    def __init__(self, spaces: SpaceInfo, hidden_sizes: list[int], activation: str):
        super().__init__()
        out = spaces.action_discrete_n if spaces.discrete_actions else spaces.action_dim
        self.mask_n = spaces.action_mask_n
        self.obs_stats = ObservationStats(spaces.feature_dim)
        # A small output layer, as RLlib's ES: the first perturbations decide the actions.
        self.net = mlp(spaces.feature_dim, hidden_sizes, out, activation, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(self.obs_stats.normalize(features_of(obs, self.mask_n)))
        return legal_only(torch, out, obs, self.mask_n)


class ESPolicy(PerturbedActing, TorchPolicy):
    STAT_KEYS = (ES_GRADIENT_NORM, ES_WEIGHTS_NORM, ES_UPDATE_RATIO)  # apply_flat_gradient's

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        torch.manual_seed(seed)  # network initialisation is part of what a seed fixes
        hp = config.hyperparameters
        model = ESNetwork(spaces, hp.hidden_sizes, hp.activation)
        super().__init__(spaces, config, seed, model)
        self.model: ESNetwork
        self.optimizer.weight_decay = hp.l2_coeff  # Adam adds l2_coeff x theta to the gradient
        self.num_params = sum(p.numel() for p in model.parameters())
        self._layers = [
            (m.out_features, m.in_features) for m in model.net if isinstance(m, nn.Linear)
        ]
        self._activation = ACTIVATIONS[hp.activation]()  # the network's own, as a function
        self.distribution = action_distribution(spaces)  # its mode: ES acts deterministically
        self.seen = nothing_seen(spaces.feature_dim)

    # -- acting -------------------------------------------------------------------------------

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The network's actions whatever `explore`: ES explores in parameter space."""
        with torch.inference_mode():
            out = self.model(self.as_tensor(obs)).numpy(force=True)
        actions = self.distribution.greedy_env_actions(np, out)
        return actions, {"actions": actions}

    def act_perturbed(self, obs: np.ndarray, parameters: np.ndarray) -> np.ndarray:
        """Actions for a (K, obs_dim) batch, row k by the network with the flat parameter vector
        `parameters[k]`, in one batched forward pass."""
        self.count_observations(obs)
        mask_n = self.spaces.action_mask_n
        with torch.inference_mode():
            features = features_of(self.as_tensor(obs), mask_n)
            out = self.model.obs_stats.normalize(features).unsqueeze(1)  # (K, 1, D)
            flat = self.as_tensor(parameters)
            start = 0
            for layer, (fan_out, fan_in) in enumerate(self._layers):
                weight = flat[:, start : start + fan_out * fan_in].view(-1, fan_out, fan_in)
                start += fan_out * fan_in
                bias = flat[:, None, start : start + fan_out]
                start += fan_out
                out = torch.baddbmm(bias, out, weight.transpose(1, 2))
                if layer < len(self._layers) - 1:
                    out = self._activation(out)
        out = legal_only(np, out.squeeze(1).numpy(force=True), obs, mask_n)
        return self.distribution.greedy_env_actions(np, out)

    def add_observation_stats(self, count: int, total: np.ndarray, sumsq: np.ndarray) -> None:
        """Fold workers' observation statistics into the standardizer (the driver's policy)."""
        self.model.obs_stats.add(count, total, sumsq)

    # -- the flat parameter vector ------------------------------------------------------------

    def flat_parameters(self) -> np.ndarray:
        """theta: every parameter in one float32 vector, layer by layer, weight then bias."""
        return nn.utils.parameters_to_vector(self.model.parameters()).numpy(force=True)

    def apply_flat_gradient(self, gradient: np.ndarray) -> Stats:
        """One Adam step on a loss gradient given as one vector in flat_parameters' order, with
        l2_coeff weight decay; returns the step's statistics."""
        theta = self.flat_parameters()
        params = list(self.model.parameters())
        pieces = np.split(gradient.astype(np.float32), np.cumsum([p.numel() for p in params])[:-1])
        self.apply_gradients(
            [piece.reshape(p.shape) for piece, p in zip(pieces, params, strict=True)]
        )
        step = self.flat_parameters() - theta
        return {
            ES_GRADIENT_NORM: float(np.linalg.norm(gradient)),
            ES_WEIGHTS_NORM: float(np.linalg.norm(theta)),
            ES_UPDATE_RATIO: float(np.linalg.norm(step) / max(np.linalg.norm(theta), 1e-12)),
        }

    # -- what ES does not do ------------------------------------------------------------------

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError(_NO_SAMPLES)

    def loss(self, batch: dict[str, torch.Tensor]):
        raise NotImplementedError(_NO_SAMPLES)


_NO_SAMPLES = "ES learns from the returns of perturbed parameters (Perturbations), not from samples"
