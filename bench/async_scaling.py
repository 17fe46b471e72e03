"""Throughput scaling: env steps/s of CartPole-v1 training with 1 to 16 rollout workers.

Three execution strategies, four algorithms, each with its defaults, through kuberl's Driver (as a
job runs) on one local Ray instance:

- SyncSamples (A2C by default; --sync PPO): broadcast, sample every worker, learn, repeat.
- AsyncSamples (IMPALA and APPO): workers sample without waiting; a learner thread learns on the
  batches.
- AsyncReplay (APEX): workers feed replay shards; a learner thread samples them (run free:
  training_intensity null, so that the workers, not the learner, set the rate).

Each at every count of --workers (1 2 4 8 16) rollout workers of --envs envs, on each env of
--step-ms (2 0):

- latency-bound (--step-ms M > 0): bench/trivial_env.py's SlowCartPole, every env step also
  waiting M ms without using the CPU, like a simulator in another process. The workers wait on
  the env, not on the cores, so a 2-core machine shows whether the optimizer keeps 16 workers
  busy.
- CPU-bound (--step-ms 0): plain CartPole-v1, where the cores bound the rate.

Workers must fit the machine: each reserves cpus_per_worker = min(1, CPUs / workers) of Ray's
CPUs (the machine's; floored to Ray's unit of 1/10000 so that the sum never exceeds them), and
the driver with its learner thread reserves none. Ray schedules by these numbers only: 16
workers on 2 cores reserve 0.125 CPU each and share the two cores, one thread each.

Each run warms up until every worker has started (they start one at a time where the Ray
cluster has no CPU to spare for more; the iterations until then are `startup_iterations`) and
for --warmup iterations more (first weights, Ape-X's learning_starts, a learner queue that falls
behind filling up), then --iterations iterations are timed (an iteration is one batch from every
worker for every optimizer). Per run:

- env steps/s: env steps sampled per second of wall time;
- learned/s: env steps learned on per second (the progress rows' timesteps_trained_this_iter;
  for Ape-X, transitions replayed to the learner, which may exceed those sampled);
- for the asynchronous optimizers, the learner's utilisation (its busy share of the wall time,
  weighted by iteration time), and for AsyncSamples the policy lag of the batches learned on:
  its mean (weighted by the env steps learned on), the median of the iterations' p90s, the
  largest, and the batches dropped as staler than maxPolicyLag;
- the CPU the driver process used (its main thread, the driver's loop, separately) and the CPU
  the whole machine was busy, both in cores, so that a saturated machine shows.

Runs are interleaved round by round with the order rotating. The table gives medians over the
rounds, the speed-up (steps/s at N workers over steps/s at 1) and the scaling ratio, steps/s at
N / (N x steps/s at 1), both the median of the per-round ratios (with --workers not starting at
1: per-worker rates against the fewest workers'). Issue target: scaling >= 0.8 at 16 workers for
IMPALA, APPO and Ape-X on the latency-bound env.

--time-to R instead trains CartPole-v1 (not slowed, unless --step-ms M gives one wait) to a mean
return of R (e.g. 475) at each worker count, IMPALA and APPO by default (--algorithms), with their
defaults, one seed per round, stopping at --wall-cap seconds of training. On plain CartPole-v1 a
2-core machine runs every worker on the same two cores, the learner's, so 12 workers pay 12
start-ups there for no more CPU; with --step-ms the env's latency, not the cores, bounds the
workers, as where each worker has a CPU of its own. It reports the wall time from the start of
the run (Ray already up: building the workers counts) to the first iteration at R, the env steps
by then, and the median time against the fewest workers', so that "at 12 workers no slower than
at 2" can be checked with --workers 2 12.

    python bench/async_scaling.py [--workers 1 2 4 8 16] [--step-ms 2 0] [--rounds 3]
        [--warmup 10] [--iterations 100] [--optimizers ...] [--algorithms ...] [--quick]
    python bench/async_scaling.py --time-to 475 [--workers 2 12] [--rounds 3] [--wall-cap 300]
        [--step-ms 0]
"""

from __future__ import annotations

import argparse
import contextlib
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
from kuberl_contract.progress_row import (
    EPISODE_RETURN_MEAN,
    LEARNER_UTILISATION,
    POLICY_LAG,
    POLICY_LAG_MAX,
    POLICY_LAG_P90,
    STALE_BATCHES_DROPPED,
    TIME_TOTAL_S,
    WORKERS_READY,
)

