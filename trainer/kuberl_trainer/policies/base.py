"""The torch plumbing every policy shares (the interface itself is in policy/interface.py)."""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from kuberl_contract.config import AnyTrainerConfig
from kuberl_contract.progress_row import GRAD_NORM
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.errors import IncompatibleCheckpointError, InvalidJobError
from kuberl_trainer.policies.adam import Adam
from kuberl_trainer.policies.interface import Policy, Stats, Weights
from kuberl_trainer.policies.recurrent import check_memory_fits
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.policies.towers import Towers

TensorStats = dict[str, torch.Tensor]  # statistics not yet read from the learner's device


class TorchPolicy(Policy):
    """A policy whose parameters live in one torch module trained with Adam, on `device`.

    Numpy arrays become tensors on the device through `as_tensor`/`as_tensors`; everything that
    leaves the policy (actions, weights, gradients, state) is on the CPU (`tensor.numpy(force=True)`
    brings a result back from any device), so rollout workers and checkpoints never see the
    learner's device."""

    TAKES_MEMORY = False
    """Whether it learns with a memory (spec.trainer.model.recurrent, see recurrent.py)."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int, model: nn.Module):
        super().__init__(spaces, config, seed)
        self.recurrent = getattr(config.model, "recurrent", None) is not None
        if self.recurrent and not self.TAKES_MEMORY:
            raise InvalidJobError(
                f"spec.trainer.model.recurrent: {config.algorithm} does not take a memory; PPO "
                "and A2C (A3C) do. Remove model.recurrent or choose one of those"
            )
        self.model = model
        self.device = torch.device("cpu")
        hp = self.hp
        self.optimizer = Adam(model.parameters(), lr=hp.learning_rate, eps=hp.adam_epsilon)
        # On the CPU whatever the device: a seed draws the same numbers on every machine.
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.towers: Towers | None = None  # learning on one device

    def limit_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)

    def to(self, device: str | torch.device) -> TorchPolicy:
        """Move the model, and any optimizer state already built, to `device`."""
        self.device = torch.device(device)
        self.model.to(self.device)
        if self.optimizer.state:  # moments follow: loading casts them to the parameters' device
            self.optimizer.load_state_dict(self.optimizer.state_dict())
        return self

    def sampling_copy(self) -> TorchPolicy:
        """A copy of this policy to act with, made while this one is still on the CPU: a model of
        its own, which `set_weights` brings up to date, and this policy's random generators, not
        copies of them, so that acting draws the very numbers it would have drawn here (learning
        and acting share one stream, as with a single policy) and this policy's checkpoints hold
        them."""
        shared = (self.generator, self.rng, self.config, self.hp, self.spaces)
        return copy.deepcopy(self, memo={id(value): value for value in shared})

    def as_tensor(self, array: np.ndarray) -> torch.Tensor:
        """`array` as a tensor on the policy's device: on the CPU it shares the array's memory,
        unless the array is read-only (as Ray's object store hands them out), which torch
        cannot share without a warning, so that one is copied."""
        if array.flags.writeable:
            return torch.from_numpy(array).to(self.device)
        return torch.tensor(array, device=self.device)

    def as_tensors(self, columns: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: self.as_tensor(v) for k, v in columns.items()}

    @abstractmethod
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The scalar to minimise and the statistics to report."""

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        return mean_stats([self.sgd_step(self.as_tensors(batch.columns))])

    def sgd_step(self, tensors: dict[str, torch.Tensor]) -> TensorStats:
        """One gradient step on a minibatch, split across the towers if there are any; its
        statistics stay on the device (mean_stats brings a learn call's home at once)."""
        loss, stats = self.loss(tensors) if self.towers is None else self.towers.loss(tensors)
        stats = self.backward(loss, stats)
        self.optimizer.step()
        return stats

    def to_towers(self, devices: Sequence[str | torch.device]) -> TorchPolicy:
        """Learn on several devices: the model on the first, a replica on each other one, and
        every SGD step's minibatch split across them (see towers.py)."""
        if self.recurrent:  # towers split a minibatch by rows, which would cut its sequences
            raise InvalidJobError(
                "spec.trainer.model.recurrent: a recurrent policy learns on one device; ask "
                "learner.gpus for at most 1"
            )
        self.to(devices[0])
        self.towers = Towers(self, devices[1:])
        return self

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Stats]:
        loss, stats = self.loss(self.as_tensors(batch.columns))
        stats = self.backward(loss, stats)
        return [_grad_or_zeros(p) for p in self.model.parameters()], mean_stats([stats])

    def backward(self, loss: torch.Tensor, stats: TensorStats) -> TensorStats:
        """Fresh gradients of `loss`, clipped to max_grad_norm; the statistics with the gradient
        norm added, still on the device: reading each as a float would wait for the device, once
        per statistic and step."""
        self.optimizer.zero_grad()
        loss.backward()
        if self.towers is not None:
            self.towers.gather_gradients()
        if self.hp.max_grad_norm is not None:
            stats[GRAD_NORM] = nn.utils.clip_grad_norm_(
                self.model.parameters(), self.hp.max_grad_norm
            )
        return stats

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        for param, grad in zip(self.model.parameters(), gradients, strict=True):
            param.grad = self.as_tensor(grad)
        self.optimizer.step()

    def get_weights(self) -> Weights:
        return numpy_weights(self.model)

    def set_weights(self, weights: Weights) -> None:
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})

    def get_state(self) -> dict[str, Any]:
        return {
            "weights": self.get_weights(),
            # a copy: load_state_dict shares tensors, and two policies must never share moments;
            # on the CPU, so that a checkpoint loads anywhere (loading casts to the device)
            "optimizer": cpu_copy(self.optimizer.state_dict()),
            "torch_rng": self.generator.get_state(),
            "numpy_rng": self.rng.bit_generator.state,
            "global_timesteps": self.global_timesteps,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        check_memory_fits(self.recurrent, state["weights"])
        check_weights_fit(self.model, state["weights"])
        self.set_weights(state["weights"])
        # The moments come from the state, the settings (step size) from this policy's config:
        # a trial of a population takes a donor's state with hyperparameters of its own.
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["torch_rng"])
        self.rng.bit_generator.state = state["numpy_rng"]
        self.set_global_timesteps(state["global_timesteps"])

    def warm_start(self, state: dict[str, Any]) -> None:
        """Start from a trained policy (a checkpoint's `get_state()`): its networks' weights,
        target networks included, and its optimizer's moments, as Stable-Baselines3's load and
        RLlib's restore keep them: fresh moments make Adam's first steps as large as the
        learning rate in every weight, which undoes a converged policy within a few updates.
        The step size stays this job's, and its random generators and counters its own."""
        check_memory_fits(self.recurrent, state["weights"])
        check_weights_fit(self.model, state["weights"])
        self.set_weights(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])

    def set_learning_rate(self, lr: float) -> None:
        self.optimizer.lr = lr


