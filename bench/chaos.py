"""Chaos benchmark: spot training through repeated faults, against an undisturbed run.

Every run is CartPole-v1 PPO with 2 remote rollout workers pinned to spot nodes, run as the
operator runs it: `kuberl train` joining a multi-node Ray on loopback (tests/multinode.py: a head
and two 1-CPU worker nodes advertising `spot`, one cluster for all runs), and started again after
it exits on a signal, resuming from its checkpoint. After an unmeasured warm-up job (the first job
on fresh nodes also waits for their pools of worker processes), the scenarios, in this order:

- undisturbed: trains for --duration seconds (stop.wallTimeSeconds); the env steps it took are the
  other runs' stop.timesteps, so every run does the same work;
- node-kills: every --kill-every seconds the oldest spot node's raylet is SIGKILLed, and a new spot
  node starts --rejoin-after seconds later (as the spot pool's autoscaler replaces a node);
- sigterms: every --sigterm-every seconds the driver gets SIGTERM; it checkpoints within its grace
  period and exits, and a new driver starts at once;
- mixed (only when named in --scenarios): both at once.

With --rounds N every scenario runs N times, the order rotating from round to round.

The fault clocks start at a run's first progress row. The script reads the rows as the drivers
write them and notes when each appeared (every 0.1 s), which dates what the faults did: per run, the
wall time and its overhead over the undisturbed run, the time the faults cost by their own measure,
the final and best return, and when 475 was first reached; per node kill, when the loss showed in
the rows, when both workers sampled again and the worker downtime the driver reported; per SIGTERM,
the time to checkpoint and exit, completed iterations lost, the share of an iteration dropped
unfinished and when the next driver's first row came (bench/README.md). A fault is survived when
training went on after it and the run ended at its stop condition.

    python bench/chaos.py [--duration 300] [--kill-every 30] [--sigterm-every 60] [--rounds 1]
                          [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
sys.path.insert(0, str(ROOT / "tests"))
from multinode import LoopbackCluster, RayNode, loopback_cluster  # noqa: E402

KUBERL = Path(sys.executable).with_name("kuberl")
TARGET = 475.0
ROLLOUT, ENVS, WORKERS = 32, 8, 2
FULL_BATCH = ROLLOUT * ENVS * WORKERS  # env steps of an iteration with both workers sampling
WORKER_BATCH = ROLLOUT * ENVS  # one worker's at most (less the steps that only reset an env)
GRACE_S = 20  # gracePeriodSeconds: the default
POLL_S = 0.1
NODE_STARTS = threading.Lock()  # one new node at a time: they are numbered in order
SCENARIOS = ("undisturbed", "node-kills", "sigterms", "mixed")


def job_manifest(stop: dict[str, Any], seed: int) -> dict[str, Any]:
    """rl-zoo's CartPole PPO settings (constant rates: an undisturbed run stops by time) with
    two 1-CPU rollout workers of 8 envs on the spot nodes."""
    trainer = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "seed": seed,
        "hyperparameters": {
            "rollout_length": ROLLOUT,
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "num_epochs": 20,
            "minibatch_size": 256,
            "learning_rate": 0.001,
            "clip_range": 0.2,
            "entropy_coeff": 0.0,
        },
        "stop": stop,
        "checkpoint": {"everyIterations": 100, "keep": 2, "gracePeriodSeconds": GRACE_S},
    }
    workers = {
        "replicas": WORKERS,
        "envsPerWorker": ENVS,
        "cpusPerWorker": 1,
        "spot": {"enabled": True, "provider": "gke"},
        "rayResources": {"spot": 1},
    }
    return {
        "apiVersion": "kuberl.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "chaos"},
        "spec": {"trainer": trainer, "rolloutWorkers": workers},
    }


@dataclass
class Arrival:
    """A progress row and when this script first saw it."""

    time: float  # time.monotonic()
    driver: int  # which driver of the run wrote it: 0, 1, ...
    row: dict[str, Any]


@dataclass
class Fault:
    kind: str  # "node-kill" or "sigterm"
    time: float  # time.monotonic() when it was injected
    driver: int  # the driver running then
    exited: float | None = None  # sigterm: when the driver's exit was seen


@dataclass
class Run:
    """One scenario's drivers, rows and faults."""

    scenario: str
    run_dir: Path
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    exit_codes: list[int] = field(default_factory=list)
    arrivals: list[Arrival] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    def poll(self, driver: int) -> None:
        """Note the rows that appeared since the last poll."""
        path = self.run_dir / "progress.jsonl"
        if not path.exists():
            return
        now = time.monotonic()
        for line in path.read_text().splitlines():
            if line.endswith("}") and line not in self._seen:
                self._seen.add(line)
                self.arrivals.append(Arrival(now, driver, json.loads(line)))

    def rows_of(self, driver: int) -> list[Arrival]:
        return [a for a in self.arrivals if a.driver == driver]