BENCH = Path(__file__).parent
ENV = "CartPole-v1"
SLOW_ENV = "trivial_env:SlowCartPole"
WORKER_COUNTS = (1, 2, 4, 8, 16)
QUICK_WORKER_COUNTS = (1, 2)
STEP_MS = (2.0, 0.0)  # latency-bound, then CPU-bound
RAY_UNIT = 10_000  # Ray counts resources in steps of 1/10000
TRAINED = "timesteps_trained_this_iter"
ITERATION_S = "time_this_iter_s"
# What each run keeps of every progress row (the learner's statistics are absent where an
# optimizer does not report them, or an iteration learned on nothing).
ROW_KEYS = (
    TRAINED,
    ITERATION_S,
    TIME_TOTAL_S,
    EPISODE_RETURN_MEAN,
    LEARNER_UTILISATION,
    POLICY_LAG,
    POLICY_LAG_P90,
    POLICY_LAG_MAX,
    STALE_BATCHES_DROPPED,
)
TIME_TO_ALGORITHMS = ("IMPALA", "APPO")
WALL_CAP_S = 300.0
MEASURE_CAP_S = 600.0


def cases(sync_algorithm: str) -> list[tuple[str, str]]:
    """(optimizer, the algorithm whose defaults it runs with)."""
    return [
        ("SyncSamples", sync_algorithm),
        ("AsyncSamples", "IMPALA"),
        ("AsyncSamples", "APPO"),
        ("AsyncReplay", "APEX"),
    ]


def cpus_per_worker(workers: int, cpus: float) -> float:
    """min(1, cpus / workers), floored to Ray's unit so that the workers' sum fits `cpus`."""
    return min(1.0, math.floor(RAY_UNIT * cpus / workers) / RAY_UNIT)


