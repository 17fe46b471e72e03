"""Driver overhead: the driver's time per sample batch and per weight broadcast with 32 rollout
actors of a trivial env, and how many workers one driver could feed at Ape-X's scale.

The actors are kuberl RolloutWorkers stepping `trivial_env:Trivial` (1 env each, --rollout-length
steps per batch, cpusPerWorker 1/16 so that 32 fit on 2 cores), with IMPALA's policy. What is
measured is the driver's CPU time: its main thread's (time.thread_time) and its whole process's
(time.process_time: Ray's own threads in the driver, which send and receive, and any learner
thread), per batch. The actors' CPU is not the quantity; on a small machine they keep every core
busy, which slows the driver's wall clock but not its CPU time.

1. Task pool: the loop every asynchronous optimizer runs per batch, on a WorkerSet alone: take
   what `completed()` returns, `send_weights` to that worker, `call` its next `sample`
   (--in-flight calls per worker). Then `put_weights` alone, and a broadcast: `put_weights` plus
   `send_weights` to all the actors. Medians over --rounds rounds of the three.
2. Optimizers: AsyncSamples (IMPALA), AsyncGradients (A3C) and AsyncReplay (APEX) through the
   Driver with the same actors: CPU per batch of the driver's main thread (the optimizer's step()
   and the driver's loop; for A3C that includes applying every gradient) and of its process (for
   IMPALA and Ape-X that includes the learner thread).

Paper scale: Ape-X's 160k env frames/s from 256 workers, in batches of --paper-steps-per-batch
env steps (RLlib's Ape-X: 50) of --paper-frameskip frames (Atari: 4). One driver that spends d
seconds per batch handles 1/d batches/s, so it feeds (frames per batch / d) / (160k / 256)
workers.

    python bench/driver_overhead.py [--actors 32] [--rounds 5] [--batches 1000] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import ray
import torch
from driver_clock import FREE_RUNNING, IterationClock, run_driver, save_results, trainer_config

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.algorithms import policy_class, remote_policy
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from kuberl_trainer.rollouts.worker_set import WorkerSet

BENCH = Path(__file__).resolve().parent
ENV = "trivial_env:Trivial"
PAPER_FRAMES_PER_S = 160_000
PAPER_WORKERS = 256
OPTIMIZERS = {"AsyncSamples": "IMPALA", "AsyncGradients": "A3C", "AsyncReplay": "APEX"}


class Clocks:
    """CPU of the main thread and of the process, and wall time, over a block of code."""

    def __enter__(self) -> Clocks:
        self._start = (time.thread_time(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        end = (time.thread_time(), time.process_time(), time.perf_counter())
        spent = (b - a for a, b in zip(self._start, end, strict=True))
        self.main_cpu, self.process_cpu, self.wall = spent

    def per(self, n: int) -> dict[str, float]:
        """Milliseconds of each clock per one of `n` things done in the block."""
        return {
            "main_cpu_ms": 1e3 * self.main_cpu / n,
            "process_cpu_ms": 1e3 * self.process_cpu / n,
            "wall_ms": 1e3 * self.wall / n,
        }


# -- 1. the task pool ---------------------------------------------------------------------------


def task_pool(args: argparse.Namespace) -> dict[str, Any]:
    config = trainer_config(
        algorithm="IMPALA",
        env=ENV,
        seed=0,
        stop={"iterations": 1},
        hyperparameters={"rollout_length": args.rollout_length},
    )
    policy, acting = policy_class(config), remote_policy(config)

    def worker_kwargs(index: int) -> dict[str, Any]:  # as the driver builds them
        return {
            "policy_class": acting if index else policy,
            "config": config,
            "num_envs": 1,
            "seed": 10_007 * index,
            "worker_index": index,
            "num_workers": args.actors,
        }

    started = time.perf_counter()
    workers = WorkerSet(RolloutWorker, worker_kwargs, args.actors, args.cpus_per_actor)
    try:
        weights = workers.local_worker.get_weights()
        ref = workers.put_weights(weights, 0)
        for index in workers.healthy_indices:
            workers.send_weights(index, ref)
            for _ in range(args.in_flight):
                workers.call(index, "sample")
        ray.get(ref)
        sizes = {"weights_bytes": sum(w.nbytes for w in weights.values())}

        def feed(batches: int) -> int:
            """The asynchronous optimizers' per-batch loop, without a learner."""
            done = 0
            while done < batches:
                for index, _batch in workers.completed():
                    workers.send_weights(index, ref)
                    workers.call(index, "sample")
                    done += 1
            return done

        feed(args.actors * args.in_flight)  # warm-up, not timed: the actors have started
        print(f"task pool: {args.actors} actors up in {time.perf_counter() - started:.0f} s")
        rounds = []
        for _ in range(args.rounds):
            with Clocks() as per_batch:
                batches = feed(args.batches)
            with Clocks() as puts:
                for version in range(args.broadcasts):
                    workers.put_weights(weights, version)
            with Clocks() as broadcasts:
                for version in range(args.broadcasts):
                    ref = workers.put_weights(weights, version)
                    for index in workers.healthy_indices:
                        workers.send_weights(index, ref)
            # What the broadcasts queued reaches the actors before the next round (not timed).
            ray.get([h.pid.remote() for h in workers.remote_workers])
            rounds.append(
                {
                    "per_batch": per_batch.per(batches),
                    "put_weights": puts.per(args.broadcasts),
                    "broadcast": broadcasts.per(args.broadcasts),
                }
            )
        medians = {
            what: {
                clock: statistics.median(r[what][clock] for r in rounds)
                for clock in rounds[0][what]
            }
            for what in rounds[0]
        }
        return sizes | medians | {"rounds": rounds}
    finally:
        workers.stop()


