"""Operator scale: how fast `kuberl-operator` turns a burst of RLJobs into RayClusters, and what
memory it holds for them.

Three processes, so that none of them measures itself: the emulated Kubernetes API
(tests/kubeapi.py, this script re-run with `--serve-api`), the operator (`kuberl-operator -n
default`, as deployed, with KUBECONFIG pointing at the emulation), and this script, which creates
the RLJobs and watches RayClusters appear. No KubeRay plays along, so every job stays Provisioning
and the operator polls it every KUBERL_POLL_SECONDS, as it would while a real cluster schedules.

Each run starts both servers afresh, warms the operator up with one job, then:

1. burst: `--jobs` RLJobs created back to back; the time until every one has its RayCluster,
   and each job's latency from its create returning to the RayCluster's ADDED event on a watch
   (both on this process's monotonic clock: creationTimestamp has 1-second resolution);
2. settle: `--settle` seconds of nothing but the operator's polling (RSS and CPU measured);
3. steady: `--steady` more RLJobs at `--rate` per second, their latencies reported apart.

The operator's RSS is read from /proc/<pid>/status (VmRSS sampled, VmHWM the kernel's peak).
The machine is shared, so `--runs` runs are made and the table shows medians and ranges.

    python bench/operator_scale.py [--jobs 1000] [--steady 100] [--rate 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
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
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
# The emulated API and the small RLJob the operator's tests use.
sys.path.insert(0, str(ROOT / "tests"))
from kubeapi import RAYCLUSTER_CRD, running_kube_api, write_kubeconfig  # noqa: E402

from testkit import free_port, rljob  # noqa: E402

RESULTS = Path(__file__).parent / "results"
# The console script where the venv has it, else the same entry point through the module.
_SCRIPT = Path(sys.executable).parent / "kuberl-operator"
OPERATOR = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kuberl_operator.main"]
RLJOBS = "/apis/kuberl.io/v1alpha1/namespaces/default/rljobs"
RAYCLUSTERS = "/apis/ray.io/v1/namespaces/default/rayclusters"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MIB = 1024 * 1024


def serve_api() -> None:
    """The `--serve-api` child: the emulated API with both CRDs, its URL on stdout, until stdin
    closes (the parent exits) or it is terminated."""
    with running_kube_api() as api:
        api.register_crd()
        api.create(CRDS, RAYCLUSTER_CRD)
        print(api.url, flush=True)
        sys.stdin.read()


def proc_status(pid: int) -> dict[str, float]:
    """RSS, peak RSS (MiB) and CPU seconds (user + system) of a live process."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024 / MIB
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    fields["cpu"] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return fields


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: p99 of 100 values is the 99th smallest, not an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