class Drivers:
    """`kuberl train` of one job, started again whenever it exits on SIGTERM, as the operator
    restarts a preempted driver."""

    def __init__(self, cluster: LoopbackCluster, job: Path, run: Run, logs: Path):
        self.cluster, self.job, self.run, self.logs = cluster, job, run, logs
        self.process: subprocess.Popen | None = None
        self.count = 0

    def start(self) -> None:
        log = self.logs.with_name(f"{self.logs.name}-driver{self.count}.log")
        command = [str(KUBERL), "train", str(self.job), "--run-dir", str(self.run.run_dir)]
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.cluster.client_env()
            )
        self.count += 1

    @property
    def current(self) -> int:
        return self.count - 1


def run_scenario(
    cluster: LoopbackCluster, scenario: str, stop: dict[str, Any], args: argparse.Namespace
) -> Run:
    work = Path(tempfile.mkdtemp(prefix=f"chaos-{scenario}-"))
    job = work / "job.yaml"
    job.write_text(yaml.safe_dump(job_manifest(stop, args.seed)))
    run = Run(scenario, work / "run")
    drivers = Drivers(cluster, job, run, args.results_dir / f"{args.stamp}-{scenario}")
    last_faults_at = stop.get("timesteps", 0) - 4 * FULL_BATCH
    kills = scenario in ("node-kills", "mixed")
    sigterms = scenario in ("sigterms", "mixed")
    next_kill = next_sigterm = None
    preemptions: list[threading.Thread] = []
    drivers.start()
    while True:
        time.sleep(POLL_S)
        run.poll(drivers.current)
        now = time.monotonic()
        if next_kill is None and run.arrivals:  # the fault clocks start with training
            next_kill, next_sigterm = now + args.kill_every, now + args.sigterm_every
        code = drivers.process.poll()
        if code is not None:
            run.poll(drivers.current)
            run.exit_codes.append(code)
            pending = [f for f in run.faults if f.kind == "sigterm" and f.exited is None]
            if code == 128 + signal.SIGTERM and pending:
                pending[0].exited = now
                drivers.start()  # the operator restarts it; it resumes from its checkpoint
                continue
            break
        if now - run.started > args.wall_cap:
            drivers.process.kill()
            drivers.process.wait()
            run.exit_codes.append(drivers.process.returncode)
            print(f"  {scenario}: stopped at the wall cap of {args.wall_cap:g} s", flush=True)
            break
        # No fault in a run's last iterations: one that landed after the stop was reached would
        # test nothing, and could not be told apart from one that ended training.
        ending = run.arrivals and run.arrivals[-1].row["timesteps_total"] >= last_faults_at
        kills_left = len([f for f in run.faults if f.kind == "node-kill"]) < args.faults
        sigterms_left = len([f for f in run.faults if f.kind == "sigterm"]) < args.faults
        if kills and kills_left and next_kill is not None and now >= next_kill and not ending:
            live = cluster.live_spot_nodes()
            if live:
                run.faults.append(Fault("node-kill", now, drivers.current))
                thread = threading.Thread(target=preempt, args=(cluster, live[0], args))
                thread.start()
                preemptions.append(thread)
            next_kill = now + args.kill_every
        # A driver still starting is not preempted: not before its first row.
        training = bool(run.rows_of(drivers.current))
        if (
            sigterms
            and sigterms_left
            and next_sigterm is not None
            and now >= next_sigterm
            and training
            and not ending
        ):
            run.faults.append(Fault("sigterm", now, drivers.current))
            drivers.process.send_signal(signal.SIGTERM)
            next_sigterm = now + args.sigterm_every
    run.ended = time.monotonic()
    for thread in preemptions:
        thread.join()
    with NODE_STARTS:
        cluster.ensure_spot_nodes(WORKERS)  # the next scenario starts whole
    shutil.rmtree(work, ignore_errors=True)  # its rows are in `run`
    return run


