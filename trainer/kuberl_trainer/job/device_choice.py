"""Where a learner given a GPU learns when the job leaves the choice to kuberl
(`spec.learner.device: auto`, the default): on the GPU or on the CPU, whichever its own learn
calls run faster on.

A GPU speeds up a learn call only where the call has arithmetic enough to hide the GPU's kernel
launches: PPO's learn call on Pong frames ran 6x faster on an H200 than on 16 CPU threads, while
CartPole PPO's 64x64 MLP learned at half its CPU speed there, and SAC's on Pendulum at 0.7x. On
which side of the line a job falls depends on its network, its batches, the GPU and the CPU, so
it is measured rather than guessed: the first learn calls run on the GPU (one to warm it up, then
timed), the next ones on the CPU (timed), and the learner stays where a row cost less. The policy
moves with its optimizer's moments (TorchPolicy.to), so the trial's calls learn like any other;
only the moves cost anything. Once decided, the policy's own methods are back in place: nothing
is timed or synchronised afterwards."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from kuberl_trainer.policies.base import TorchPolicy
from kuberl_trainer.policies.sample_batch import SampleBatch

log = logging.getLogger(__name__)

# A policy's entry points that learn: on sampled batches, on replayed minibatches, on the
# gradients of A3C's workers, and on ES's gradient estimate.
LEARN_METHODS = (
    "learn_on_batch",
    "learn_on_replay_batch",
    "apply_gradients",
    "apply_flat_gradient",
)
# The GPU's first call pays for CUDA's lazy start, cuDNN's algorithm search and the caching
# allocator's first blocks; the CPU has nothing comparable to warm up.
GPU_WARMUP_CALLS = 1
TIMED_CALLS = 2
# A first CPU call this many times slower per row than the GPU's best ends the trial at once:
# a second would only cost time (a CNN's learn call takes seconds on a CPU).
CLEARLY_SLOWER = 2.0
GPU, CPU = "gpu", "cpu"  # the two sides of the trial


class DeviceTrial:
    """Times `policy`'s learn calls on `gpu`, then on the CPU, and leaves the policy on the
    faster; `on_choice(device, reason)` hears the outcome once. `clock` reads seconds (a test's
    clock makes the timings what it needs)."""

    def __init__(
        self,
        policy: TorchPolicy,
        gpu: str,
        on_choice: Callable[[str, str], None],
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.policy = policy
        self.gpu = gpu
        self.on_choice = on_choice
        self.clock = clock
        # Which side each call runs on, in order: the GPU's warm-up and timed calls, the CPU's.
        self.plan = [GPU] * (GPU_WARMUP_CALLS + TIMED_CALLS) + [CPU] * TIMED_CALLS
        self.devices = {GPU: gpu, CPU: "cpu"}
        self.calls = 0
        self.seconds_per_row: dict[str, list[float]] = {GPU: [], CPU: []}
        self.installed: list[str] = []
        self._learning = False  # a learn method that calls another is timed once

    def install(self) -> DeviceTrial:
        for name in LEARN_METHODS:
            if hasattr(self.policy, name):
                setattr(self.policy, name, self._timed(getattr(self.policy, name)))
                self.installed.append(name)
        return self

    def _timed(self, learn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(learn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._learning:
                return learn(*args, **kwargs)
            side = self.plan[self.calls]
            device = self.devices[side]
            if self.policy.device != torch.device(device):
                self.policy.to(device)
            self._learning = True
            try:
                synchronize(device)
                start = self.clock()
                result = learn(*args, **kwargs)
                synchronize(device)
                elapsed = self.clock() - start
            finally:
                self._learning = False
            self._record(side, elapsed / rows(args))
            return result

        return timed

    def _record(self, side: str, seconds_per_row: float) -> None:
        self.calls += 1
        if self.calls <= GPU_WARMUP_CALLS:
            return
        self.seconds_per_row[side].append(seconds_per_row)
        gpu, cpu = (min(self.seconds_per_row[s], default=None) for s in (GPU, CPU))
        if cpu is not None and (self.calls == len(self.plan) or cpu >= CLEARLY_SLOWER * gpu):
            self._decide(gpu, cpu)

    def _decide(self, gpu: float, cpu: float) -> None:
        device = "cpu" if cpu < gpu else self.gpu
        if self.policy.device != torch.device(device):
            self.policy.to(device)
        for name in self.installed:  # the class's methods again
            delattr(self.policy, name)
        faster = max(gpu, cpu) / min(gpu, cpu)
        reason = (
            f"learn calls took {1e6 * gpu:.2f} us per row on {self.gpu} and {1e6 * cpu:.2f} on "
            f"the CPU: learning on {'the CPU' if device == 'cpu' else self.gpu}, "
            f"{faster:.1f}x faster (learner.device: auto; gpu keeps the GPU)"
        )
        log.info(reason)
        self.on_choice(device, reason)


def synchronize(device: str) -> None:
    """Wait for `device`'s queued work, so that the clock reads what the call cost."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def rows(args: tuple[Any, ...]) -> int:
    """Rows a learn call's batch holds (1 for gradients): calls are compared per row, since an
    asynchronous learner's batches differ in size."""
    batch = args[0] if args else None
    if isinstance(batch, SampleBatch):
        return max(1, len(batch))
    if isinstance(batch, dict) and batch:
        return max(1, len(next(iter(batch.values()))))
    return 1


def learner_devices(gpus: int, cuda_count: int) -> tuple[list[str], str | None]:
    """Where the learner trains: one device per learner GPU (one CPU without GPUs), and a
    warning where fewer CUDA devices are visible than the job asked for. The count never depends
    on the machine, so LocalMultiGPU splits its minibatches alike everywhere: without CUDA each
    GPU becomes a CPU device, and too few GPUs are shared."""
    if gpus < 1:
        return ["cpu"], None
    if cuda_count < 1:
        warning = f"learner.gpus={gpus} but no CUDA device is visible: learning on the CPU"
        return ["cpu"] * gpus, warning
    devices = [f"cuda:{index % cuda_count}" for index in range(gpus)]
    if cuda_count < gpus:
        visible = f"{cuda_count} CUDA device{'s are' if cuda_count > 1 else ' is'} visible"
        return devices, f"learner.gpus={gpus} but {visible}: its {gpus} devices share them"
    return devices, None
