"""One GPU check anyone can run: kuberl's GPU tests, the examples with the learner on the CPU and
on the GPU, the IMPALA learner bench on both, and IMPALA/APPO throughput with more rollout
workers, in one run of under 10 minutes that ends with one table.

Steps, each a child process under its own timeout (a failed or timed-out step is reported in the
table and the script goes on):

1. tests: `pytest tests/trainer/test_device.py tests/trainer/test_local_multi_gpu.py`.
2. learner: `bench/learner.py` on cpu and cuda at hidden 64,64 and 256,256.
3. cnn: `bench/cnn_learner.py` on cpu (every CPU's thread, as the trainer gives a CNN learner) and
   cuda: PPO's learn call on Pong frames, on one worker's batch and on 12 workers'.
4. scaling: cartpole-impala.yaml and an APPO copy of it with 1, 4 and 12 rollout workers (1 and 2
   with --quick), stopped by wall time only, learning on the GPU where there is one: env steps/s,
   the final return and the last progress row's policy_lag.
5. pong: pong-ppo.yaml the same way with 1 and 12 rollout workers (1 with --quick).
6. examples: every deploy/examples/*.yaml that trains locally, with `kuberl train` twice: as is
   (learner.gpus 0) and with `spec.learner.gpus: 1`, both with `stop.wallTimeSeconds` added so
   that each run fits its slot. Reported: wall time, the final record's outcome and return, the
   device the GPU copy chose to learn on (learner.device auto), and cuda/cpu of the training
   seconds per env step (wall time alone compares runs cut at the same
   cap; per env step compares the work done in it).

The table is written after every step, so that a check cut short keeps what it measured.

Without CUDA (or with --device cpu) it is a dry run: the cuda columns say "no CUDA", and the
examples' learner.gpus 1 copies still run (the trainer falls back to the CPU), so that everything
but the GPU itself is checked before GPU time is spent. --quick shortens it for such a check.

    python bench/gpu_check.py [--device auto|cpu|cuda] [--quick] [--out gpu-check.md] [--logs DIR]
        [--only tests,learner,examples,scaling,cnn,pong]

Children get RAY_AUTH_MODE=disabled; every `kuberl train` starts and ends its own local Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from kuberl_contract.final_record import FinalRecord, read_final_record
from kuberl_contract.progress_row import POLICY_LAG, PROGRESS_FILE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "deploy" / "examples"
SCALING_EXAMPLE = "cartpole-impala.yaml"
PONG_EXAMPLE = "pong-ppo.yaml"
TESTS = ["tests/trainer/test_device.py", "tests/trainer/test_local_multi_gpu.py"]
LEARNER_HIDDEN = ["64,64", "256,256"]
NO_CUDA = "no CUDA"

# Examples that do not train here in a slot of seconds, and why.
SKIPPED_EXAMPLES = {
    "pendulum-ppo-gpu-spot.yaml": "operator-only: checkpoints on a PVC, workers on spot nodes",
    "cartpole-pbt.yaml": "too slow: four whole PPO trainers in Ray actors, up to 600k env steps",
}

# Seconds between SIGINT and SIGKILL when a training run runs out of time: `kuberl train`
# checkpoints, ends its Ray and prints its final record (its figures so far), usually within 2 s.
GRACE = 2


@dataclass(frozen=True)
class Plan:
    """Step timeouts in seconds (a training run's GRACE comes on top) and the training caps that
    keep the runs inside them."""

    probe: int
    tests: int
    learner: int  # per run
    learner_calls: int
    examples: list[str] | None  # None: every example not in SKIPPED_EXAMPLES
    example_cap: int  # stop.wallTimeSeconds added to both runs of an example
    example: int  # per run sampling in the driver: imports, training, checkpoint
    ray_example: int  # per run with remote rollout workers: Ray and its actors start first
    scaling_cap: int  # stop.wallTimeSeconds of each throughput run
    scaling: dict[int, int]  # rollout workers -> timeout: more workers take longer to start
    cnn: int  # per run of bench/cnn_learner.py (both devices)
    cnn_batches: list[int]  # sample calls in the CNN learner's batch (1: one worker's)
    cnn_calls: int
    pong_cap: int  # stop.wallTimeSeconds of each Pong run
    pong: dict[int, int]  # rollout workers -> timeout


# On a GPU machine (16 cores) the whole check is one call of a few minutes: with the six
# examples that train here these add up to 450 s, and a run usually ends well before its timeout
# (an example starts in about 3 s; a run with remote workers starts its own Ray first, 10-15 s on
# a machine just started).
FULL = Plan(
    probe=8,
    tests=60,
    learner=8,
    learner_calls=20,
    examples=None,
    example_cap=4,
    example=10,
    ray_example=30,
    scaling_cap=10,
    scaling={1: 30, 4: 32, 12: 40},
    cnn=60,
    cnn_batches=[1, 12],
    cnn_calls=3,
    pong_cap=20,
    pong={1: 50, 12: 70},
)
# A dry run on a small CPU machine, where everything is slower and other jobs may run.
QUICK = Plan(
    probe=60,
    tests=120,
    learner=60,
    learner_calls=20,
    examples=["cartpole-ppo-fast.yaml"],
    example_cap=20,
    example=60,
    ray_example=80,
    scaling_cap=20,
    scaling={1: 60, 2: 60},
    cnn=150,
    cnn_batches=[1],
    cnn_calls=1,
    pong_cap=20,
    pong={1: 90},
)


def planned_seconds(plan: Plan, examples: list[Path], cuda: bool) -> int:
    """The sum of the step timeouts: the most the whole check can take, besides its own work."""
    learner_runs = len(LEARNER_HIDDEN) * (2 if cuda else 1)
    example_runs = sum(
        2 * (GRACE + (plan.ray_example if remote_workers(load(e)) else plan.example))
        for e in examples
    )
    scaling_runs = 2 * sum(GRACE + timeout for timeout in plan.scaling.values())
    cnn_runs = len(plan.cnn_batches) * plan.cnn
    pong_runs = sum(GRACE + timeout for timeout in plan.pong.values())
    return (
        plan.probe
        + plan.tests
        + learner_runs * plan.learner
        + example_runs
        + scaling_runs
        + cnn_runs
        + pong_runs
    )


@dataclass
class Run:
    status: str  # "ok", "failed (exit N)", "timeout after N s" or "skipped: why"
    wall: float
    output: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Runner:
    """Runs the steps as child processes, each one's output appended to its section's log (a few
    files in all, so that they are easy to bring back), and never past the overall deadline."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.deadline = math.inf  # set once the plan's total is known
        self.env = os.environ | {
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONUNBUFFERED": "1",
        }

    def run(self, section: str, title: str, cmd: list[str], timeout: float, grace=0) -> Run:
        """`cmd` for at most `timeout` seconds; then SIGINT and `grace` seconds to end (a
        training run's final record comes then), then SIGKILL."""
        timeout = min(timeout, self.deadline - time.monotonic() - grace)
        if timeout < 1:
            return Run("skipped: out of time", 0.0, "")
        print(f"[{section}] {title} (timeout {timeout:.0f} s)", flush=True)
        log = self.logs / f"{section}.log"
        with log.open("ab") as out:
            out.write(f"\n===== {title}\n$ {shlex.join(cmd)}\n".encode())
            out.flush()
            offset = out.tell()
            start = time.monotonic()
            # Popen rather than subprocess.run: the child gets its own process group, so that Ray's
            # processes it started can be swept after it, whatever way it ended.
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout)
                status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                status = f"timeout after {timeout:.0f} s"
            with contextlib.suppress(ProcessLookupError):  # nothing of the group left: fine
                os.killpg(proc.pid, signal.SIGKILL)
            wall = time.monotonic() - start
            out.write(f"\n===== {title}: {status}, {wall:.1f} s\n".encode())
        output = log.read_bytes()[offset:].decode(errors="replace")
        print(f"[{section}] {title}: {status}, {wall:.1f} s", flush=True)
        return Run(status, wall, output)


