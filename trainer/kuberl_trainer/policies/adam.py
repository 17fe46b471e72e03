"""Adam, the one optimizer every policy learns with, without torch.optim.

torch.optim's Optimizer imports torch._dynamo the first time one is built (its methods are
wrapped to keep the compiler out), which costs more than a second, almost as much as importing
torch. Every driver and every rollout worker builds a policy, so that second would be paid by
every process of a run. This class calls the same fused kernel that
`torch.optim.Adam(fused=True)` calls, in the same way, so its steps are bit for bit those of
torch's, and its `state_dict` has torch's layout, so checkpoints written by either load in the
other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

BETAS = (0.9, 0.999)


class Adam:
    """Adam (Kingma and Ba, 2015) over one group of parameters, with L2 weight decay added to the
    gradient as torch.optim.Adam does. `lr`, `weight_decay` and `beta2` may be changed between
    steps (a schedule, a population's explore step, a policy's own setting). Parameters given to
    `scale_steps` step by a multiple of `lr`, as a param group of their own would in
    torch.optim.Adam."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8):
        self.params = list(params)
        self.lr = lr
        self.eps = eps
        self.beta2 = BETAS[1]
        self.weight_decay = 0.0
        # Per parameter, once it has had a gradient: the step count (a float tensor, as the
        # fused kernel takes it) and the first and second moments.
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self.step_scales: dict[torch.Tensor, float] = {}  # parameter → its multiple of lr

    def scale_steps(self, params: Iterable[torch.Tensor], scale: float) -> None:
        """From now on step `params` by `scale` x lr (an actor-critic's value network, which may
        need to follow the returns faster than its policy changes:
        CriticHyperparameters.vf_learning_rate_ratio). A setting, as lr is: not part of the
        state_dict."""
        for param in params:
            self.step_scales[param] = scale

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        states = [self.state.get(p) or self._fresh_state(p) for p in params]
        steps = [s["step"] for s in states]
        # One kernel call per device and step size, as torch groups them.
        groups: dict[tuple[torch.device, float], list[int]] = {}
        for i, param in enumerate(params):
            groups.setdefault((param.device, self.step_scales.get(param, 1.0)), []).append(i)
        for (_, scale), on in groups.items():
            group_steps = [steps[i] for i in on]
            torch._foreach_add_(group_steps, 1)
            torch._fused_adam_(
                [params[i] for i in on],
                [params[i].grad for i in on],
                [states[i]["exp_avg"] for i in on],
                [states[i]["exp_avg_sq"] for i in on],
                [],  # no AMSGrad maxima
                group_steps,
                amsgrad=False,
                lr=self.lr * scale,
                beta1=BETAS[0],
                beta2=self.beta2,
                weight_decay=self.weight_decay,
                eps=self.eps,
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
        # The fused kernel leaves the parameters' version counters as they were; what caches
        # something of the weights (the CNN's bfloat16 copy for acting) sees a change by them.
        torch.autograd.graph.increment_version(params)

    def _fresh_state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        state = {
            "step": torch.zeros((), dtype=torch.float32, device=param.device),
            "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
        }
        self.state[param] = state
        return state

    def state_dict(self) -> dict[str, Any]:
        """torch.optim.Adam's layout: the moments by parameter index, and the settings."""
        index = {param: i for i, param in enumerate(self.params)}
        return {
            "state": {index[p]: dict(s) for p, s in self.state.items()},
            "param_groups": [
                {
                    "lr": self.lr,
                    "betas": (BETAS[0], self.beta2),
                    "eps": self.eps,
                    "weight_decay": self.weight_decay,
                    "amsgrad": False,
                    "maximize": False,
                    "foreach": None,
                    "capturable": False,
                    "differentiable": False,
                    "fused": True,
                    "decoupled_weight_decay": False,
                    "params": list(range(len(self.params))),
                }
            ],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the moments of `state_dict` (cast to each parameter's device and dtype); the
        settings stay this optimizer's own, as a population's trials need when one takes
        another's state with hyperparameters of its own. Checked in full before anything
        changes."""
        loaded: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for i, saved in state_dict["state"].items():
            if not 0 <= int(i) < len(self.params):
                raise ValueError(
                    f"optimizer state names parameter {i}, but the model has {len(self.params)}"
                )
            param = self.params[int(i)]
            for name in ("exp_avg", "exp_avg_sq"):
                if tuple(saved[name].shape) != tuple(param.shape):
                    raise ValueError(
                        f"optimizer state {name} of parameter {i} has shape "
                        f"{tuple(saved[name].shape)}, the parameter {tuple(param.shape)}"
                    )
            loaded[param] = {
                "step": torch.as_tensor(saved["step"], dtype=torch.float32)
                .to(param.device)
                .clone(),
                "exp_avg": saved["exp_avg"].to(param.device, param.dtype, copy=True),
                "exp_avg_sq": saved["exp_avg_sq"].to(param.device, param.dtype, copy=True),
            }
        self.state = loaded
