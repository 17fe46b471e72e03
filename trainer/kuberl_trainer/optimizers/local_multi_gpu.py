"""LocalMultiGPU: SyncSamples' sampling, with every SGD minibatch split across the learner's
devices (RLlib's LocalMultiGPUOptimizer). One tower per learner GPU, `cuda:0..N-1`; on a machine
without CUDA each one is a CPU tower, which gives the same numerics without the speed.

Each tower computes the gradient of its shard of the minibatch; the shares are added up on the
first device (each weighted by its rows, so the sum is the whole minibatch's gradient), clipped and
applied once, and the other towers take the new weights before the next minibatch. The towers live
in the policy (policy/towers.py), which keeps the numerics: the optimizer only places them.
"""

from __future__ import annotations

from kuberl_contract.config import LEARNER_GPUS_NEEDED
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.optimizers.sync_samples import SyncSamplesOptimizer


class LocalMultiGPUOptimizer(SyncSamplesOptimizer):
    def place(self, devices: list[str]) -> None:
        if len(devices) < 2:
            raise InvalidJobError(LEARNER_GPUS_NEEDED)
        self.policy.to_towers(devices)