def check_weights_fit(module: nn.Module, weights: Weights, what: str = "network") -> None:
    """IncompatibleCheckpointError naming the tensors where `weights` do not fit `module`."""
    if mismatches := weight_mismatches(module, weights):
        shown = "; ".join(mismatches[:4])
        more = f"; and {len(mismatches) - 4} more" if len(mismatches) > 4 else ""
        raise IncompatibleCheckpointError(
            f"the checkpoint's {what} does not fit this job's: {shown}{more}"
        )


def weight_mismatches(module: nn.Module, weights: Weights) -> list[str]:
    """Where `weights` (a checkpoint's) do not fit `module`: each tensor of another shape, or in
    one of them only, named as the module names it."""
    own = module.state_dict()
    mismatches = []
    for name in [*own, *(name for name in weights if name not in own)]:
        if name not in weights:
            mismatches.append(f"{name} {tuple(own[name].shape)} is not in the checkpoint")
        elif name not in own:
            mismatches.append(f"{name} {tuple(weights[name].shape)} is in the checkpoint only")
        elif tuple(own[name].shape) != tuple(weights[name].shape):
            mismatches.append(
                f"{name} is {tuple(weights[name].shape)} in the checkpoint, "
                f"{tuple(own[name].shape)} in this job"
            )
    return mismatches


def mean_stats(steps: list[TensorStats], extra: torch.Tensor | None = None) -> Stats:
    """The mean of each statistic over a learn call's SGD steps, read from the device in one
    transfer: one wait for the device per learn call, not one per statistic and step. `extra`, a
    1-d tensor the caller needs on the host too (a prioritized buffer's TD errors), comes in the
    same transfer and is returned under the key "extra" as a numpy array."""
    keys = list(steps[0])
    means = torch.stack([torch.stack([step[k].float() for k in keys]) for step in steps]).mean(0)
    if extra is not None:
        means = torch.cat([means, extra.float()])
    host = means.numpy(force=True)
    stats: dict[str, Any] = dict(zip(keys, host[: len(keys)].tolist(), strict=True))
    if extra is not None:
        stats["extra"] = host[len(keys) :]
    return stats


def numpy_weights(module: nn.Module) -> Weights:
    """The module's state as fresh CPU numpy arrays, whatever its device."""
    return {k: _numpy_copy(v) for k, v in module.state_dict().items()}


def cpu_copy(value: Any) -> Any:
    """A deep copy of nested dicts and lists (an optimizer's state) with every tensor copied to
    the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: cpu_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cpu_copy(v) for v in value]
    return copy.deepcopy(value)


def _grad_or_zeros(param: torch.Tensor) -> np.ndarray:
    if param.grad is None:
        return np.zeros(param.shape, dtype=np.float32)
    return _numpy_copy(param.grad)


def _numpy_copy(tensor: torch.Tensor) -> np.ndarray:
    # One copy on any device: from the GPU, or away from memory the tensor still shares.
    return tensor.detach().to("cpu", copy=True).numpy()