# -- manifests ---------------------------------------------------------------------------------


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def remote_workers(manifest: dict) -> bool:
    return manifest["spec"].get("rolloutWorkers", {}).get("replicas", 0) > 0


def write_manifest(manifest: dict, directory: Path, name: str) -> Path:
    path = directory / f"{name}.yaml"
    manifest["metadata"]["name"] = name
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def example_copy(path: Path, gpus: int, cap: int, directory: Path) -> Path:
    manifest = load(path)
    manifest["spec"].setdefault("learner", {})["gpus"] = gpus
    manifest["spec"]["trainer"]["stop"]["wallTimeSeconds"] = cap
    return write_manifest(manifest, directory, f"{path.stem}-gpus{gpus}")


def cpus_per_worker(workers: int) -> float:
    """What each worker reserves so that all of them fit the machine's cores with one to spare
    for the driver and its learner thread (at most 1, rounded down to hundredths)."""
    spare = max(1, (os.cpu_count() or 1) - 1)
    return min(1.0, math.floor(100 * spare / workers) / 100)


def scaling_copy(
    example: str, algorithm: str, workers: int, gpus: int, cap: int, directory: Path
) -> Path:
    """`example` with `workers` rollout workers and `algorithm` (cartpole-impala.yaml's APPO copy
    keeps the optimizer, AsyncSamples, as the async learning tests run APPO: its defaults
    otherwise), stopped by wall time only so that every run samples for as long."""
    manifest = load(EXAMPLES / example)
    spec = manifest["spec"]
    spec["trainer"]["algorithm"] = algorithm
    spec["trainer"]["stop"] = {"wallTimeSeconds": cap}
    spec.setdefault("rolloutWorkers", {})
    spec["rolloutWorkers"] |= {"replicas": workers, "cpusPerWorker": cpus_per_worker(workers)}
    spec.setdefault("learner", {})["gpus"] = gpus
    return write_manifest(
        manifest, directory, f"{algorithm.lower()}-{Path(example).stem.split('-')[0]}-{workers}w"
    )


