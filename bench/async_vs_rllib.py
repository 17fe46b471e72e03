"""IMPALA and APPO on CartPole-v1: kuberl against RLlib 2.60, same machine, same worker count.

Both systems run 2 rollout workers (RLlib: env runners) of 16 envs each (`--workers`, `--envs`,
`--target` change that). kuberl learns in a thread of its driver process, with its algorithms'
defaults and `cpusPerWorker: 1` (the driver reserves no CPU; with more workers than CPUs, the
machine's CPUs shared among them). RLlib runs its tuned examples
(tuned_examples/impala/cartpole_impala.py, tuned_examples/appo/cartpole_appo.py) with their learner
actor (1 CPU; --rllib-learners 0 puts the learner in RLlib's driver process, where it updates
synchronously) and only the layout changed: 2 env runners instead of 4, no aggregator actors (APPO's
example has 2 per learner), and `num_cpus_per_env_runner=0.5`, without which the learner and two
1-CPU env runners ask for 3 CPUs on a 2-CPU machine and RLlib waits forever (Ray only schedules by
these numbers; both values give an env runner one thread); with more workers, the CPUs beside the
learner's shared among them.

Every run is a fresh child process (this file with --child) that prints a line per training
iteration (time, env steps sampled, mean return of the last 20 episodes) and stops at a mean
return of 400. The clock starts when the parent calls Popen (imports and Ray's start count) and
stops at the first iteration whose mean return reaches 400. Throughput is the env steps sampled
per second from the end of a run's first iteration that sampled anything to its last. Runs are
interleaved seed by seed with the order rotating, and capped at --wall-cap seconds (SIGINT, then
SIGKILL to the child's process group) and at 2M env steps (the tuned examples' budget).

Before them, unless --no-resources, each system asks for one CPU more than the machine has:
`kuberl train` of a job with one rollout worker too many must fail within seconds, naming the
fields to change; RLlib (this benchmark's IMPALA without the 0.5) is given --hang-cap seconds,
and what it got done by then is reported (built or not, iterations, env steps).

    python bench/async_vs_rllib.py [--seeds 3] [--algorithms IMPALA APPO] [--quick]
        [--workers 2] [--envs 16] [--target 400]
"""

import time

CHILD_START = time.time()  # first thing: a child's imports are inside its measured time

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

TARGET = 400.0
MAX_STEPS = 2_000_000  # the tuned examples' default_timesteps
WORKERS = 2
ENVS_PER_WORKER = 16  # the tuned examples' num_envs_per_env_runner
RETURN_WINDOW = 20  # episodes in the mean return: kuberl's metricsWindow default, set for RLlib
WALL_CAP_S = 300.0
HANG_CAP_S = 90.0
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
SYSTEMS = ("kuberl", "rllib")
ALGORITHMS = ("IMPALA", "APPO")


def emit(kind: str, record: dict) -> None:
    print(f"{kind} {json.dumps(record)}", flush=True)


def finite(value) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


# -- children: TICK lines while training, then one RESULT line ------------------------------


def kuberl_cpus_per_worker(workers: int) -> float:
    return min(1.0, (os.cpu_count() or 1) / workers)


def rllib_cpus_per_env_runner(workers: int) -> float:
    """0.5, or what the CPUs left beside the learner actor's one allow."""
    return min(0.5, max(1, (os.cpu_count() or 1) - 1) / workers)


def run_kuberl(algorithm: str, seed: int, target: float, envs: int, workers: int) -> dict:
    from driver_clock import IterationClock, run_driver, trainer_config

    from kuberl_contract.config import RolloutConfig

    def tick(t) -> None:
        emit(
            "TICK", {"time": t.time, "steps": t.timesteps, "return": finite(t.episode_return_mean)}
        )

    config = trainer_config(
        algorithm=algorithm,
        env="CartPole-v1",
        seed=seed,
        metricsWindow=RETURN_WINDOW,
        stop={"episodeReturnMean": target, "timesteps": MAX_STEPS},
    )
    rollout = RolloutConfig(
        replicas=workers, envs_per_worker=envs, cpus_per_worker=kuberl_cpus_per_worker(workers)
    )
    result = run_driver(config, rollout, IterationClock(on_tick=tick))
    return {"stopped_by": result.stopped_by, "steps": result.timesteps}


