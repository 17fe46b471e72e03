"""The CNN learner alone: PPO's `learn_on_batch` on Pong frames, on the CPU and on a GPU.

The policy is the one `deploy/examples/pong-ppo.yaml` trains (the Nature CNN on uint8 (4, 84, 84)
frame stacks, CleanRL's PPO hyperparameters: 4 epochs of minibatches of 256); the batch is
`--batches` sample calls of its rollout worker (8 envs x 128 steps = 1,024 rows each; 12 calls are
what 12 rollout workers bring the learner per iteration), learned on as the driver does it. For
each device of `--devices`, the median of `--calls` calls after two untimed ones (the weights move
with every call, as a real learner's). The CPU learner gets the threads the trainer gives a CNN
learner (every CPU this process may run on) unless `--threads` says otherwise.

Each device learns in each precision of `--precisions` (model.precision: float32, and bfloat16's
mixed precision, which `auto` picks on a CPU with native bfloat16).

    python bench/cnn_learner.py [--devices cpu cuda] [--precisions float32 bfloat16]
        [--batches 1] [--calls 5] [--threads N]

prints one line per device and precision: `learn_on_batch DEVICE PRECISION MS SAMPLES_PER_S`.
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

import torch
from learner import median_ms

from kuberl_operator.validation import load_rljob
from kuberl_trainer.envs.spaces import job_space_info
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.trainer import learner_torch_threads
from kuberl_trainer.policies.models import ConvEncoder, bfloat16_devices
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "pong-ppo.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", nargs="+", default=["cpu"], choices=["cpu", "cuda"])
    parser.add_argument("--batches", type=int, default=1, help="sample calls concatenated")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="the CPU learner's threads")
    parser.add_argument(
        "--precisions", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"]
    )
    args = parser.parse_args()

    job = load_rljob(EXAMPLE).spec
    config = job.trainer
    worker = RolloutWorker(
        policy_class(config), config, num_envs=job.rollout_workers.envs_per_worker, seed=0
    )
    threads = args.threads or learner_torch_threads(job_space_info(worker.envs, config))
    torch.set_num_threads(threads)
    batch = SampleBatch.concat([worker.sample() for _ in range(args.batches)])
    policy = worker.policy
    print(
        f"PPO learner, {config.env}, Nature CNN, batch {len(batch):,} rows "
        f"({args.batches} x {job.rollout_workers.envs_per_worker} envs x "
        f"{config.hyperparameters.rollout_length} steps), {args.calls} calls, "
        f"cpu {threads} torch thread(s), load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    encoders = [m for m in policy.model.modules() if isinstance(m, ConvEncoder)]
    for device, precision in itertools.product(args.devices, args.precisions):
        policy.to(device)
        model = config.model.model_copy(update={"precision": precision})
        for encoder in encoders:
            encoder.bfloat16_on = bfloat16_devices(model, encoder.image)
        ms = median_ms(lambda: policy.learn_on_batch(batch), args.calls, torch.device(device))
        rate = len(batch) / ms * 1e3
        print(f"learn_on_batch {device} {precision} {ms:.1f} {rate:.0f}", flush=True)


if __name__ == "__main__":
    main()