def last_value(run_dir: Path, key: str) -> float | None:
    """`key` of the newest progress row that has it (an iteration that learned on no batch
    reports no policy_lag)."""
    path = run_dir / PROGRESS_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    for line in reversed(lines):
        value = json.loads(line).get(key)
        if value is not None:
            return value
    return None


# -- the steps ---------------------------------------------------------------------------------

Row = dict[str, str]  # check, case, cpu, cuda, ratio, notes


def probe(runner: Runner, plan: Plan) -> dict:
    """torch's view of the GPU, from a child so that this process never holds a CUDA context."""
    code = (
        "import json, torch; ok = torch.cuda.is_available(); print('PROBE ' + json.dumps("
        "{'cuda': ok, 'count': torch.cuda.device_count(), 'torch': torch.__version__, "
        "'name': torch.cuda.get_device_name(0) if ok else None}))"
    )
    run = runner.run("probe", "torch.cuda", [sys.executable, "-c", code], plan.probe)
    lines = [line for line in run.output.splitlines() if line.startswith("PROBE ")]
    return json.loads(lines[-1][len("PROBE ") :]) if lines else {"cuda": False, "torch": "?"}


def tests(runner: Runner, plan: Plan, cuda: bool) -> list[Row]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider"]
    run = runner.run("tests", "GPU tests", cmd + TESTS, plan.tests)
    counts = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", run.output)
    summary = ", ".join(f"{n} {what}" for n, what in counts) or "no summary"
    cell = f"{summary} ({run.wall:.0f} s)"
    if not run.ok:
        cell = f"{run.status}: {cell}"
    case = " + ".join(Path(t).name for t in TESTS)
    if cuda:
        return [row("tests", case, "-", cell)]
    return [row("tests", case, cell, NO_CUDA, notes="CUDA tests skip without a GPU")]


def train(runner: Runner, section: str, manifest: Path, timeout: int, tmp: Path):
    run_dir = tmp / "runs" / manifest.stem
    cmd = [sys.executable, "-m", "kuberl_cli.main", "train", str(manifest), "--run-dir"]
    run = runner.run(section, manifest.stem, [*cmd, str(run_dir)], timeout, grace=GRACE)
    return run, read_final_record(run.output), run_dir


