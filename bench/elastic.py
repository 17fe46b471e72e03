"""An elastic rollout fleet following spot nodes that come and go, on a loopback multi-node Ray.

One RLJob: `kuberl train` attached through RAY_ADDRESS to tests/multinode.py's cluster, as the
operator runs the driver; rolloutWorkers minReplicas 1, replicas = maxReplicas = --nodes N, one
worker per spot node (rayResources spot: 1; each node advertises 1 CPU, a worker reserves
CPUS_PER_WORKER of it), on SlowCartPole (bench/trivial_env.py), whose every step waits --step-ms
off the CPU: the workers' rate is bound by the env's latency, not the machine's cores, as where
each spot node brings CPUs of its own.

Elastic run, with no stop it reaches (the bench ends it with SIGTERM): one spot node, then nodes
join one by one up to N, each size held --plateau-s seconds, then the newest is preempted (its
raylet SIGKILLed) one by one down to 1. A thread reads the progress rows every POLL_S and dates
each by when it appeared. Per plateau: env steps/s between consecutive rows that both count its
size in workers_ready (timesteps_total over time_total_s), and its ratio to size x the first
plateau's rate (one worker's), target SCALING_TARGET; for a node joining, the seconds from
add_spot_node returning (Ray lists the node alive; it polls every 0.5 s) to the first row whose
workers_ready counts the new worker, target JOIN_TARGET_S. A row is written at the end of an
iteration, so this is an upper bound, late by at most that row's iteration time (printed beside
it) and POLL_S. Then: iterations 1..K without a gap (0 lost), one driver throughout (running when
the bench stopped it, no "Resuming from").

Time to target: the same job stopping at a mean return of --target (or --wall-cap s of training),
from the driver's start, on 1 node throughout, on N nodes from the start, and elastic (1 node,
another added every --join-every-s s up to N, each node's start counting), one after another on
the same cluster; the elastic fleet's time over the fixed ones'.

    python bench/elastic.py [--nodes 8] [--plateau-s 30] [--step-ms 2] [--algorithm IMPALA]
        [--target 150] [--join-every-s 5] [--wall-cap 600] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))
from driver_clock import save_results  # noqa: E402
from multinode import SPOT, LoopbackCluster, loopback_cluster  # noqa: E402

from kuberl_contract.progress_row import (  # noqa: E402
    EPISODE_RETURN_MEAN,
    ITERATION,
    PROGRESS_FILE,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    WORKER_RESTARTS,
    WORKERS_READY,
    read_rows,
)
from testkit import rljob  # noqa: E402

KUBERL = Path(sys.executable).with_name("kuberl")
ENVS = 8
# Of each spot node's 1 CPU: the env waits off the CPU, and the nodes share the machine's cores.
CPUS_PER_WORKER = 0.1
POLL_S = 0.05
SCALING_TARGET = 0.8
JOIN_TARGET_S = 5.0
# The settings a run leaves out: (a measurement's, a smoke run's).
DEFAULTS = {
    "nodes": (8, 2),
    "plateau_s": (30.0, 8.0),
    "target": (150.0, 40.0),
    "wall_cap": (600.0, 90.0),
}
NEVER = 10**12  # a timesteps stop no run reaches
PPO_HYPERPARAMETERS = {  # tests/trainer/test_multinode.py's: CartPole within tens of thousands
    "rollout_length": 32,
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "num_epochs": 10,
    "minibatch_size": 256,
    "learning_rate": 0.001,
}


def job_manifest(args: argparse.Namespace, stop: dict[str, Any]) -> dict[str, Any]:
    """The RLJob: an elastic fleet of 1 to args.nodes workers, one per spot node."""
    trainer = {
        "algorithm": args.algorithm,
        "env": "trivial_env:SlowCartPole" if args.step_ms else "CartPole-v1",
        "envConfig": {"step_ms": args.step_ms} if args.step_ms else {},
        "seed": 0,
        "hyperparameters": PPO_HYPERPARAMETERS if args.algorithm == "PPO" else {},
        "stop": stop,
        "checkpoint": {"everyIterations": 100_000},
    }
    workers = {
        "replicas": args.nodes,
        "minReplicas": 1,
        "maxReplicas": args.nodes,
        "envsPerWorker": ENVS,
        "cpusPerWorker": CPUS_PER_WORKER,
        "spot": {"enabled": True, "provider": "gke"},
        "rayResources": {SPOT: 1},
    }
    return rljob("elastic", trainer=trainer, rolloutWorkers=workers)


@dataclass(frozen=True)
class Arrival:
    """A progress row and when this script first saw it (time.monotonic())."""

    time: float
    row: dict[str, Any]


class Driver:
    """`kuberl train` of one job on the cluster, its output in a file, and its progress rows read
    every POLL_S by a thread of its own, so that a node starting (which holds the main thread for
    seconds) does not delay their dates."""

    def __init__(self, cluster: LoopbackCluster, manifest: dict[str, Any], work: Path, name: str):
        job, run_dir, self.log = work / f"{name}.yaml", work / name, work / f"{name}.log"
        job.write_text(yaml.safe_dump(manifest))
        self.progress = run_dir / PROGRESS_FILE
        self.arrivals: list[Arrival] = []
        self.started = time.monotonic()
        command = [str(KUBERL), "train", str(job), "--run-dir", str(run_dir)]
        env = cluster.client_env(spot_nodes_at_most=manifest["spec"]["rolloutWorkers"]["replicas"])
        with open(self.log, "w") as out:  # a pipe nobody reads would fill up and block it
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._done.wait(POLL_S):
            self._poll()

    def _poll(self) -> None:
        rows = read_rows(self.progress)
        now = time.monotonic()
        self.arrivals.extend(Arrival(now, row) for row in rows[len(self.arrivals) :])

    def hold(self, seconds: float, what: str, until: Callable[[], bool] = lambda: False) -> None:
        """Let it train `seconds`, or until `until()`; raise, with its output, if it ends."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            if self.process.poll() is not None:
                code, output = self.process.returncode, self.log.read_text(errors="replace")
                raise RuntimeError(f"kuberl train exited {code} {what}:\n{output[-3000:]}")
            time.sleep(POLL_S)

    def stop(self) -> int:
        """SIGTERM it (unless it has ended), wait for it, read its last rows; its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout=300)
        self._done.set()
        self._reader.join()
        self._poll()
        return code


@dataclass(frozen=True)
class Plateau:
    """A fleet size held: `nodes` live spot nodes from `changed` to `ended` (monotonic times);
    the change began at `began` (a node starting, or being preempted)."""

    nodes: int
    began: float
    changed: float
    ended: float
    joined: bool  # reached by a node joining

    def rows(self, arrivals: list[Arrival]) -> list[dict[str, Any]]:
        """The rows that appeared while it was held."""
        return [a.row for a in arrivals if self.changed <= a.time <= self.ended]


def elastic_run(cluster: LoopbackCluster, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Nodes join one by one up to args.nodes, then the newest leave one by one down to 1; the
    plateaus, the rows and how the driver ended."""
    cluster.keep_spot_nodes(1)
    driver = Driver(cluster, job_manifest(args, {"timesteps": NEVER}), work, "elastic")
    try:
        driver.hold(args.wall_cap, "before its first row", until=lambda: bool(driver.arrivals))
        if not driver.arrivals:
            raise RuntimeError(f"no iteration within {args.wall_cap:g} s")
        first = driver.arrivals[0]
        driver.hold(args.plateau_s, "on 1 node")
        plateaus = [Plateau(1, first.time, first.time, time.monotonic(), joined=False)]
        for nodes in [*range(2, args.nodes + 1), *range(args.nodes - 1, 0, -1)]:
            began = time.monotonic()
            joining = nodes > len(cluster.live_spot_nodes())
            if joining:
                cluster.add_spot_node()  # the spot pool scaled up
            else:
                cluster.live_spot_nodes()[-1].kill()  # the newest preempted
            changed = time.monotonic()
            print(f"  {nodes} node(s) after {changed - began:.1f} s", flush=True)
            driver.hold(args.plateau_s, f"on {nodes} nodes")
            plateaus.append(Plateau(nodes, began, changed, time.monotonic(), joining))
        ran_throughout = driver.process.poll() is None
    finally:
        code = driver.stop()
    # One driver: it ran until the bench's SIGTERM ended it (128 + 15), and never resumed.
    output = driver.log.read_text(errors="replace")
    one_driver = ran_throughout and code == 143 and "Resuming from" not in output
    return {"plateaus": plateaus, "arrivals": driver.arrivals, "one_driver": one_driver}