class RowClock(IterationClock):
    """IterationClock keeping the progress rows' throughput and learner figures too."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []

    def update(self, row: dict[str, Any]) -> None:
        super().update(row)
        self.rows.append({key: row.get(key) for key in ROW_KEYS})


class WindowDone(Exception):
    """Raised by a WindowClock through the driver once its timed iterations have run."""


class WindowClock(RowClock):
    """A RowClock that ends the run (WindowDone) `iterations` iterations after the warm-up: the
    iteration where all `workers` are ready, and `warmup` more."""

    def __init__(self, workers: int, warmup: int, iterations: int) -> None:
        super().__init__()
        self.workers, self.warmup, self.iterations = workers, warmup, iterations
        self.all_ready: int | None = None  # iterations until every worker was ready

    @property
    def warmed_up(self) -> int | None:
        return None if self.all_ready is None else self.all_ready + self.warmup

    @property
    def complete(self) -> bool:
        """Whether the timed iterations have all run."""
        return self.warmed_up is not None and len(self.rows) >= self.warmed_up + self.iterations

    def update(self, row: dict[str, Any]) -> None:
        super().update(row)
        if self.all_ready is None and (row.get(WORKERS_READY) or 0) >= self.workers:
            self.all_ready = len(self.rows)
        if self.complete:
            raise WindowDone


def present(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def learner_window(rows: list[dict[str, Any]], seconds: float) -> dict[str, float | None]:
    """The timed iterations' learner figures (see the module's docstring)."""
    trained = sum(r[TRAINED] or 0 for r in rows)
    busy = [
        (r[LEARNER_UTILISATION], r[ITERATION_S]) for r in rows if r[LEARNER_UTILISATION] is not None
    ]
    lagged = [(r[POLICY_LAG], r[TRAINED] or 0) for r in rows if r[POLICY_LAG] is not None]
    p90s = present(r[POLICY_LAG_P90] for r in rows)
    maxima = present(r[POLICY_LAG_MAX] for r in rows)
    dropped = present(r[STALE_BATCHES_DROPPED] for r in rows)
    lag_weight = sum(w for _, w in lagged)
    return {
        "learned_steps": trained,
        "learned_per_s": trained / seconds,
        "learner_utilisation": (
            sum(u * s for u, s in busy) / sum(s for _, s in busy) if busy else None
        ),
        "policy_lag": sum(lag * w for lag, w in lagged) / lag_weight if lag_weight else None,
        "policy_lag_p90": statistics.median(p90s) if p90s else None,
        "policy_lag_max": max(maxima) if maxima else None,
        "stale_batches_dropped": int(sum(dropped)) if dropped else None,
    }


def measure(algorithm: str, workers: int, step_ms: float, args, cpus: float, seed: int) -> dict:
    config = trainer_config(
        algorithm=algorithm,
        env=SLOW_ENV if step_ms else ENV,
        envConfig={"step_ms": step_ms} if step_ms else {},
        seed=seed,
        # The WindowClock ends the run; this only bounds one whose workers never all start.
        stop={"wallTimeSeconds": MEASURE_CAP_S},
        hyperparameters=FREE_RUNNING.get(algorithm, {}),
    )
    rollout = RolloutConfig(
        replicas=workers,
        envs_per_worker=args.envs,
        cpus_per_worker=cpus_per_worker(workers, cpus),
    )
    clock = WindowClock(workers, args.warmup, args.iterations)
    with contextlib.suppress(WindowDone):  # how the clock ends the run
        run_driver(config, rollout, clock)
    if not clock.complete:  # a shorter window would be reported as if it were the one asked
        raise RuntimeError(
            f"the run reached its {MEASURE_CAP_S:g} s cap before its timed iterations ended "
            f"(all {workers} workers ready after {clock.all_ready} iterations, None: never)"
        )
    warmed_up = clock.warmed_up
    window = clock.window(warmed_up)
    return (
        window
        | learner_window(clock.rows[warmed_up:], window["seconds"])
        | {"startup_iterations": clock.all_ready}
    )


def time_to(algorithm: str, workers: int, args, cpus: float, seed: int) -> dict:
    """One run of CartPole-v1 (latency-bound with --step-ms) to a mean return of args.time_to,
    or to --wall-cap s of training."""
    step_ms = args.step_ms[0]
    config = trainer_config(
        algorithm=algorithm,
        env=SLOW_ENV if step_ms else ENV,
        envConfig={"step_ms": step_ms} if step_ms else {},
        seed=seed,
        stop={"episodeReturnMean": args.time_to, "wallTimeSeconds": args.wall_cap},
    )
    rollout = RolloutConfig(
        replicas=workers,
        envs_per_worker=args.envs,
        cpus_per_worker=cpus_per_worker(workers, cpus),
    )
    clock = RowClock()
    start = time.perf_counter()
    run_driver(config, rollout, clock)
    ticks = clock.ticks
    reached = next(
        (
            i
            for i, t in enumerate(ticks)
            if t.episode_return_mean is not None and t.episode_return_mean >= args.time_to
        ),
        None,
    )
    end = ticks[reached] if reached is not None else (ticks[-1] if ticks else None)
    result = {
        "reached": reached is not None,
        "wall_s": end.wall - start if reached is not None else None,
        "training_s": clock.rows[reached][TIME_TOTAL_S] if reached is not None else None,
        "steps": end.timesteps if end else 0,
        "iterations": len(ticks),
        "last_return": ticks[-1].episode_return_mean if ticks else None,
        "first_iteration_s": ticks[0].wall - start if ticks else None,
    }
    if len(ticks) >= 2:  # from the end of the first iteration: start-up stays out
        a, b = ticks[0], ticks[-1]
        result["steps_per_s"] = (b.timesteps - a.timesteps) / (b.wall - a.wall)
    return result


def fmt(value: float | None, spec: str = ",.0f", missing: str = "-") -> str:
    return missing if value is None or not math.isfinite(value) else format(value, spec)


def median_of(runs: list[dict], key: str) -> float | None:
    values = present(r.get(key) for r in runs)
    return statistics.median(values) if values else None


def env_label(step_ms: float) -> str:
    return f"{ENV} + {step_ms:g} ms" if step_ms else ENV


def throughput(args, selected: list[tuple[str, str]], cpus: float) -> None:
    load_before = os.getloadavg()
    workers = args.workers
    base = workers[0]
    keys = [(ms, o, a) for ms in args.step_ms for o, a in selected]
    runs: dict[tuple, dict[int, list[dict | None]]] = {k: {n: [] for n in workers} for k in keys}
    order = [(k, n) for k in keys for n in workers]
    started = time.perf_counter()
    for r in range(args.rounds):
        k = r % len(order)  # rotate who goes first, so drift in load spreads evenly
        for i, ((ms, optimizer, algorithm), n) in enumerate(order[k:] + order[:k]):
            label = (
                f"round {r + 1}/{args.rounds} run {i + 1}/{len(order)} {env_label(ms)} "
                f"{optimizer} ({algorithm}) {n} worker(s) x {cpus_per_worker(n, cpus):g} CPU"
            )
            try:
                result = measure(algorithm, n, ms, args, cpus, seed=r)
            except Exception as exc:  # reported; the other runs go on
                runs[(ms, optimizer, algorithm)][n].append(None)
                print(f"{label}: failed: {exc!r}", flush=True)
                continue
            runs[(ms, optimizer, algorithm)][n].append(result)
            lag = (
                f", policy lag {fmt(result['policy_lag'], '.1f')}/"
                f"{fmt(result['policy_lag_p90'], '.0f')}/{fmt(result['policy_lag_max'], '.0f')}"
                if result["policy_lag"] is not None
                else ""
            )
            print(
                f"{label}: {result['steps_per_s']:,.0f} steps/s, learned "
                f"{result['learned_per_s']:,.0f}/s{lag}, driver {result['driver_cpu']:.2f} cores "
                f"(main thread {result['main_thread_cpu']:.2f}), machine "
                f"{result['machine_cpu']:.2f} cores, {result['seconds']:.1f} s timed after "
                f"{result['startup_iterations']} iteration(s) to start every worker",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    ray.shutdown()

    rows = []
    for (ms, optimizer, algorithm), by_workers in runs.items():
        for n, mine in by_workers.items():
            ok = [m for m in mine if m is not None]
            # Per-round ratios: a round's runs ran minutes apart at most, under about the same load.
            speedups = [
                m["steps_per_s"] / b["steps_per_s"]
                for b, m in zip(by_workers[base], mine, strict=True)
                if b is not None and m is not None
            ]
            rate = [m["steps_per_s"] for m in ok]
            row = {
                "env": ENV,
                "step_ms": ms,
                "optimizer": optimizer,
                "algorithm": algorithm,
                "workers": n,
                "cpus_per_worker": cpus_per_worker(n, cpus),
                "runs": mine,
                "failed": len(mine) - len(ok),
                "speedups": speedups,
                "speedup": statistics.median(speedups) if speedups else None,
                # steps/s at N / (N x steps/s at 1): per-worker rates, against the fewest workers'
                "scaling": statistics.median(speedups) * base / n if speedups else None,
            }
            if ok:
                row |= {
                    "steps_per_s_median": statistics.median(rate),
                    "steps_per_s_min": min(rate),
                    "steps_per_s_max": max(rate),
                }
                for key in (
                    "learned_per_s",
                    "learner_utilisation",
                    "policy_lag",
                    "policy_lag_p90",
                    "policy_lag_max",
                    "stale_batches_dropped",
                    "driver_cpu",
                    "main_thread_cpu",
                    "machine_cpu",
                ):
                    row[f"{key}_median"] = median_of(ok, key)
            rows.append(row)

    print(
        f"\n{args.envs} envs per worker, each worker min(1, {cpus:g} CPUs / workers) CPUs; "
        f"{args.iterations} iterations timed after every worker had started and {args.warmup} "
        f"more, median of {args.rounds} "
        f"interleaved rounds ({elapsed / 60:.1f} min); load average {load_before[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. Scaling: steps/s at N / "
        f"(N x steps/s at {base}); lag: mean / p90 / max learner steps\n"
    )
    print(
        "| env | optimizer (algorithm) | workers x CPU | env steps/s (min-max) | learned/s | "
        "speed-up | scaling | learner busy | policy lag | stale dropped | driver CPU "
        "(main thread) | machine CPU |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "steps_per_s_median" not in r:
            print(
                f"| {env_label(r['step_ms'])} | {r['optimizer']} ({r['algorithm']}) | "
                f"{r['workers']} x {r['cpus_per_worker']:g} | failed |||||||||"
            )
            continue
        lag = (
            f"{fmt(r['policy_lag_median'], '.1f')} / {fmt(r['policy_lag_p90_median'], '.0f')} / "
            f"{fmt(r['policy_lag_max_median'], '.0f')}"
            if r["policy_lag_median"] is not None
            else "-"
        )
        failed = f" ({r['failed']} failed)" if r["failed"] else ""
        print(
            f"| {env_label(r['step_ms'])} | {r['optimizer']} ({r['algorithm']}) | "
            f"{r['workers']} x {r['cpus_per_worker']:g} | {r['steps_per_s_median']:,.0f} "
            f"({r['steps_per_s_min']:,.0f}-{r['steps_per_s_max']:,.0f}){failed} | "
            f"{fmt(r['learned_per_s_median'])} | {fmt(r['speedup'], '.2f')}x | "
            f"{fmt(r['scaling'], '.2f')} | {fmt(r['learner_utilisation_median'], '.0%')} | "
            f"{lag} | {fmt(r['stale_batches_dropped_median'], '.0f')} | "
            f"{r['driver_cpu_median']:.2f} ({r['main_thread_cpu_median']:.2f}) | "
            f"{r['machine_cpu_median']:.2f} |"
        )

    meta = {
        "mode": "throughput",
        "env": ENV,
        "step_ms": args.step_ms,
        "workers": workers,
        "ray_cpus": cpus,
        "cpus_per_worker": {n: cpus_per_worker(n, cpus) for n in workers},
        "envs_per_worker": args.envs,
        "rounds": args.rounds,
        "warmup_iterations": args.warmup,
        "timed_iterations": args.iterations,
        "elapsed_s": elapsed,
        "loadavg_before": load_before,
    }
    path = save_results("async-scaling", meta, {"rows": rows})
    print(f"\nwrote {path}")


def time_to_target(args, algorithms: list[str], cpus: float) -> None:
    load_before = os.getloadavg()
    workers = args.workers
    runs: dict[str, dict[int, list[dict | None]]] = {
        a: {n: [] for n in workers} for a in algorithms
    }
    order = [(a, n) for a in algorithms for n in workers]
    started = time.perf_counter()
    for r in range(args.rounds):
        k = r % len(order)
        for algorithm, n in order[k:] + order[:k]:
            label = (
                f"seed {r} {algorithm} {n} worker(s) x {cpus_per_worker(n, cpus):g} CPU to "
                f"{args.time_to:g}"
            )
            try:
                result = time_to(algorithm, n, args, cpus, seed=r)
            except Exception as exc:  # reported; the other runs go on
                runs[algorithm][n].append(None)
                print(f"{label}: failed: {exc!r}", flush=True)
                continue
            runs[algorithm][n].append(result)
            outcome = (
                f"{result['wall_s']:.1f} s ({result['training_s']:.1f} s training)"
                if result["reached"]
                else f"not reached (last return {fmt(result['last_return'], '.1f')})"
            )
            print(
                f"{label}: {outcome}, {result['steps']:,} env steps, "
                f"{fmt(result.get('steps_per_s'))} steps/s, first iteration after "
                f"{fmt(result['first_iteration_s'], '.1f')} s",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    ray.shutdown()

    rows = []
    for algorithm, by_workers in runs.items():
        base = None
        for n, mine in by_workers.items():
            # an unreached target (or a failed run) counts as infinitely slow: the median never
            # hides it
            walls = [m["wall_s"] if m and m["reached"] else math.inf for m in mine]
            median_s = statistics.median(walls) if walls else math.inf
            base = median_s if base is None else base
            rows.append(
                {
                    "algorithm": algorithm,
                    "workers": n,
                    "cpus_per_worker": cpus_per_worker(n, cpus),
                    "runs": mine,
                    "reached": f"{sum(bool(m and m['reached']) for m in mine)}/{len(mine)}",
                    "median_s": median_s,
                    "per_seed_s": walls,
                    "median_steps": median_of([m for m in mine if m and m["reached"]], "steps"),
                    "median_steps_per_s": median_of([m for m in mine if m], "steps_per_s"),
                    "to_fewest": median_s / base if math.isfinite(base) else None,
                }
            )

    print(
        f"\n{env_label(args.step_ms[0])} to a mean return of {args.time_to:g}, {args.envs} envs "
        f"per worker, each "
        f"worker min(1, {cpus:g} CPUs / workers) CPUs, one seed per round ({args.rounds}), "
        f"capped at {args.wall_cap:g} s of training ({elapsed / 60:.1f} min); wall time from "
        f"the run's start (Ray already up); load average {load_before[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        f"| algorithm | workers x CPU | reached | median s | per-seed s | median env steps | "
        f"steps/s | median s / at {workers[0]} workers |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['algorithm']} | {r['workers']} x {r['cpus_per_worker']:g} | {r['reached']} | "
            f"{fmt(r['median_s'], '.1f')} | "
            f"{', '.join(fmt(s, '.1f', 'not reached') for s in r['per_seed_s'])} | "
            f"{fmt(r['median_steps'])} | {fmt(r['median_steps_per_s'])} | "
            f"{fmt(r['to_fewest'], '.2f')} |"
        )

    meta = {
        "mode": "time-to",
        "env": env_label(args.step_ms[0]),
        "step_ms": args.step_ms[0],
        "target": args.time_to,
        "wall_cap_s": args.wall_cap,
        "workers": workers,
        "ray_cpus": cpus,
        "cpus_per_worker": {n: cpus_per_worker(n, cpus) for n in workers},
        "envs_per_worker": args.envs,
        "seeds": args.rounds,
        "elapsed_s": elapsed,
        "loadavg_before": load_before,
    }
    path = save_results("async-scaling-time-to", meta, {"rows": rows})
    print(f"\nwrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workers", type=int, nargs="+", default=None, help="rollout worker counts [1 2 4 8 16]"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed iterations per run")
    parser.add_argument("--iterations", type=int, default=100, help="timed iterations per run")
    parser.add_argument("--envs", type=int, default=8, help="envs per rollout worker")
    parser.add_argument(
        "--step-ms",
        type=float,
        nargs="+",
        default=None,
        help="one env per value: wait per env step, off the CPU (0: plain CartPole-v1) [2 0]; "
        "with --time-to one value [0]",
    )
    parser.add_argument("--sync", default="A2C", choices=["A2C", "PPO"], help="SyncSamples' algo")
    optimizers = list(dict.fromkeys(o for o, _ in cases("A2C")))
    parser.add_argument("--optimizers", nargs="+", default=optimizers, choices=optimizers)
    parser.add_argument(
        "--algorithms",
        nargs="+",
        default=None,
        choices=["A2C", "PPO", "IMPALA", "APPO", "APEX"],
        help="only these (the --optimizers' all; with --time-to: IMPALA APPO)",
    )
    parser.add_argument(
        "--time-to",
        type=float,
        default=None,
        metavar="RETURN",
        help="instead: wall time to this mean return on CartPole-v1 (e.g. 475)",
    )
    parser.add_argument(
        "--wall-cap",
        type=float,
        default=None,
        help=f"--time-to: training s per run [{WALL_CAP_S:g}]",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 round, 2+5 iterations, 1 and 2 workers"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.iterations = 1, 2, 5
        args.wall_cap = args.wall_cap or 30.0
    args.workers = sorted(
        set(args.workers or (QUICK_WORKER_COUNTS if args.quick else WORKER_COUNTS))
    )
    args.wall_cap = args.wall_cap or WALL_CAP_S
    if args.step_ms is None:
        args.step_ms = [0.0] if args.time_to is not None else list(STEP_MS)
    if args.time_to is not None and len(args.step_ms) != 1:
        parser.error("--step-ms: one value with --time-to")
    if min(args.step_ms) < 0:
        parser.error("--step-ms: a wait cannot be negative")
    if min(args.workers) < 1:
        parser.error("--workers: every count must be 1 or more")
    if args.time_to is None and args.warmup < 1:
        parser.error("--warmup must be at least 1 (the window starts after an iteration)")

    selected = [
        (o, a)
        for o, a in cases(args.sync)
        if o in args.optimizers and (args.algorithms is None or a in args.algorithms)
    ]
    if args.time_to is None and not selected:
        parser.error("no case left: --optimizers and --algorithms select none together")

    # The workers import trivial_env from this directory.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
    # One Ray instance for every run; the driver leaves an instance it did not start running.
    # Its CPUs are the machine's, which the workers of every run share (cpus_per_worker).
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    cpus = float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    torch.set_num_threads(1)
    if args.time_to is not None:
        time_to_target(args, args.algorithms or list(TIME_TO_ALGORITHMS), cpus)
    else:
        throughput(args, selected, cpus)


if __name__ == "__main__":
    main()