# -- 2. the optimizers --------------------------------------------------------------------------


def optimizer(algorithm: str, args: argparse.Namespace) -> dict[str, Any]:
    config = trainer_config(
        algorithm=algorithm,
        env=ENV,
        seed=0,
        stop={"iterations": args.warmup + args.iterations},
        hyperparameters={**FREE_RUNNING.get(algorithm, {}), "rollout_length": args.rollout_length},
        optimizerConfig={"requestsInFlightPerWorker": args.in_flight},
    )
    rollout = RolloutConfig(
        replicas=args.actors, envs_per_worker=1, cpus_per_worker=args.cpus_per_actor
    )
    clock = IterationClock()
    run_driver(config, rollout, clock)
    window = clock.window(args.warmup)
    batches = window["steps"] / args.rollout_length  # 1 env per actor
    return window | {
        "batches": batches,
        "main_cpu_ms_per_batch": 1e3 * window["main_thread_cpu_s"] / batches,
        "process_cpu_ms_per_batch": 1e3 * window["driver_cpu_s"] / batches,
        "wall_ms_per_batch": 1e3 * window["seconds"] / batches,
    }


# -- the paper's scale --------------------------------------------------------------------------


def paper_scale(ms_per_batch: float, args: argparse.Namespace) -> dict[str, float]:
    frames_per_batch = args.paper_steps_per_batch * args.paper_frameskip
    frames_per_s = frames_per_batch / (ms_per_batch / 1e3)
    return {
        "frames_per_batch": frames_per_batch,
        "driver_frames_per_s": frames_per_s,
        "workers_fed": frames_per_s / (PAPER_FRAMES_PER_S / PAPER_WORKERS),
        "budget_ms_per_batch": 1e3 * frames_per_batch / PAPER_FRAMES_PER_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--cpus-per-actor", type=float, default=1 / 16)
    parser.add_argument("--rollout-length", type=int, default=10, help="env steps per batch")
    parser.add_argument("--in-flight", type=int, default=2, help="sample calls per actor")
    parser.add_argument("--rounds", type=int, default=5, help="task-pool rounds (median)")
    parser.add_argument("--batches", type=int, default=1000, help="task-pool batches per round")
    parser.add_argument("--broadcasts", type=int, default=50, help="broadcasts per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed optimizer iterations")
    parser.add_argument("--iterations", type=int, default=50, help="timed optimizer iterations")
    parser.add_argument(
        "--optimizers", nargs="*", default=list(OPTIMIZERS), choices=list(OPTIMIZERS)
    )
    parser.add_argument("--paper-steps-per-batch", type=int, default=50)
    parser.add_argument("--paper-frameskip", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 actors, few batches")
    args = parser.parse_args()
    if args.quick:
        args.actors, args.rounds, args.batches, args.broadcasts = 4, 2, 100, 10
        args.warmup, args.iterations = 2, 5

    # The actors import the env from this directory; Ray's workers inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
    ray_cpus = max(os.cpu_count() or 1, math.ceil(args.actors * args.cpus_per_actor))
    ray.init(address="local", num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    load_before = os.getloadavg()

    pool = task_pool(args)
    print(
        f"task pool: {pool['per_batch']['process_cpu_ms']:.3f} ms driver CPU per batch "
        f"(main thread {pool['per_batch']['main_cpu_ms']:.3f}, wall "
        f"{pool['per_batch']['wall_ms']:.3f}); broadcast to {args.actors}: "
        f"{pool['broadcast']['process_cpu_ms']:.2f} ms CPU",
        flush=True,
    )
    optimizers = {}
    for name in args.optimizers:
        optimizers[name] = optimizer(OPTIMIZERS[name], args)
        o = optimizers[name]
        print(
            f"{name} ({OPTIMIZERS[name]}): {o['process_cpu_ms_per_batch']:.3f} ms driver CPU "
            f"per batch (main thread {o['main_cpu_ms_per_batch']:.3f}, wall "
            f"{o['wall_ms_per_batch']:.3f}), {o['batches']:,.0f} batches",
            flush=True,
        )
    ray.shutdown()

    # The estimate charges every batch a put of fresh weights (IMPALA with a learner step per
    # batch, the worst case) on top of the pool's bookkeeping, on the process clock.
    per_batch = pool["per_batch"]["process_cpu_ms"] + pool["put_weights"]["process_cpu_ms"]
    scale = paper_scale(per_batch, args)

    print(
        f"\n{args.actors} actors x 1 env of {ENV}, {args.rollout_length} steps per batch, "
        f"{args.in_flight} calls in flight each, cpusPerWorker {args.cpus_per_actor:g}; "
        f"weights {pool['weights_bytes']:,} bytes; load average {load_before[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| what | driver CPU ms (process) | main thread CPU ms | wall ms |")
    print("|---|---:|---:|---:|")
    for what, clocks in (
        ("task pool, per batch (completed + send_weights + call)", pool["per_batch"]),
        ("put_weights", pool["put_weights"]),
        (f"broadcast (put_weights + send_weights x {args.actors})", pool["broadcast"]),
    ):
        print(
            f"| {what} | {clocks['process_cpu_ms']:.3f} | {clocks['main_cpu_ms']:.3f} | "
            f"{clocks['wall_ms']:.3f} |"
        )
    for name, o in optimizers.items():
        print(
            f"| {name} ({OPTIMIZERS[name]}), per batch | {o['process_cpu_ms_per_batch']:.3f} | "
            f"{o['main_cpu_ms_per_batch']:.3f} | {o['wall_ms_per_batch']:.3f} |"
        )
    print(
        f"\nAt Ape-X's scale ({PAPER_FRAMES_PER_S:,} frames/s from {PAPER_WORKERS} workers, "
        f"{scale['frames_per_batch']} frames per batch: a budget of "
        f"{scale['budget_ms_per_batch']:.2f} ms per batch), {per_batch:.3f} ms per batch "
        f"(bookkeeping + one put) lets one driver take {scale['driver_frames_per_s']:,.0f} "
        f"frames/s: {scale['workers_fed']:,.0f} workers."
    )

    meta = {
        "actors": args.actors,
        "cpus_per_actor": args.cpus_per_actor,
        "ray_cpus": ray_cpus,
        "rollout_length": args.rollout_length,
        "in_flight": args.in_flight,
        "loadavg_before": load_before,
    }
    result = {
        "task_pool": pool,
        "optimizers": optimizers,
        "paper_scale": scale | {"ms_per_batch": per_batch},
    }
    path = save_results("driver-overhead", meta, result)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