def rllib_config(
    algorithm: str,
    seed: int,
    envs: int,
    learners: int = 1,
    cpus_per_env_runner: float = 0.5,
    workers: int = WORKERS,
):
    """The tuned example of `algorithm` in this benchmark's layout."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if algorithm == "IMPALA":  # tuned_examples/impala/cartpole_impala.py
        from ray.rllib.algorithms.impala import IMPALAConfig
        from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter

        config = (
            IMPALAConfig()
            .env_runners(env_to_module_connector=lambda env, spaces, device: MeanStdFilter())
            .training(
                train_batch_size_per_learner=500,
                grad_clip=40.0,
                grad_clip_by="global_norm",
                lr=0.0005,
                vf_loss_coeff=0.05,
                entropy_coeff=0.0,
            )
        )
    else:  # tuned_examples/appo/cartpole_appo.py
        from ray.rllib.algorithms.appo import APPOConfig

        config = APPOConfig().training(
            circular_buffer_iterations_per_batch=2,
            vf_loss_coeff=0.05,
            entropy_coeff=0.0,
            lambda_=0.95,
        )
    return (
        config.environment("CartPole-v1")
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .env_runners(
            num_env_runners=workers,
            num_envs_per_env_runner=envs,
            num_cpus_per_env_runner=cpus_per_env_runner,
        )
        # The tuned examples' learner actor (0: the learner in the driver process, as kuberl's,
        # updating synchronously); no aggregator actors (APPO's example has 2), which would need
        # CPUs this machine does not have.
        .learners(num_learners=learners, num_aggregator_actors_per_learner=0)
        # An iteration a second (IMPALA's default is 10 s) so that the time to the target is
        # read at about kuberl's resolution; the same return window as kuberl's.
        .reporting(min_time_s_per_iteration=1, metrics_num_episodes_for_smoothing=RETURN_WINDOW)
        .debugging(seed=seed)
    )


def run_rllib(
    algorithm: str, seed: int, target: float, envs: int, learners: int, workers: int
) -> dict:
    import ray
    import torch

    cpus = rllib_cpus_per_env_runner(workers)
    config = rllib_config(algorithm, seed, envs, learners, cpus, workers)
    torch.set_num_threads(1)  # as kuberl's driver, for a learner in this process
    algo = None
    try:  # a private instance ended with this process (also when interrupted while starting)
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        algo = config.build_algo()
        steps, last = 0, None
        while steps < MAX_STEPS and (last is None or last < target):
            result = algo.train()["env_runners"]
            steps = int(result.get("num_env_steps_sampled_lifetime", 0))
            last = finite(result.get("episode_return_mean"))
            emit("TICK", {"time": time.time(), "steps": steps, "return": last})
        return {"steps": steps}
    finally:
        if algo is not None:  # else its learner group, collected after shutdown, restarts Ray
            algo.stop()
        ray.shutdown()


def run_kuberl_too_many_cpus() -> dict:
    """`kuberl train` of a job asking for one CPU more than the machine has."""
    manifest = {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "too-many-cpus"},
        "spec": {
            "trainer": {"algorithm": "IMPALA", "env": "CartPole-v1", "stop": {"timesteps": 10**5}},
            "rolloutWorkers": {"replicas": (os.cpu_count() or 1) + 1, "cpusPerWorker": 1},
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_text(json.dumps(manifest))  # JSON is YAML
        cli = [sys.executable, "-m", "kuberl_cli.main", "train", str(path), "--run-dir", tmp]
        done = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT)
    lines = done.stderr.strip().splitlines() or [""]
    failed = [line for line in lines if "training failed" in line]
    return {"exit": done.returncode, "message": (failed or lines)[-1]}


def run_rllib_too_many_cpus() -> dict:
    """This benchmark's RLlib IMPALA (its learner actor, 1 CPU) without the 0.5 CPU per env
    runner, with as many env runners as the machine has CPUs: one CPU more than exists (on 2
    CPUs, exactly the benchmark's layout). Trains until stopped."""
    import ray

    config = rllib_config("IMPALA", 0, ENVS_PER_WORKER, cpus_per_env_runner=1).env_runners(
        num_env_runners=os.cpu_count() or 1
    )
    try:
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        algo = config.build_algo()
        emit("TICK", {"time": time.time(), "steps": 0, "return": None, "what": "built"})
        while True:
            steps = algo.train()["env_runners"].get("num_env_steps_sampled_lifetime", 0)
            emit("TICK", {"time": time.time(), "steps": int(steps), "return": None})
    finally:
        ray.shutdown()


def child_main(args: argparse.Namespace) -> None:
    if args.child == "kuberl":
        result = run_kuberl(args.algorithm, args.seed, args.target, args.envs, args.workers)
    elif args.child == "rllib":
        result = run_rllib(
            args.algorithm, args.seed, args.target, args.envs, args.rllib_learners, args.workers
        )
    elif args.child == "kuberl-too-many-cpus":
        result = run_kuberl_too_many_cpus()
    else:
        result = run_rllib_too_many_cpus()
    emit("RESULT", result | {"child_start": CHILD_START})


# -- parent ----------------------------------------------------------------------------------


def run_child(name: str, extra: list[str], log: Path, wall_cap: float) -> dict:
    """Run one child to its end or the cap; its TICK and RESULT lines, and how it ended."""
    start = time.time()
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", name, *extra],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
            start_new_session=True,  # its own process group: what it starts can be swept after it
        )
        try:
            out, _ = proc.communicate(timeout=wall_cap)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # lets each framework shut down (Ray's processes too)
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            timed_out = True
        with contextlib.suppress(ProcessLookupError):  # e.g. Ray agents orphaned mid-start
            os.killpg(proc.pid, signal.SIGKILL)
        stderr.write(out)
    ticks, result = [], None
    for line in out.splitlines():
        kind, _, record = line.partition(" ")
        if kind == "TICK":
            ticks.append(json.loads(record))
        elif kind == "RESULT":
            result = json.loads(record)
    return {
        "start": start,
        "end": time.time(),
        "exit": proc.returncode,
        "timed_out": timed_out,
        "ticks": ticks,
        "result": result,
    }