def preempt(cluster: LoopbackCluster, node: RayNode, args: argparse.Namespace) -> None:
    """A spot node preempted, and replaced by the spot pool's autoscaler."""
    node.kill()
    time.sleep(args.rejoin_after)
    with NODE_STARTS:
        cluster.add_spot_node()


# -- what the rows say -----------------------------------------------------------------------


def summarize(run: Run, baseline_wall: float | None) -> dict[str, Any]:
    rows = [a.row for a in run.arrivals]
    last = rows[-1] if rows else {}
    returns = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None]
    solved = next(
        (
            a.time - run.started
            for a in run.arrivals
            if (a.row["episode_return_mean"] or 0) >= TARGET
        ),
        None,
    )
    wall = (run.ended or time.monotonic()) - run.started
    kills = [node_kill(run, fault) for fault in run.faults if fault.kind == "node-kill"]
    sigterms = [sigterm(run, fault) for fault in run.faults if fault.kind == "sigterm"]
    finished = bool(run.exit_codes) and run.exit_codes[-1] == 0
    # What the faults cost by their own measure, whatever else the machine was doing: each
    # SIGTERM's gap until the next driver's first row, and each node kill's worker downtime over
    # the worker count (the run-seconds it costs where the workers bound the rate, as on a
    # cluster; on 2 cores the survivors take over the lost worker's core).
    lost = sum(t["next_driver_first_row_s"] or 0 for t in sigterms)
    lost += sum((k["worker_downtime_s"] or 0) / WORKERS for k in kills)
    return {
        "scenario": run.scenario,
        "finished": finished,
        "exit_codes": run.exit_codes,
        "drivers": len(run.exit_codes),
        "wall_s": wall,
        "overhead": None if not baseline_wall else wall / baseline_wall - 1,
        "time_lost_s": lost,
        "time_lost_share": None if not baseline_wall else lost / baseline_wall,
        "iterations": last.get("iteration"),
        "timesteps": last.get("timesteps_total"),
        "final_return": last.get("episode_return_mean"),
        "best_return": max(returns, default=None),
        "time_to_target_s": solved,
        "faults": len(kills) + len(sigterms),
        "survived": sum(1 for f in [*kills, *sigterms] if f["training_went_on"]) if finished else 0,
        "node_kills": kills,
        "sigterms": sigterms,
    }


def node_kill(run: Run, fault: Fault) -> dict[str, Any]:
    rows = run.rows_of(fault.driver)
    before = [a for a in rows if a.time <= fault.time]
    after = [a for a in rows if a.time > fault.time]
    restarts = before[-1].row["worker_restarts"] if before else 0
    downtime = before[-1].row["worker_downtime_s"] if before else 0.0
    noticed = next((a for a in after if a.row["worker_restarts"] > restarts), None)
    back = None
    if noticed is not None:
        back = next(
            (
                a
                for a in after
                if a.row["iteration"] > noticed.row["iteration"]
                and a.row["timesteps_this_iter"] > WORKER_BATCH  # both workers' batches
            ),
            None,
        )
    return {
        "at_s": fault.time - run.started,
        "noticed_s": None if noticed is None else noticed.time - fault.time,
        "both_workers_back_s": None if back is None else back.time - fault.time,
        "worker_downtime_s": None if back is None else back.row["worker_downtime_s"] - downtime,
        "training_went_on": any(a.time > fault.time for a in run.arrivals),
    }