def steady_rate(plateau: Plateau, arrivals: list[Arrival]) -> float | None:
    """Env steps/s between consecutive rows of the plateau that both count its size in workers;
    None without two such rows."""
    rows = plateau.rows(arrivals)
    pairs = [
        (before, after)
        for before, after in itertools.pairwise(rows)
        if before[WORKERS_READY] == after[WORKERS_READY] == plateau.nodes
    ]
    steps = sum(after[TIMESTEPS_TOTAL] - before[TIMESTEPS_TOTAL] for before, after in pairs)
    seconds = sum(after[TIME_TOTAL_S] - before[TIME_TOTAL_S] for before, after in pairs)
    return steps / seconds if pairs and seconds > 0 else None


def summarize_plateaus(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per plateau: its size, workers ready, env steps/s, its ratio, and for a node joining the
    seconds to the first row counting its worker, with that row's iteration time (how late the
    row may be)."""
    arrivals = run["arrivals"]
    one_worker = steady_rate(run["plateaus"][0], arrivals)
    summaries = []
    for plateau in run["plateaus"]:
        rate = steady_rate(plateau, arrivals)
        ready = [row[WORKERS_READY] for row in plateau.rows(arrivals)]
        since = [a for a in arrivals if plateau.began <= a.time <= plateau.ended]
        counted = [a for a in since if plateau.joined and a.row[WORKERS_READY] >= plateau.nodes]
        join = counted[0] if counted else None
        summaries.append(
            {
                "nodes": plateau.nodes,
                "joined": plateau.joined,
                "workers_ready": sorted(set(ready)),
                "steps_per_s": rate,
                "ratio": rate / (plateau.nodes * one_worker) if rate and one_worker else None,
                # A row may come before add_spot_node returns: Ray lists the node before it polls.
                "join_s": max(0.0, join.time - plateau.changed) if join else None,
                "join_row_iteration_s": join.row[TIME_THIS_ITER_S] if join else None,
            }
        )
    return summaries


def time_to_target(
    cluster: LoopbackCluster, fleet: str, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Seconds from the driver's start to the first row at args.target, for `fleet`."""
    if fleet == "N nodes":
        cluster.ensure_spot_nodes(args.nodes)  # before the driver: their start does not count
    else:
        cluster.keep_spot_nodes(1)
    stop = {"episodeReturnMean": args.target, "wallTimeSeconds": args.wall_cap}
    driver = Driver(cluster, job_manifest(args, stop), work, f"to-{fleet.replace(' ', '-')}")
    next_join = driver.started + args.join_every_s
    deadline = driver.started + 2 * args.wall_cap  # the stop's clock counts training time only
    try:
        while driver.process.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            growing = fleet == "elastic" and len(cluster.live_spot_nodes()) < args.nodes
            if growing and time.monotonic() >= next_join:
                cluster.add_spot_node()  # the spot pool scaled up
                next_join = time.monotonic() + args.join_every_s
    finally:
        driver.stop()
    arrivals = driver.arrivals
    reached = [a for a in arrivals if (a.row.get(EPISODE_RETURN_MEAN) or 0) >= args.target]
    last = arrivals[-1].row if arrivals else {}
    return {
        "fleet": fleet,
        "seconds": reached[0].time - driver.started if reached else None,
        "steps": (reached[0].row if reached else last).get(TIMESTEPS_TOTAL),
        "last_return": last.get(EPISODE_RETURN_MEAN),
        "most_workers": max((a.row[WORKERS_READY] for a in arrivals), default=0),
    }