def training_run(system: str, algorithm: str, seed: int, args, log_dir: Path) -> dict:
    extra = ["--algorithm", algorithm, "--seed", str(seed), "--target", str(args.target)]
    extra += ["--envs", str(args.envs), "--rllib-learners", str(args.rllib_learners)]
    extra += ["--workers", str(args.workers)]
    log = log_dir / f"{system}-{algorithm}-seed{seed}.log"
    run = run_child(system, extra, log, args.wall_cap)
    ticks = run["ticks"]
    solved = next(
        (t for t in ticks if t["return"] is not None and t["return"] >= args.target), None
    )
    row = {"system": system, "algorithm": algorithm, "seed": seed, "log": log.name}
    row |= {"exit": run["exit"], "timed_out": run["timed_out"], "iterations": len(ticks)}
    row["solved"] = solved is not None
    row["wall_s"] = solved["time"] - run["start"] if solved else None
    row["steps"] = (solved or (ticks[-1] if ticks else {"steps": 0}))["steps"]
    row["last_return"] = ticks[-1]["return"] if ticks else None
    if run["result"]:
        row["startup_s"] = run["result"]["child_start"] - run["start"]
    if ticks:
        row["first_iteration_s"] = ticks[0]["time"] - run["start"]
    # From the end of the first iteration that sampled anything: start-up stays out.
    sampling = [t for t in ticks if t["steps"] > 0]
    if len(sampling) >= 2:
        a, b = sampling[0], sampling[-1]
        row["steps_per_s"] = (b["steps"] - a["steps"]) / (b["time"] - a["time"])
    return row


def resource_check(args, log_dir: Path) -> dict:
    kuberl = run_child("kuberl-too-many-cpus", [], log_dir / "kuberl-too-many-cpus.log", 120)
    rllib = run_child("rllib-too-many-cpus", [], log_dir / "rllib-too-many-cpus.log", args.hang_cap)
    result = kuberl["result"] or {}
    built = [t for t in rllib["ticks"] if t.get("what") == "built"]
    return {
        "kuberl": {
            "seconds": kuberl["end"] - kuberl["start"],
            "exit": result.get("exit"),
            "message": result.get("message"),
        },
        "rllib": {
            "seconds": rllib["end"] - rllib["start"],
            "timed_out": rllib["timed_out"],
            "built_after_s": built[0]["time"] - rllib["start"] if built else None,
            "iterations": len(rllib["ticks"]) - len(built),
            "steps": max((t["steps"] for t in rllib["ticks"]), default=0),
        },
    }