class Watcher:
    """Records when each object of a kind first shows on a watch (with `status`: first shows a
    status, i.e. when the operator's first reconcile wrote it), on the monotonic clock. A watch
    that ends (the server closed it) is resumed from the last event seen."""

    def __init__(self, url: str, kind_path: str, status: bool = False) -> None:
        self.url, self.kind_path, self.status = url, kind_path, status
        self.seen: dict[str, float] = {}
        self._changed = threading.Condition()
        self._http = requests.Session()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        revision = "0"  # 0: every existing object as ADDED, then live events
        while not self._closed:
            with contextlib.suppress(requests.RequestException, AttributeError):
                revision = self._follow(revision)
            time.sleep(0.1)

    def _follow(self, revision: str) -> str:
        """Follows one watch from `revision` until it ends; the last revision seen."""
        params = {"watch": "true", "resourceVersion": revision}
        # No read timeout: nothing may happen for as long as the settle phase lasts.
        with self._http.get(
            self.url + self.kind_path, params=params, stream=True, timeout=(10, None)
        ) as response:
            for line in response.iter_lines(chunk_size=64 * 1024):
                if not line:
                    continue
                now = time.monotonic()
                event = json.loads(line)
                meta = event["object"]["metadata"]
                revision = meta["resourceVersion"]
                if event["type"] != "DELETED" and (
                    event["object"].get("status") or not self.status
                ):
                    with self._changed:
                        self.seen.setdefault(meta["name"], now)
                        self._changed.notify_all()
        return revision

    def wait_for(self, names: list[str], timeout: float) -> bool:
        """Whether every name was seen within `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: all(n in self.seen for n in names), timeout)

    def close(self) -> None:
        self._closed = True
        self._http.close()


class Sampler:
    """Samples the RSS of the operator and the API every `interval` seconds, in a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 0.25) -> None:
        self.pids, self.interval = pids, interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError):
                row = {"t": time.monotonic()}
                row |= {name: proc_status(pid)["VmRSS"] for name, pid in self.pids.items()}
                self.samples.append(row)

    def peak(self, name: str) -> float:
        return max((s[name] for s in self.samples), default=0.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@contextlib.contextmanager
def child(args: list[str], log: Path, **kwargs: Any) -> Iterator[subprocess.Popen]:
    """A child process in a process group of its own, logging to `log`; terminated (then
    killed) on exit, whatever happened."""
    with log.open("w") as out:
        process = subprocess.Popen(
            args, stderr=out, start_new_session=True, cwd=ROOT, text=True, **kwargs
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def create_jobs(
    http: requests.Session, url: str, names: list[str], rate: float | None
) -> dict[str, float]:
    """Creates RLJobs, back to back or at `rate` per second (on a fixed schedule, so a slow
    create does not push the later ones back); when each create returned."""
    created = {}
    start = time.monotonic()
    for i, name in enumerate(names):
        if rate:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        http.post(url + RLJOBS, json=rljob(name), timeout=30).raise_for_status()
        created[name] = time.monotonic()
    return created


def latencies(
    created: dict[str, float], seen: dict[str, float], status: dict[str, float]
) -> dict[str, Any]:
    """Create-to-RayCluster latency, and its first part: create to the first status write (kopf
    delivering the event and starting the daemon; the rest is the reconcile's own requests)."""
    values = [seen[name] - t for name, t in created.items() if name in seen]
    summary: dict[str, Any] = {"jobs": len(created), "handled": len(values)}
    if values:
        to_status = [status[name] - t for name, t in created.items() if name in status]
        summary |= {
            "p50_s": percentile(values, 50),
            "p99_s": percentile(values, 99),
            "max_s": max(values),
            "mean_s": statistics.fmean(values),
            "status_p50_s": percentile(to_status, 50),
            "status_p99_s": percentile(to_status, 99),
            "latencies_s": [round(v, 4) for v in values],  # in creation order
        }
    return summary


def run_once(args: argparse.Namespace, index: int, logs: Path) -> dict[str, Any]:
    """One run: fresh API and operator, warm-up, burst, settle, steady."""
    tag = f"run{index}"
    with child(
        [sys.executable, __file__, "--serve-api"],
        logs / f"{tag}-api.log",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as api:
        assert api.stdout is not None
        url = api.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"the emulated API did not start (see {logs}/{tag}-api.log)")
        workdir = Path(tempfile.mkdtemp(prefix="operator-scale-"))
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        env = {
            **os.environ,
            "KUBECONFIG": str(write_kubeconfig(url, workdir / "kubeconfig")),
            "KUBERL_METRICS_PORT": str(free_port()),
            "KUBERL_POLL_SECONDS": str(args.poll_seconds),
        }
        watcher = Watcher(url, RAYCLUSTERS)
        reconciled = Watcher(url, RLJOBS, status=True)
        http = requests.Session()
        command = [*OPERATOR, "-n", "default", "--liveness", liveness]
        try:
            with child(command, logs / f"{tag}-operator.log", env=env) as operator:
                wait_http(liveness, 60)
                sampler = Sampler({"operator": operator.pid, "api": api.pid})
                try:
                    return measure(
                        args, url, http, watcher, reconciled, sampler, operator.pid, api.pid
                    )
                finally:
                    sampler.close()
        finally:
            watcher.close()
            reconciled.close()
            http.close()
            shutil.rmtree(workdir, ignore_errors=True)


def measure(
    args: argparse.Namespace,
    url: str,
    http: requests.Session,
    watcher: Watcher,
    reconciled: Watcher,
    sampler: Sampler,
    operator: int,
    api: int,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    warm = create_jobs(http, url, ["warmup"], None)
    if not watcher.wait_for(list(warm), 60):
        raise RuntimeError("the operator did not create the warm-up job's RayCluster in 60 s")
    result["rss_idle_mib"] = proc_status(operator)["VmRSS"]

    def cpu() -> tuple[float, float]:
        return proc_status(operator)["cpu"], proc_status(api)["cpu"]

    names = [f"burst-{i:04d}" for i in range(args.jobs)]
    cpu0, started = cpu(), time.monotonic()
    created = create_jobs(http, url, names, None)
    created_by = time.monotonic()
    done = watcher.wait_for(names, args.timeout)
    last = max((watcher.seen[n] for n in names if n in watcher.seen), default=time.monotonic())
    cpu1 = cpu()
    result["burst"] = latencies(created, watcher.seen, reconciled.seen) | {
        "complete": done,
        "create_s": created_by - started,
        "all_clusters_s": last - started,
        "operator_cpu_s": cpu1[0] - cpu0[0],
        "api_cpu_s": cpu1[1] - cpu0[1],
    }
    result["rss_peak_burst_mib"] = proc_status(operator)["VmHWM"]

    time.sleep(args.settle)
    cpu2 = cpu()
    result["rss_settled_mib"] = proc_status(operator)["VmRSS"]
    result["settle"] = {
        "seconds": args.settle,
        "operator_cpu_pct": 100 * (cpu2[0] - cpu1[0]) / (time.monotonic() - last),
        "api_cpu_pct": 100 * (cpu2[1] - cpu1[1]) / (time.monotonic() - last),
    }

    names = [f"steady-{i:04d}" for i in range(args.steady)]
    started = time.monotonic()
    created = create_jobs(http, url, names, args.rate)
    done = watcher.wait_for(names, args.timeout)
    cpu3 = cpu()
    result["steady"] = latencies(created, watcher.seen, reconciled.seen) | {
        "complete": done,
        "rate": args.rate,
        "operator_cpu_pct": 100 * (cpu3[0] - cpu2[0]) / (time.monotonic() - started),
        "api_cpu_pct": 100 * (cpu3[1] - cpu2[1]) / (time.monotonic() - started),
    }
    status = proc_status(operator)
    result |= {"rss_end_mib": status["VmRSS"], "rss_peak_mib": status["VmHWM"]}
    result["api_rss_end_mib"] = proc_status(api)["VmRSS"]
    result["rss_samples"] = sampler.samples
    return result


# (label, path into a run's result, format, target)
ROWS = [
    ("burst: create all (s)", ("burst", "create_s"), "{:.1f}", ""),
    ("burst: all RayClusters (s)", ("burst", "all_clusters_s"), "{:.1f}", ""),
    ("burst: p50 latency (s)", ("burst", "p50_s"), "{:.2f}", ""),
    ("burst: p99 latency (s)", ("burst", "p99_s"), "{:.2f}", ""),
    ("burst: p50 create to 1st status (s)", ("burst", "status_p50_s"), "{:.2f}", ""),
    ("burst: operator CPU (s)", ("burst", "operator_cpu_s"), "{:.1f}", ""),
    ("burst: API CPU (s)", ("burst", "api_cpu_s"), "{:.1f}", ""),
    ("settled: operator CPU (%)", ("settle", "operator_cpu_pct"), "{:.0f}", ""),
    ("settled: API CPU (%)", ("settle", "api_cpu_pct"), "{:.0f}", ""),
    ("steady: p50 latency (s)", ("steady", "p50_s"), "{:.2f}", ""),
    ("steady: p99 latency (s)", ("steady", "p99_s"), "{:.2f}", "< 1"),
    ("steady: p50 create to 1st status (s)", ("steady", "status_p50_s"), "{:.2f}", ""),
    ("steady: max latency (s)", ("steady", "max_s"), "{:.2f}", ""),
    ("steady: operator CPU (%)", ("steady", "operator_cpu_pct"), "{:.0f}", ""),
    ("steady: API CPU (%)", ("steady", "api_cpu_pct"), "{:.0f}", ""),
    ("operator RSS idle, 1 job (MiB)", ("rss_idle_mib",), "{:.0f}", ""),
    ("operator RSS settled (MiB)", ("rss_settled_mib",), "{:.0f}", "< 200"),
    ("operator RSS end (MiB)", ("rss_end_mib",), "{:.0f}", "< 200"),
    ("operator RSS peak, VmHWM (MiB)", ("rss_peak_mib",), "{:.0f}", "< 200"),
    ("API RSS end (MiB)", ("api_rss_end_mib",), "{:.0f}", ""),
]


def lookup(run: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = run
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="RLJobs in the burst")
    parser.add_argument("--steady", type=int, default=100, help="RLJobs after the burst")
    parser.add_argument("--rate", type=float, default=10.0, help="steady jobs per second")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds between the phases")
    parser.add_argument("--runs", type=int, default=3, help="runs (the table shows medians)")
    parser.add_argument("--poll-seconds", type=float, default=5.0, help="KUBERL_POLL_SECONDS")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait per phase")
    parser.add_argument("--serve-api", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_api:
        return serve_api()

    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / f"operator-scale-{stamp}"
    logs.mkdir()
    load_before = os.getloadavg()
    runs = []
    for i in range(args.runs):
        run = run_once(args, i, logs)
        runs.append(run)
        b, s = run["burst"], run["steady"]
        print(
            f"run {i + 1}/{args.runs}: burst {b['handled']}/{b['jobs']} in "
            f"{b['all_clusters_s']:.1f} s (p50 {b.get('p50_s', 0):.2f} s, p99 "
            f"{b.get('p99_s', 0):.2f} s); steady {s['handled']}/{s['jobs']} p50 "
            f"{s.get('p50_s', 0):.2f} s p99 {s.get('p99_s', 0):.2f} s; RSS settled "
            f"{run['rss_settled_mib']:.0f} MiB, peak {run['rss_peak_mib']:.0f} MiB",
            flush=True,
        )

    print(
        f"\n{args.jobs} burst + {args.steady} steady RLJobs at {args.rate:g}/s, "
        f"KUBERL_POLL_SECONDS={args.poll_seconds:g}; median of {args.runs} runs; load average "
        f"{load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        "Processes: emulated API (tests/kubeapi.py, kmock) | `kuberl-operator -n default` "
        "(KUBECONFIG) | this script (creates, watches RayClusters)\n"
    )
    print("| metric | median | min-max | target |")
    print("|---|---:|---:|---|")
    summary = {}
    for label, path, fmt, target in ROWS:
        values = [v for run in runs if (v := lookup(run, path)) is not None]
        if not values:
            continue
        median = statistics.median(values)
        summary[".".join(path)] = {"median": median, "min": min(values), "max": max(values)}
        spread = f"{fmt.format(min(values))}-{fmt.format(max(values))}"
        print(f"| {label} | {fmt.format(median)} | {spread} | {target} |")

    meta = {
        "jobs": args.jobs,
        "steady": args.steady,
        "rate": args.rate,
        "settle_s": args.settle,
        "poll_seconds": args.poll_seconds,
        "runs": args.runs,
        "processes": "emulated API (tests/kubeapi.py) as a child of this script (--serve-api); "
        "the operator as `kuberl-operator -n default` with KUBECONFIG; latencies measured here "
        "from each create's return to the RayCluster's ADDED event on a watch",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    path = RESULTS / f"operator-scale-{stamp}.json"
    path.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=2))
    print(f"\nwrote {path} (logs in {logs})")


if __name__ == "__main__":
    main()
