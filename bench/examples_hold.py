"""Do the examples reach the targets they name on fresh episodes? Each example with a return
target in its stop (evaluationReturnMean or episodeReturnMean) is trained as a user would, with
`kuberl train FILE --seed S`, then played with `kuberl evaluate RUN --episodes 100` (greedy, env k
reset with seed k: start states no training evaluation used). A seed passes when that mean
reaches the example's target.

    python bench/examples_hold.py [--examples cartpole-ppo ...] [--seeds N] [--episodes 100]

Without --seeds, CartPole examples run seeds 0-9 and the others 0-2. The Atari examples are left
out unless named: each is hours of CPU time (their place is a GPU node).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kuberl_contract.final_record import read_final_record

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "deploy/examples"
KUBERL = Path(sys.executable).with_name("kuberl")
ATARI = ("pong-", "breakout-")


def target(example: Path) -> float | None:
    """The return the example's stop names, or None."""
    stop = yaml.safe_load(example.read_text())["spec"]["trainer"]["stop"]
    return stop.get("evaluationReturnMean", stop.get("episodeReturnMean"))


def default_examples() -> list[str]:
    return [
        path.stem
        for path in sorted(EXAMPLES.glob("*.yaml"))
        if target(path) is not None and not path.stem.startswith(ATARI)
    ]


def run(example: str, seed: int, episodes: int) -> dict:
    """Train the example at `seed` in a directory of its own, then evaluate it."""
    manifest = EXAMPLES / f"{example}.yaml"
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.time()
        trained = subprocess.run(
            [KUBERL, "train", manifest, "--seed", str(seed), "--run-dir", run_dir],
            capture_output=True,
            text=True,
        )
        train_s = time.time() - start
        if trained.returncode != 0:
            return {"error": f"train exited {trained.returncode}: {trained.stderr[-400:]}"}
        evaluated = subprocess.run(
            [KUBERL, "evaluate", run_dir, "--episodes", str(episodes), "-o", "json"],
            capture_output=True,
            text=True,
        )
        if evaluated.returncode != 0:
            return {"error": f"evaluate exited {evaluated.returncode}: {evaluated.stderr[-400:]}"}
        record = json.loads(evaluated.stdout.splitlines()[-1])
    final = read_final_record(trained.stdout)
    return {
        "return_mean": record["return_mean"],
        "return_min": min(record["returns"]),
        "timesteps": final.timesteps_total,
        "stopped_by": final.message,
        "train_s": train_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", nargs="+", default=default_examples())
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: 10 CartPole, 3 others)")
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()

    rows = []
    for example in args.examples:
        goal = target(EXAMPLES / f"{example}.yaml")
        seeds = args.seeds or (10 if example.startswith("cartpole") else 3)
        for seed in range(seeds):
            row = {"example": example, "seed": seed, "target": goal} | run(
                example, seed, args.episodes
            )
            row["holds"] = "error" not in row and row["return_mean"] >= goal
            rows.append(row)
            print(json.dumps(row), flush=True)

    print(f"\n| example | target | held on {args.episodes} episodes | means | median train s |")
    print("|---|---:|---|---|---:|")
    for example in args.examples:
        mine = [r for r in rows if r["example"] == example]
        means = ", ".join(f"{r['return_mean']:.0f}" if "return_mean" in r else "—" for r in mine)
        times = [r["train_s"] for r in mine if "train_s" in r]
        held = sum(r["holds"] for r in mine)
        median = f"{statistics.median(times):.0f}" if times else "—"
        print(f"| {example} | {mine[0]['target']:g} | {held}/{len(mine)} | {means} | {median} |")
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    path = results / f"examples-hold-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