def summarize(rows: list[dict], algorithm: str, system: str) -> dict:
    mine = [r for r in rows if r["algorithm"] == algorithm and r["system"] == system]
    if not mine:
        return {
            "solved": "0/0",
            "median_s": math.inf,
            "per_seed_s": {},
            "per_seed_steps": {},
            "median_steps_per_s": None,
        }
    rates = [r["steps_per_s"] for r in mine if r.get("steps_per_s")]
    return {
        "solved": f"{sum(r['solved'] for r in mine)}/{len(mine)}",
        # an unsolved run counts as infinitely slow, so the median never hides failures
        "median_s": statistics.median(r["wall_s"] if r["solved"] else math.inf for r in mine),
        "per_seed_s": {r["seed"]: r["wall_s"] for r in mine},
        "per_seed_steps": {r["seed"]: r["steps"] for r in mine},
        "median_steps_per_s": statistics.median(rates) if rates else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--target", type=float, default=TARGET, help="mean return to reach")
    parser.add_argument("--envs", type=int, default=ENVS_PER_WORKER, help="envs per worker")
    parser.add_argument("--workers", type=int, default=WORKERS, help="rollout workers")
    parser.add_argument(
        "--rllib-learners", type=int, default=1, choices=[0, 1], help="0: in RLlib's driver"
    )
    parser.add_argument("--wall-cap", type=float, default=WALL_CAP_S, help="seconds per run")
    parser.add_argument("--hang-cap", type=float, default=HANG_CAP_S, help="RLlib's wait")
    parser.add_argument("--no-resources", action="store_true", help="skip the CPU check")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 seed, target 100")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", default="IMPALA", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)
    if args.quick:
        args.seeds, args.target, args.wall_cap, args.hang_cap = 1, 100.0, 180.0, 60.0

    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = RESULTS / f"async-vs-rllib-{stamp}-logs"
    log_dir.mkdir()
    load_before = os.getloadavg()

    resources = None
    if not args.no_resources:
        resources = resource_check(args, log_dir)
        k, r = resources["kuberl"], resources["rllib"]
        print(
            f"kuberl, one CPU too many: exit {k['exit']} after {k['seconds']:.1f} s: {k['message']}"
        )
        built = (
            "never built" if r["built_after_s"] is None else f"built at {r['built_after_s']:.0f} s"
        )
        print(
            f"RLlib, one CPU too many: {built}, {r['iterations']} iterations, {r['steps']:,} env "
            f"steps sampled when stopped at {r['seconds']:.0f} s",
            flush=True,
        )

    rows = []
    runs = [(a, s) for a in args.algorithms for s in args.systems]
    for seed in range(args.seeds):
        k = seed % len(runs)  # rotate who runs first, so drift in load spreads evenly
        for algorithm, system in runs[k:] + runs[:k]:
            row = training_run(system, algorithm, seed, args, log_dir)
            rows.append(row)
            reached = f"{row['wall_s']:.1f} s" if row["solved"] else "not reached"
            rate = row.get("steps_per_s")
            print(
                f"{system} {algorithm} seed {seed}: {args.target:g} {reached}, "
                f"{row['steps']:,} steps, {rate or 0:,.0f} steps/s, last return "
                f"{row['last_return']}, exit {row['exit']}",
                flush=True,
            )

    summary = {
        algorithm: {system: summarize(rows, algorithm, system) for system in args.systems}
        for algorithm in args.algorithms
    }
    print(
        f"\nCartPole-v1 to a mean return (last {RETURN_WINDOW} episodes) of {args.target:g}, "
        f"{args.workers} workers x {args.envs} envs, wall time from Popen; load average "
        f"{load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| algorithm | system | reached | median s | per-seed s | per-seed steps | steps/s |")
    print("|---|---|---|---:|---|---|---:|")
    ratios = {}
    for algorithm, by_system in summary.items():
        for system, s in by_system.items():
            per_seed = ", ".join("—" if t is None else f"{t:.1f}" for t in s["per_seed_s"].values())
            steps = ", ".join(f"{n:,}" for n in s["per_seed_steps"].values())
            rate = s["median_steps_per_s"]
            print(
                f"| {algorithm} | {system} | {s['solved']} | {s['median_s']:.1f} | {per_seed} | "
                f"{steps} | {f'{rate:,.0f}' if rate else '—'} |"
            )
        if set(SYSTEMS) <= set(by_system):
            k, r = by_system["kuberl"], by_system["rllib"]
            ratios[algorithm] = {
                "throughput_kuberl_over_rllib": (
                    k["median_steps_per_s"] / r["median_steps_per_s"]
                    if k["median_steps_per_s"] and r["median_steps_per_s"]
                    else None
                ),
                "time_kuberl_over_rllib": (
                    k["median_s"] / r["median_s"] if math.isfinite(r["median_s"]) else None
                ),
            }
    for algorithm, ratio in ratios.items():
        throughput, seconds = ratio.values()
        print(
            f"\n{algorithm}: kuberl/RLlib throughput "
            f"{'—' if throughput is None else f'{throughput:.2f}x'} (target >= 3x), time to "
            f"{args.target:g} {'—' if seconds is None else f'{seconds:.2f}x'} (target <= 0.5x)"
        )

    path = RESULTS / f"async-vs-rllib-{stamp}.json"
    meta = {
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "target": args.target,
        "workers": args.workers,
        "envs_per_worker": args.envs,
        "return_window": RETURN_WINDOW,
        "wall_cap_s": args.wall_cap,
        "argv": sys.argv[1:],
    }
    record = {"meta": meta, "resources": resources, "summary": summary, "ratios": ratios}
    path.write_text(json.dumps(record | {"runs": rows}, indent=2, default=str))
    print(f"\nwrote {path} (child logs in {log_dir})")


if __name__ == "__main__":
    main()