def train_cell(run: Run, record: FinalRecord | None) -> str:
    if record is None:
        return f"{run.status}, no final record ({run.wall:.1f} s)"
    text = f"{run.wall:.1f} s, {record.outcome}, return {fmt(record.episode_return_mean)}"
    if record.evaluation_return_mean is not None:
        text += f" (eval {fmt(record.evaluation_return_mean)})"
    text += f", {record.timesteps_total or 0:,} steps"
    return text if run.ok else f"{run.status}: {text}"


def seconds_per_step(record: FinalRecord | None) -> float | None:
    if record is None or not record.timesteps_total or record.time_total_s is None:
        return None
    return record.time_total_s / record.timesteps_total


def examples(runner: Runner, plan: Plan, paths: list[Path], cuda: bool, tmp: Path) -> list[Row]:
    rows = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path not in paths:
            reason = SKIPPED_EXAMPLES.get(path.name, "not in --quick")
            rows.append(row("example", path.name, "skipped", "skipped", notes=reason))
            continue
        timeout = plan.ray_example if remote_workers(load(path)) else plan.example
        cpu_run, cpu_record, _ = train(
            runner, "examples", example_copy(path, 0, plan.example_cap, tmp), timeout, tmp
        )
        gpu_run, gpu_record, _ = train(
            runner, "examples", example_copy(path, 1, plan.example_cap, tmp), timeout, tmp
        )
        cpu_step, gpu_step = seconds_per_step(cpu_record), seconds_per_step(gpu_record)
        ratio = NO_CUDA
        if cuda and cpu_step and gpu_step:
            ratio = f"{gpu_step / cpu_step:.2f} (wall {gpu_run.wall / cpu_run.wall:.2f})"
        elif cuda:
            ratio = "-"
        gpu_cell = train_cell(gpu_run, gpu_record)
        if chose := DEVICE_CHOICE.search(gpu_run.output):
            gpu_cell += f"; learner.device auto: {chose[1]}"
        messages = [r.message for r in (cpu_record, gpu_record) if r is not None]
        rows.append(
            row(
                "example",
                path.name,
                train_cell(cpu_run, cpu_record),
                gpu_cell if cuda else f"{NO_CUDA}; learner.gpus 1 on the CPU: {gpu_cell}",
                ratio,
                notes=" / ".join(dict.fromkeys(messages)),
            )
        )
    return rows


# The learner's device trial's outcome in a job's log (see kuberl_trainer.job.device_choice).
DEVICE_CHOICE = re.compile(r"learn calls took .*?: (learning on [^,]+, [\d.]+x faster)")
LEARN_LINE = re.compile(r"^learn_on_batch\s+([\d.]+)\s+(\d+)", re.MULTILINE)
BATCH_LINE = re.compile(r"^batch: (.*)$", re.MULTILINE)


def learner(runner: Runner, plan: Plan, cuda: bool) -> list[Row]:
    rows = []
    for hidden in LEARNER_HIDDEN:
        results, batch = {}, None
        for device in ("cpu", "cuda") if cuda else ("cpu",):
            cmd = [sys.executable, "bench/learner.py", "--device", device, "--hidden", hidden]
            run = runner.run(
                "learner",
                f"{device} hidden {hidden}",
                [*cmd, "--calls", str(plan.learner_calls)],
                plan.learner,
            )
            match = LEARN_LINE.search(run.output)
            batch = batch or BATCH_LINE.search(run.output)
            results[device] = (float(match[1]), int(match[2])) if match and run.ok else run.status
        cells = {
            device: f"{r[0]:.2f} ms, {r[1]:,} samples/s" if isinstance(r, tuple) else r
            for device, r in results.items()
        }
        ratio = NO_CUDA
        if cuda:
            cpu, gpu = results["cpu"], results["cuda"]
            both = isinstance(cpu, tuple) and isinstance(gpu, tuple)
            ratio = f"{gpu[0] / cpu[0]:.2f}" if both else "-"
        rows.append(
            row(
                "learner",
                f"IMPALA learn_on_batch, hidden {hidden}",
                cells["cpu"],
                cells.get("cuda", NO_CUDA),
                ratio,
                notes=f"batch {batch[1] if batch else '?'}; cpu: 1 torch thread",
            )
        )
    return rows