PASS = {True: "PASS", False: "FAIL"}


def fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def verdicts(run: dict, plateaus: list[dict], seconds: dict[str, float | None]) -> list[str]:
    """One line per criterion of the issue, PASS or FAIL first."""
    iterations = [a.row[ITERATION] for a in run["arrivals"]]
    ratios = [p["ratio"] for p in plateaus]
    joins = [p["join_s"] for p in plateaus if p["joined"]]
    lowest = min((r for r in ratios if r is not None), default=None)
    slowest = max((j for j in joins if j is not None), default=None)
    scaled = all(r is not None and r >= SCALING_TARGET for r in ratios)
    joined = all(j is not None and j <= JOIN_TARGET_S for j in joins)
    gapless = iterations == list(range(1, len(iterations) + 1))
    one_driver = gapless and run["one_driver"]
    times = ", ".join(f"{fleet} {fmt(s, '.1f')} s" for fleet, s in seconds.items())
    return [
        f"{PASS[scaled]}  env steps/s >= {SCALING_TARGET} x N x one worker's at every plateau "
        f"(lowest {fmt(lowest, '.2f')})",
        f"{PASS[joined]}  a joining worker ready within {JOIN_TARGET_S:g} s of its node joining "
        f"(slowest {fmt(slowest, '.1f')} s, an upper bound)",
        f"{PASS[one_driver]}  0 iterations lost, no driver restart (iterations "
        f"1..{len(iterations)} without a gap, one driver until SIGTERM, no resume)",
        f"{PASS[None not in seconds.values()]}  time to target reached by every fleet ({times}; "
        "the issue sets no threshold: read the ratios)",
    ]