def sigterm(run: Run, fault: Fault) -> dict[str, Any]:
    stopped = run.rows_of(fault.driver)
    successor = run.rows_of(fault.driver + 1)
    completed = stopped[-1].row["iteration"] if stopped else 0
    resumed_from = successor[0].row["iteration"] - 1 if successor else None
    # How far the iteration in progress had come: the time since the driver's last row before
    # the signal (as this script saw it) over its usual iteration time.
    last_row = max((a.time for a in stopped if a.time <= fault.time), default=None)
    iteration_s = statistics.median(a.row["time_this_iter_s"] for a in stopped) if stopped else 0
    dropped = None
    if any(a.time > fault.time for a in stopped):  # it finished: the signal came while it learned
        dropped = 0.0
    elif last_row is not None and iteration_s > 0:
        dropped = min(1.0, (fault.time - last_row) / iteration_s)
    return {
        "at_s": fault.time - run.started,
        "exit_s": None if fault.exited is None else fault.exited - fault.time,
        "completed_iterations_lost": None if resumed_from is None else completed - resumed_from,
        "unfinished_iteration_dropped": dropped,
        "next_driver_first_row_s": None if not successor else successor[0].time - fault.time,
        "training_went_on": bool(successor),
    }


# -- the report ------------------------------------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _max(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _min(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def print_report(
    summaries: list[dict[str, Any]], budget: int, args: argparse.Namespace, load: tuple
) -> None:
    print(
        f"\nCartPole-v1 PPO, {WORKERS} remote workers of {ENVS} envs on 1-CPU spot nodes of a "
        f"loopback Ray; node kill every {args.kill_every:g} s, SIGTERM every "
        f"{args.sigterm_every:g} s; every run {budget:,} env steps; "
        f"{args.rounds} round(s), medians; load average {load[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        "| scenario | finished | wall s | overhead | time lost s | timesteps | final return | "
        "best | s to 475 | faults survived |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in dict.fromkeys(s["scenario"] for s in summaries):
        runs = [s for s in summaries if s["scenario"] == name]
        overhead = _median([s["overhead"] for s in runs])
        lost, share = (_median([s[k] for s in runs]) for k in ("time_lost_s", "time_lost_share"))
        print(
            f"| {name} | {sum(s['finished'] for s in runs)}/{len(runs)} | "
            f"{_median([s['wall_s'] for s in runs]):.0f} | "
            f"{'-' if overhead is None else format(overhead, '+.0%')} | "
            f"{'-' if share is None else f'{lost:.0f} ({share:.0%})'} | "
            f"{runs[0]['timesteps'] or 0:,} | {_fmt(_min([s['final_return'] for s in runs]))} | "
            f"{_fmt(_min([s['best_return'] for s in runs]))} | "
            f"{_fmt(_median([s['time_to_target_s'] for s in runs]), '.0f')} | "
            f"{sum(s['survived'] for s in runs)}/{sum(s['faults'] for s in runs)} |"
        )
    print("(final and best return: the lowest over rounds)")
    kills = [k for s in summaries for k in s["node_kills"]]
    if kills:
        print("\n| node kills | median | max |\n| --- | --- | --- |")
        for key, name in (
            ("noticed_s", "s until the loss shows in the rows"),
            ("both_workers_back_s", "s until both workers sample again"),
            ("worker_downtime_s", "worker downtime the driver reports, s"),
        ):
            values = [k[key] for k in kills]
            print(f"| {name} | {_fmt(_median(values))} | {_fmt(_max(values))} |")
    stops = [t for s in summaries for t in s["sigterms"]]
    if stops:
        print("\n| SIGTERMs | median | max |\n| --- | --- | --- |")
        for key, name in (
            ("exit_s", f"s to checkpoint and exit (grace {GRACE_S} s)"),
            ("completed_iterations_lost", "completed iterations lost"),
            ("unfinished_iteration_dropped", "share of an iteration dropped unfinished"),
            ("next_driver_first_row_s", "s until the next driver's first row"),
        ):
            values = [t[key] for t in stops]
            print(f"| {name} | {_fmt(_median(values), '.2f')} | {_fmt(_max(values), '.2f')} |")


def run_rounds(cluster: LoopbackCluster, args: argparse.Namespace) -> tuple[list[dict], int]:
    """Every scenario `--rounds` times, the order rotating from round to round, so that a machine
    growing busier or quieter spreads over all of them; each run's overhead is against the
    undisturbed run of its round. Unless --timesteps gives the budget, the first run is the first
    round's undisturbed one, which trains for --duration: its env steps are every run's budget,
    also of the later undisturbed runs."""
    names = [s for s in SCENARIOS if s in args.scenarios]
    summaries: list[dict[str, Any]] = []
    budget = args.timesteps or 0
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        runs: dict[str, Run] = {}
        for scenario in names[shift:] + names[:shift]:
            stop = {"timesteps": budget} if budget else {"wallTimeSeconds": args.duration}
            runs[scenario] = run = run_scenario(cluster, scenario, stop, args)
            if not budget:
                first = summarize(run, None)
                if not first["finished"] or not first["timesteps"]:
                    raise SystemExit(f"the undisturbed run failed: exit codes {run.exit_codes}")
                budget = first["timesteps"]
            print(f"  round {round_ + 1}, {scenario}: {run.ended - run.started:.0f} s", flush=True)
        baseline = runs["undisturbed"]
        for scenario in names:
            base = None if scenario == "undisturbed" else baseline.ended - baseline.started
            summaries.append({"round": round_ + 1, **summarize(runs[scenario], base)})
    return summaries, budget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=300, help="undisturbed training, s")
    parser.add_argument("--kill-every", type=float, default=30, help="s between node kills")
    parser.add_argument("--rejoin-after", type=float, default=0, help="s before a new node")
    parser.add_argument("--sigterm-every", type=float, default=60, help="s between SIGTERMs")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS[:3]), choices=SCENARIOS)
    parser.add_argument("--rounds", type=int, default=1, help="every scenario this many times")
    parser.add_argument(
        "--timesteps", type=int, default=None, help="every run's env steps [those of --duration]"
    )
    parser.add_argument(
        "--faults", type=int, default=10**6, help="at most this many of each kind per run"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wall-cap", type=float, default=None, help="s per run [4 x duration]")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    args = parser.parse_args()
    if args.quick:
        # A fixed budget: on a busy machine the actors' start could eat a short --duration. One
        # fault of each kind, at the first progress row: on a quiet machine the whole budget
        # can take less than any fixed delay, so a clock could let the run end unfaulted.
        args.timesteps, args.kill_every, args.sigterm_every, args.faults = 40_960, 0, 0, 1
    args.wall_cap = args.wall_cap or 4 * args.duration + 120
    args.results_dir.mkdir(parents=True, exist_ok=True)
    args.stamp = f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    if "undisturbed" not in args.scenarios:
        parser.error("--scenarios: undisturbed is the baseline every other run is measured by")

    load = os.getloadavg()
    with loopback_cluster() as cluster:
        if not args.quick:  # unmeasured: a first job also waits for the nodes' worker pools
            run_scenario(cluster, "warm-up", {"iterations": 3}, args)
        summaries, budget = run_rounds(cluster, args)

    print_report(summaries, budget, args, load)
    path = args.results_dir / f"{args.stamp}.json"
    meta = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "job": job_manifest({"timesteps": budget}, args.seed),
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions(),
    }
    path.write_text(json.dumps({"meta": meta, "scenarios": summaries}, indent=2))
    print(f"\nResults: {path}")


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("ray", "torch", "gymnasium")}


if __name__ == "__main__":
    main()