def throughput(
    runner: Runner,
    section: str,
    example: str,
    algorithm: str,
    runs: dict[int, int],
    cap: int,
    cuda: bool,
    tmp: Path,
) -> list[Row]:
    """`example` with each number of rollout workers of `runs` (-> its timeout), learning on the
    GPU where there is one: env steps/s over the training time, the return, the policy lag."""
    rows, one_worker_rate = [], None
    for workers, timeout in runs.items():
        manifest = scaling_copy(example, algorithm, workers, int(cuda), cap, tmp)
        run, record, run_dir = train(runner, section, manifest, timeout, tmp)
        step = seconds_per_step(record)
        rate = 1 / step if step else None
        if workers == 1:
            one_worker_rate = rate
        lag = last_value(run_dir, POLICY_LAG)
        if rate is None:
            cell = train_cell(run, record)
        else:
            cell = f"{rate:,.0f} steps/s, return {fmt(record.episode_return_mean)}"
            cell += f", policy_lag {fmt(lag, 2)}" if lag is not None else ""
            cell = cell if run.ok else f"{run.status}: {cell}"
        ratio = ""
        if rate and one_worker_rate and workers > 1:
            ratio = f"{rate / one_worker_rate:.2f}x 1 worker"
        rows.append(
            row(
                section,
                f"{algorithm} {example}, {workers} worker(s) x {cpus_per_worker(workers):g} CPU",
                "-" if cuda else cell,
                cell if cuda else NO_CUDA,
                ratio,
                notes=f"learner on {'cuda' if cuda else 'the CPU'}, {cap} s cap",
            )
        )
    return rows


def scaling(runner: Runner, plan: Plan, cuda: bool, tmp: Path) -> list[Row]:
    return [
        r
        for algorithm in ("IMPALA", "APPO")
        for r in throughput(
            runner, "scaling", SCALING_EXAMPLE, algorithm, plan.scaling, plan.scaling_cap, cuda, tmp
        )
    ]


def pong(runner: Runner, plan: Plan, cuda: bool, tmp: Path) -> list[Row]:
    return throughput(runner, "pong", PONG_EXAMPLE, "PPO", plan.pong, plan.pong_cap, cuda, tmp)


CNN_LINE = re.compile(r"^learn_on_batch (cpu|cuda) ([\d.]+) (\d+)$", re.MULTILINE)
CNN_HEADER = re.compile(r"^PPO learner, .*$", re.MULTILINE)


def cnn(runner: Runner, plan: Plan, cuda: bool) -> list[Row]:
    rows = []
    devices = ["cpu", "cuda"] if cuda else ["cpu"]
    for batches in plan.cnn_batches:
        cmd = [sys.executable, "bench/cnn_learner.py", "--devices", *devices]
        cmd += ["--batches", str(batches), "--calls", str(plan.cnn_calls)]
        run = runner.run("cnn", f"PPO learner, {batches} worker batch(es)", cmd, plan.cnn)
        results = {m[1]: (float(m[2]), int(m[3])) for m in CNN_LINE.finditer(run.output)}
        cells = {
            d: f"{results[d][0]:,.0f} ms, {results[d][1]:,} samples/s"
            if d in results
            else run.status
            for d in ("cpu", "cuda")
        }
        ratio = NO_CUDA
        if cuda:
            both = "cpu" in results and "cuda" in results
            ratio = f"{results['cpu'][0] / results['cuda'][0]:.1f}x faster on cuda" if both else "-"
        header = CNN_HEADER.search(run.output)
        rows.append(
            row(
                "cnn",
                f"PPO learn_on_batch on Pong frames, {batches} x 1,024 rows",
                cells["cpu"],
                cells["cuda"] if cuda else NO_CUDA,
                ratio,
                notes=header[0] if header else run.status,
            )
        )
    return rows