def report(args: argparse.Namespace, run: dict, plateaus: list[dict], targets: list[dict]) -> None:
    """The plateaus' and the time-to-target tables, then the verdicts."""
    print(
        f"\n{args.algorithm}, env steps waiting {args.step_ms:g} ms, {ENVS} envs per worker, one "
        f"worker per spot node, {args.plateau_s:g} s per plateau; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| nodes | change | workers ready | env steps/s | / N x 1 worker's | join s (row's) |")
    print("|---:|---|---|---:|---:|---:|")
    for p in plateaus:
        change = "start" if p is plateaus[0] else "joined" if p["joined"] else "preempted"
        join = f"{fmt(p['join_s'], '.1f')} ({fmt(p['join_row_iteration_s'], '.1f')})"
        print(
            f"| {p['nodes']} | {change} | {', '.join(map(str, p['workers_ready']))} | "
            f"{fmt(p['steps_per_s'])} | {fmt(p['ratio'], '.2f')} | {join if p['joined'] else '-'} |"
        )
    restarts = run["arrivals"][-1].row[WORKER_RESTARTS] if run["arrivals"] else 0
    print(f"\nworker restarts {restarts} ({len(plateaus) // 2} node(s) preempted)")

    seconds = {t["fleet"]: t["seconds"] for t in targets}
    print(f"\n| fleet | s to {args.target:g} | env steps | most workers | / 1 node | / N nodes |")
    print("|---|---:|---:|---:|---:|---:|")
    for t in targets:
        mine = t["seconds"]
        ratios = [mine / seconds[f] if mine and seconds[f] else None for f in ("1 node", "N nodes")]
        took = fmt(mine, ".1f") if mine else f"not reached ({fmt(t['last_return'], '.1f')})"
        print(
            f"| {t['fleet']} | {took} | {fmt(t['steps'])} | {t['most_workers']} | "
            f"{fmt(ratios[0], '.2f')} | {fmt(ratios[1], '.2f')} |"
        )
    print("\n" + "\n".join(verdicts(run, plateaus, seconds)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, help="spot nodes at most [8; --quick: 2]")
    parser.add_argument("--plateau-s", type=float, help="seconds at each size [30; --quick: 8]")
    parser.add_argument("--step-ms", type=float, default=2.0, help="env step wait off the CPU")
    parser.add_argument("--algorithm", default="IMPALA", choices=["IMPALA", "PPO"])
    parser.add_argument("--target", type=float, help="a mean return [150; --quick: 40]")
    parser.add_argument("--join-every-s", type=float, default=5.0, help="elastic: node every s")
    parser.add_argument("--wall-cap", type=float, help="training s per run [600; --quick: 90]")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 nodes, short plateaus")
    args = parser.parse_args()
    for name, (full, quick) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.nodes < 2:
        parser.error("--nodes: at least 2 (a fleet that grows and shrinks)")
    for name in ("plateau_s", "join_every_s", "wall_cap"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be more than 0 seconds")
    if args.step_ms < 0:
        parser.error("--step-ms: a wait cannot be negative")

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kuberl-elastic-") as scratch:
        work, targets = Path(scratch), []
        # The workers import trivial_env from this directory.
        with loopback_cluster(spot_nodes=1, pythonpath=[BENCH]) as cluster:
            run = elastic_run(cluster, args, work)
            for fleet in ("1 node", "elastic", "N nodes"):  # the fewest node starts and stops
                targets.append(time_to_target(cluster, fleet, args, work))
                print(f"  {fleet} to {args.target:g}: {fmt(targets[-1]['seconds'], '.1f')} s")
    plateaus = summarize_plateaus(run)
    report(args, run, plateaus, targets)
    rows = [a.row | {"seen_s": a.time - run["plateaus"][0].began} for a in run["arrivals"]]
    result = {"plateaus": plateaus, "rows": rows, "time_to_target": targets}
    path = save_results("elastic", vars(args) | {"loadavg_before": load_before}, result)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
