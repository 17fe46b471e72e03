"""Throughput scaling: env steps/s of CartPole-v1 training with 1 and 2 rollout workers.

Three execution strategies, each with its algorithm's defaults, through kuberl's Driver (as a job
runs) on one local Ray instance:

- SyncSamples (A2C by default; --sync PPO): broadcast, sample every worker, learn, repeat.
- AsyncSamples (IMPALA): workers sample without waiting; a learner thread learns on the batches.
- AsyncReplay (APEX): workers feed replay shards; a learner thread samples them.

Every worker reserves 1 CPU. Each run warms up for --warmup iterations (enough to fill a learner
queue that falls behind, so that the timed window sees the steady state), then --iterations
iterations are timed: env steps sampled per second of wall time, and beside it the CPU the driver
process used (its main thread, the driver's loop, separately) and the CPU the whole machine was
busy, both in cores, so a reader can tell a saturated machine from driver overhead. Runs are
interleaved round by round with the order rotating, and the 2-worker / 1-worker ratio is the
median of the per-round ratios.

With --step-ms, every env step also waits that long without using the CPU (bench/trivial_env.py's
SlowCartPole): the workers are then bound by the env's latency instead of the cores, and the ratio
shows whether the optimizer keeps both workers busy even where two cores cannot hold two workers
and a driver.

    python bench/async_scaling.py [--rounds 3] [--warmup 30] [--iterations 300] [--step-ms 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import ray
import torch
from driver_clock import FREE_RUNNING, IterationClock, run_driver, save_results, trainer_config

from kuberl_trainer.config import RolloutConfig

BENCH = Path(__file__).parent
ENV = "CartPole-v1"
SLOW_ENV = "trivial_env:SlowCartPole"
WORKER_COUNTS = (1, 2)


def cases(sync_algorithm: str) -> dict[str, str]:
    """Optimizer → the algorithm whose defaults it runs with."""
    return {"SyncSamples": sync_algorithm, "AsyncSamples": "IMPALA", "AsyncReplay": "APEX"}


def measure(algorithm: str, workers: int, args: argparse.Namespace, seed: int) -> dict:
    config = trainer_config(
        algorithm=algorithm,
        env=SLOW_ENV if args.step_ms else ENV,
        envConfig={"step_ms": args.step_ms} if args.step_ms else {},
        seed=seed,
        stop={"iterations": args.warmup + args.iterations},
        hyperparameters=FREE_RUNNING.get(algorithm, {}),
    )
    rollout = RolloutConfig(replicas=workers, envs_per_worker=args.envs, cpus_per_worker=1.0)
    clock = IterationClock()
    run_driver(config, rollout, clock)
    return clock.window(args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed iterations per run")
    parser.add_argument("--iterations", type=int, default=300, help="timed iterations per run")
    parser.add_argument("--envs", type=int, default=8, help="envs per rollout worker")
    parser.add_argument(
        "--step-ms", type=float, default=0, help="wait per env step, off the CPU (0: none)"
    )
    parser.add_argument("--sync", default="A2C", choices=["A2C", "PPO"], help="SyncSamples' algo")
    parser.add_argument(
        "--optimizers", nargs="+", default=list(cases("A2C")), choices=list(cases("A2C"))
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, 2+5 iterations")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.iterations = 1, 2, 5

    # The workers import trivial_env from this directory.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
    # One Ray instance for every run; the driver leaves an instance it did not start running.
    # Its CPUs are the machine's: two 1-CPU workers fit on 2 cores, beside the driver.
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    by_optimizer = {o: a for o, a in cases(args.sync).items() if o in args.optimizers}
    runs: dict[str, dict[int, list[dict]]] = {
        o: {n: [] for n in WORKER_COUNTS} for o in by_optimizer
    }
    order = [(o, n) for o in by_optimizer for n in WORKER_COUNTS]
    for r in range(args.rounds):
        k = r % len(order)  # rotate who goes first, so drift in load spreads evenly
        for optimizer, workers in order[k:] + order[:k]:
            result = measure(by_optimizer[optimizer], workers, args, seed=r)
            runs[optimizer][workers].append(result)
            print(
                f"round {r + 1}/{args.rounds} {optimizer} ({by_optimizer[optimizer]}) "
                f"{workers} worker(s): {result['steps_per_s']:,.0f} steps/s, driver "
                f"{result['driver_cpu']:.2f} cores (main thread {result['main_thread_cpu']:.2f}), "
                f"machine {result['machine_cpu']:.2f} cores, {result['seconds']:.1f} s",
                flush=True,
            )
    ray.shutdown()

    rows = []
    for optimizer, by_workers in runs.items():
        # Per-round ratios: a round's two runs ran minutes apart at most, under about the same load.
        ratios = [
            two["steps_per_s"] / one["steps_per_s"]
            for one, two in zip(by_workers[1], by_workers[2], strict=True)
        ]
        for workers, mine in by_workers.items():
            rate = [m["steps_per_s"] for m in mine]
            rows.append(
                {
                    "optimizer": optimizer,
                    "algorithm": by_optimizer[optimizer],
                    "workers": workers,
                    "runs": mine,
                    "steps_per_s_median": statistics.median(rate),
                    "steps_per_s_min": min(rate),
                    "steps_per_s_max": max(rate),
                    "driver_cpu_median": statistics.median(m["driver_cpu"] for m in mine),
                    "main_thread_cpu_median": statistics.median(m["main_thread_cpu"] for m in mine),
                    "machine_cpu_median": statistics.median(m["machine_cpu"] for m in mine),
                    "ratio_2_to_1": statistics.median(ratios),
                    "ratios": ratios,
                }
            )

    env = f"{ENV} + {args.step_ms:g} ms per step off the CPU" if args.step_ms else ENV
    print(
        f"\n{env}, {args.envs} envs per 1-CPU worker, {args.iterations} iterations timed after "
        f"{args.warmup}, median of {args.rounds} interleaved rounds; load average "
        f"{load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        "| optimizer (algorithm) | workers | env steps/s (min-max) | driver CPU cores "
        "(main thread) | machine CPU cores | 2 workers / 1 |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['optimizer']} ({r['algorithm']}) | {r['workers']} | "
            f"{r['steps_per_s_median']:,.0f} ({r['steps_per_s_min']:,.0f}-"
            f"{r['steps_per_s_max']:,.0f}) | {r['driver_cpu_median']:.2f} "
            f"({r['main_thread_cpu_median']:.2f}) | {r['machine_cpu_median']:.2f} | "
            + (f"{r['ratio_2_to_1']:.2f}x |" if r["workers"] == 2 else "|")
        )

    meta = {
        "env": ENV,
        "step_ms": args.step_ms,
        "envs_per_worker": args.envs,
        "cpus_per_worker": 1.0,
        "rounds": args.rounds,
        "warmup_iterations": args.warmup,
        "timed_iterations": args.iterations,
        "loadavg_before": load_before,
    }
    path = save_results("async-scaling", meta, {"rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