# -- the table ---------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def row(check: str, case: str, cpu: str, cuda: str, ratio: str = "", notes: str = "") -> Row:
    return {"check": check, "case": case, "cpu": cpu, "cuda": cuda, "ratio": ratio, "notes": notes}


def markdown(rows: list[Row]) -> str:
    columns = ["check", "case", "cpu", "cuda", "ratio", "notes"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(r[c].replace("|", "/") for c in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="dry run: 1 example, 1-2 workers")
    parser.add_argument("--out", type=Path, default=Path("gpu-check.md"), help="the table")
    parser.add_argument("--logs", type=Path, default=None, help="step logs [a temp dir]")
    parser.add_argument(
        "--only",
        default="tests,learner,examples,scaling,cnn,pong",
        help="the steps to run, comma-separated [all six]",
    )
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    logs = args.logs or Path(tempfile.mkdtemp(prefix="gpu-check-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    started = time.monotonic()

    runner = Runner(logs)
    gpu = probe(runner, plan)
    if args.device == "cuda" and not gpu["cuda"]:
        sys.exit(f"--device cuda but torch sees no CUDA device (torch {gpu['torch']})")
    cuda = gpu["cuda"] and args.device != "cpu"
    if not cuda:
        # A dry run on a GPU machine as well: learner.gpus 1 falls back to the CPU, CUDA tests skip.
        runner.env["CUDA_VISIBLE_DEVICES"] = ""
    names = plan.examples or [p.name for p in sorted(EXAMPLES.glob("*.yaml"))]
    paths = [EXAMPLES / n for n in names if n not in SKIPPED_EXAMPLES]
    budget = planned_seconds(plan, paths, cuda)
    # The step timeouts add up to the budget; the deadline only guards against this script's own
    # overheads pushing the last steps past it (they are cut to what is left, or skipped).
    runner.deadline = started + budget + 10
    device = f"{gpu['name']} x{gpu['count']}" if cuda else f"CPU only ({NO_CUDA})"
    print(
        f"gpu_check: {device}, torch {gpu['torch']}, {os.cpu_count()} CPUs, "
        f"{'quick' if args.quick else 'full'} plan, step timeouts add up to {budget} s; "
        f"logs in {logs}",
        flush=True,
    )

    wanted = set(args.only.split(","))
    steps = {
        "tests": lambda: tests(runner, plan, cuda),
        "learner": lambda: learner(runner, plan, cuda),
        "cnn": lambda: cnn(runner, plan, cuda),
        "scaling": lambda: scaling(runner, plan, cuda, tmp),
        "pong": lambda: pong(runner, plan, cuda, tmp),
        "examples": lambda: examples(runner, plan, paths, cuda, tmp),
    }
    rows: list[Row] = []
    for name, step in steps.items():
        if name in wanted:
            rows += step()
            # Written after every step: a run cut short from outside still leaves what it measured.
            table = summary(gpu, device, plan, args.quick, started, budget, rows)
            args.out.write_text(table)
    shutil.rmtree(tmp, ignore_errors=True)  # the runs' checkpoints: the logs hold the figures
    print("\n" + table)
    print(f"wrote {args.out}; logs in {logs}")


def summary(
    gpu: dict, device: str, plan: Plan, quick: bool, started: float, budget: int, rows: list[Row]
) -> str:
    header = (
        f"kuberl GPU check: {device}, torch {gpu['torch']}, {os.cpu_count()} CPUs, "
        f"{'quick' if quick else 'full'} plan, {time.monotonic() - started:.0f} s "
        f"(step timeouts {budget} s), load average {os.getloadavg()[0]:.1f}.\n"
        "Examples: both runs capped at "
        f"{plan.example_cap} s of training; ratio = cuda/cpu training seconds per env step "
        "(wall time in brackets), target <= 1.0. Learner: ratio = cuda/cpu ms per learn call. "
        "Scaling and pong: env steps/s over each run's training time, ratio to 1 worker. "
        "CNN: PPO's learn call on Pong frames, cpu/cuda.\n"
    )
    return header + "\n" + markdown(rows) + "\n"


if __name__ == "__main__":
    main()
