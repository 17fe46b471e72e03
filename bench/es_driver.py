"""ES driver overhead: the driver's CPU time per worker result with many rollout actors of a
trivial env, and from it the number of workers one driver can feed.

ES through the Driver, as a job runs it (the Perturbations optimizer): --actors remote rollout
workers of 1 env each stepping `trivial_env:Trivial` (--episode-length steps per episode), so
each call is one antithetic pair, two short episodes, and a worker answers within a millisecond or
so: the driver is the bottleneck, which is what is measured. cpusPerWorker 1/16 lets 32 actors fit
on 2 cores. The driver's CPU per result covers everything an ES iteration costs it, shared out
over the iteration's results: the calls and `completed()`, the weight broadcast (one put, a send
per actor), the ranks and the gradient estimate read from the noise table, and the Adam step.
Its main thread's CPU (time.thread_time) and its whole process's (time.process_time: Ray's own
threads in the driver too) are read after every iteration; --warmup iterations are left out.

A driver spending d seconds of CPU per result takes 1/d results per second. A worker that takes c
seconds per call (--call-seconds: the job's episodes, not the trivial env's) returns 1/c results
per second, so one driver feeds c / d workers. The default c is 0.1 s: one pair of 1,000-step
episodes at 20k env steps/s, a MuJoCo locomotion task on one core.

    python bench/es_driver.py [--actors 8 32] [--episodes-per-batch 512] [--iterations 20]
                              [--call-seconds 0.1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

import ray
import torch
from driver_clock import IterationClock, run_driver, save_results, trainer_config

from kuberl_contract.config import RolloutConfig

BENCH = Path(__file__).resolve().parent
ENV = "trivial_env:Trivial"


def measure(actors: int, args: argparse.Namespace) -> dict[str, Any]:
    """ES with `actors` workers: the driver's CPU per result over the timed iterations."""
    config = trainer_config(
        algorithm="ES",
        env=ENV,
        envConfig={"episode_length": args.episode_length},
        seed=0,
        stop={"iterations": args.warmup + args.iterations},
        hyperparameters={
            "episodes_per_batch": args.episodes_per_batch,
            "hidden_sizes": args.hidden_sizes,
            "noise_size": args.noise_size,
        },
        optimizerConfig={"requestsInFlightPerWorker": args.in_flight},
    )
    rollout = RolloutConfig(replicas=actors, envs_per_worker=1, cpus_per_worker=args.cpus_per_actor)
    clock = IterationClock()
    started = time.perf_counter()
    run_driver(config, rollout, clock)
    window = clock.window(args.warmup)
    # 1 env per actor: a call is one pair, two episodes of episode_length steps.
    results = window["steps"] / (2 * args.episode_length)
    process_ms = 1e3 * window["driver_cpu_s"] / results
    return window | {
        "actors": actors,
        "results": results,
        "results_per_iteration": results / window["iterations"],
        "process_cpu_ms_per_result": process_ms,
        "main_cpu_ms_per_result": 1e3 * window["main_thread_cpu_s"] / results,
        "wall_ms_per_result": 1e3 * window["seconds"] / results,
        "workers_fed": args.call_seconds / (process_ms / 1e3),
        "run_seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--cpus-per-actor", type=float, default=1 / 16)
    parser.add_argument("--episode-length", type=int, default=10, help="trivial env steps")
    parser.add_argument("--episodes-per-batch", type=int, default=512)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--noise-size", type=int, default=25_000_000, help="ES's default")
    parser.add_argument("--in-flight", type=int, default=2, help="calls per actor")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations")
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations")
    parser.add_argument("--call-seconds", type=float, default=0.1, help="a real worker's call")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 actors, few batches")
    args = parser.parse_args()
    if args.quick:
        args.actors, args.episodes_per_batch, args.noise_size = [4], 32, 1_000_000
        args.warmup, args.iterations = 1, 3

    # The actors import the env from this directory; Ray's workers inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
    ray_cpus = max(os.cpu_count() or 1, math.ceil(max(args.actors) * args.cpus_per_actor))
    ray.init(address="local", num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    runs = []
    for actors in args.actors:
        runs.append(measure(actors, args))
        r = runs[-1]
        print(
            f"{actors} actors: {r['process_cpu_ms_per_result']:.3f} ms driver CPU per result "
            f"(main thread {r['main_cpu_ms_per_result']:.3f}, wall {r['wall_ms_per_result']:.3f}), "
            f"{r['results']:,.0f} results in {r['run_seconds']:.0f} s",
            flush=True,
        )
    ray.shutdown()

    print(
        f"\nES, {args.episodes_per_batch} episodes per batch, actors of 1 env of {ENV} "
        f"({args.episode_length}-step episodes), network {args.hidden_sizes}, noise table "
        f"{args.noise_size:,}, {args.in_flight} calls in flight each, cpusPerWorker "
        f"{args.cpus_per_actor:g}; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs\n"
    )
    print(
        "| actors | driver CPU ms per result (process) | main thread CPU ms | wall ms | "
        f"workers fed at {args.call_seconds:g} s per call |"
    )
    print("|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r['actors']} | {r['process_cpu_ms_per_result']:.3f} | "
            f"{r['main_cpu_ms_per_result']:.3f} | {r['wall_ms_per_result']:.3f} | "
            f"{r['workers_fed']:,.0f} |"
        )

    meta = vars(args) | {"ray_cpus": ray_cpus, "loadavg_before": load_before}
    path = save_results("es-driver", meta, {"runs": runs})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
