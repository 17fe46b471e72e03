"""The IMPALA learner alone: `learn_on_batch` on a fixed batch, against its own ceiling.

The policy is built as `deploy/examples/cartpole-impala.yaml` asks (its hyperparameters, kuberl's
IMPALA defaults), with `--hidden` and `--rollout-length` overridable; the batch is `--batches`
sample calls of one rollout worker with `--envs` CartPole-v1 envs, concatenated as the learner
thread does: (batches x envs) sequences of rollout_length steps, reset steps included (the
learner drops them after V-trace). The learner's weights move with every call, so after the
first the batch is off-policy, as a real learner's.

Timed, each as the median of `--calls` calls after two untimed ones:

- learn:    `policy.learn_on_batch(batch)`, everything the learner thread does per batch.
- ceiling:  one SGD step (`policy.sgd_step`: forward of logp/entropy and value, backward, gradient
            clipping, Adam) on the batch's learnable rows with their targets already computed;
            the least any learner must do per batch.
- parts of the learn call: tensors from the batch's arrays, the three forward passes without
  gradients (logp, value, next value), vtrace itself, and the row selection.

    python bench/learner.py [--device cpu] [--threads 1] [--hidden 64,64] [--envs 64]
        [--batches 1] [--rollout-length 32] [--calls 50] [--vtrace-loop]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from kuberl_operator.validation import load_rljob
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.policies import impala
from kuberl_trainer.policies.impala import LEARNABLE_ROWS, vtrace
from kuberl_trainer.policies.sample_batch import SampleBatch
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "cartpole-impala.yaml"


def median_ms(fn, calls: int, device: torch.device) -> float:
    def synchronized():
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(2):
        synchronized()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        synchronized()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    parser.add_argument("--hidden", default=None, help="hidden sizes, e.g. 256,256")
    parser.add_argument("--envs", type=int, default=64, help="envs per sample call")
    parser.add_argument("--batches", type=int, default=1, help="sample calls concatenated")
    parser.add_argument("--rollout-length", type=int, default=None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument(
        "--vtrace-loop",
        action="store_true",
        help="V-trace by its loop over time whatever the shape",
    )
    args = parser.parse_args()
    if args.vtrace_loop:
        impala.MATRIX_MAX_STEPS = 0
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    config = load_rljob(EXAMPLE).spec.trainer
    overrides = {}
    if args.hidden:
        overrides["hidden_sizes"] = [int(size) for size in args.hidden.split(",")]
    if args.rollout_length:
        overrides["rollout_length"] = args.rollout_length
    config = config.model_copy(
        update={"hyperparameters": config.hyperparameters.model_copy(update=overrides)}
    )
    hp = config.hyperparameters
    worker = RolloutWorker(policy_class(config), config, num_envs=args.envs, seed=config.seed)
    batch = SampleBatch.concat([worker.sample() for _ in range(args.batches)])
    policy = worker.policy.to(device)

    tensors = policy.batch_tensors(batch)
    rows = policy.learnable_rows(tensors)
    with torch.no_grad():
        logp, _ = policy.model.logp_entropy(tensors["obs"], tensors["actions"])
        values = policy.model.value(tensors["obs"])
        next_values = policy.model.value(tensors["next_obs"])

    def time_major(column):
        return column.reshape(-1, hp.rollout_length).T

    vtrace_inputs = [
        time_major(column)
        for column in (
            logp - tensors["logp"],
            tensors["rewards"],
            values,
            next_values,
            tensors["terminateds"],
            tensors["truncateds"],
        )
    ]
    targets = policy.vtrace_targets(tensors)

    def forward_passes():
        with torch.no_grad():
            policy.model.logp_entropy(tensors["obs"], tensors["actions"])
            policy.model.value(tensors["obs"])
            policy.model.value(tensors["next_obs"])

    timings = {
        "learn_on_batch": median_ms(lambda: policy.learn_on_batch(batch), args.calls, device),
        "ceiling (sgd_step)": median_ms(lambda: policy.sgd_step(rows), args.calls, device),
        "  batch_tensors": median_ms(lambda: policy.batch_tensors(batch), args.calls, device),
        "  3 forwards, no grad": median_ms(forward_passes, args.calls, device),
        "  vtrace": median_ms(lambda: vtrace(*vtrace_inputs, hp.gamma), args.calls, device),
        "  row selection": median_ms(
            lambda: {
                k: v[tensors[LEARNABLE_ROWS]]
                for k, v in (tensors | targets).items()
                if k != LEARNABLE_ROWS
            },
            args.calls,
            device,
        ),
    }
    sequences = len(batch) // hp.rollout_length
    learn = timings["learn_on_batch"]
    ceiling = timings["ceiling (sgd_step)"]
    print(
        f"IMPALA learner, CartPole-v1, hidden {hp.hidden_sizes}, {args.device}, "
        f"{args.threads} torch thread(s), vtrace {'loop' if args.vtrace_loop else 'by shape'}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"batch: {args.batches} x {args.envs} envs x {hp.rollout_length} steps = "
        f"{sequences} sequences, {len(batch)} rows, {len(rows['obs'])} learnable"
    )
    print(f"{'':24} {'ms':>8} {'samples/s':>10}")
    for name, ms in timings.items():
        print(f"{name:24} {ms:8.2f} {len(batch) / ms * 1e3:10.0f}")
    print(f"learn / ceiling: {learn / ceiling:.2f}")


if __name__ == "__main__":
    main()
