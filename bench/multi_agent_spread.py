"""MPE's simple_spread (3 agents, 25 steps, discrete actions) with one shared PPO policy: kuberl
against RLlib 2.60's multi-agent PPO, side by side, for the same wall time on the same machine.

Both run everything in one process on the machine's CPUs: kuberl's example
deploy/examples/mpe-spread-ppo.yaml (its driver's own worker, 32 copies of the env), and RLlib's
new API stack with its local env runner of 32 envs (num_env_runners=0) and its learner in the
driver (num_learners=0), with the example's settings: a shared policy of separate [64, 64] tanh
MLPs for the policy and the value function, lr 7e-4, 10 epochs of 800-row minibatches over 4,800
agent steps, entropy 0.01, gamma 0.99, lambda 0.95. Returns are the sum over the three agents of
an episode (both systems' episode return), averaged over the 100 most recent episodes.

Each run is a fresh child process (this file with --child) that prints a line per iteration (time,
agent steps, mean return); the clock starts when the parent starts it (imports and Ray's start
count). The parent reads every system's return and throughput at each minute of the race and
writes bench/results/multi_agent_spread.json.

    python bench/multi_agent_spread.py [--minutes 10] [--seeds 1] [--systems kuberl rllib]

RLlib's extra packages (dm-tree, pandas, pyarrow, ormsgpack, ...) come with `pip install
'kuberl[bench]'` or on PYTHONPATH.
"""

import time

CHILD_START = time.time()  # a child's imports are inside its measured time

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
EXAMPLE = ROOT / "deploy" / "examples" / "mpe-spread-ppo.yaml"
COPIES = 32
AGENTS = 3
WINDOW = 100
SETTINGS = {  # the example's, named as each system names them below
    "lr": 0.0007,
    "epochs": 10,
    "minibatch": 800,
    "batch_agent_steps": COPIES * AGENTS * 50,
    "entropy": 0.01,
    "gamma": 0.99,
    "lambda": 0.95,
}


def emit(started: float, agent_steps: int, value: float | None) -> None:
    line = {"time": time.time() - started, "agent_steps": agent_steps, "return": value}
    print("TICK " + json.dumps(line), flush=True)


def finite(value) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def run_rllib(seed: int, minutes: float, started: float) -> None:
    import ray
    import torch
    from mpe2 import simple_spread_v3
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    register_env(
        "spread",
        lambda _: ParallelPettingZooEnv(
            simple_spread_v3.parallel_env(N=AGENTS, max_cycles=25, continuous_actions=False)
        ),
    )
    config = (
        PPOConfig()
        .environment("spread")
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent, *_, **__: "shared")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=COPIES)
        .learners(num_learners=0)
        .training(
            lr=SETTINGS["lr"],
            num_epochs=SETTINGS["epochs"],
            minibatch_size=SETTINGS["minibatch"],
            # counted in env steps: each of the 3 agents' steps of one env step are in it
            train_batch_size_per_learner=SETTINGS["batch_agent_steps"] // AGENTS,
            entropy_coeff=SETTINGS["entropy"],
            gamma=SETTINGS["gamma"],
            lambda_=SETTINGS["lambda"],
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False
            )
        )
        .reporting(metrics_num_episodes_for_smoothing=WINDOW)
        .debugging(seed=seed)
    )
    torch.set_num_threads(os.cpu_count() or 1)
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    algo = config.build_algo()
    try:
        while time.time() - started < minutes * 60:
            result = algo.train()["env_runners"]
            steps = int(result.get("num_agent_steps_sampled_lifetime", {}).get("__all__", 0) or 0)
            if not steps:
                steps = int(sum(result.get("num_agent_steps_sampled_lifetime", {}).values()))
            emit(started, steps, finite(result.get("episode_return_mean")))
    finally:
        algo.stop()
        ray.shutdown()


def child(system: str, seed: int, minutes: float, started: float) -> None:
    if system == "rllib":
        run_rllib(seed, minutes, started)
        return
    from kuberl_operator.validation import load_rljob
    from kuberl_trainer.job.driver import Driver

    job = load_rljob(EXAMPLE)
    # the run's wall time less what the process took to get here (imports)
    stop = {"wallTimeSeconds": minutes * 60 - (time.time() - started)}
    trainer = job.spec.trainer.model_copy(
        update={"seed": seed, "stop": type(job.spec.trainer.stop).model_validate(stop)}
    )
    with tempfile.TemporaryDirectory() as run_dir:
        driver_start = time.time() - started
        Driver(trainer, job.spec.rollout_workers, Path(run_dir), job.name).run()
        for line in (Path(run_dir) / "progress.jsonl").read_text().splitlines():
            row = json.loads(line)
            tick = {
                "time": driver_start + row["time_total_s"],
                "agent_steps": row["timesteps_total"],
                "return": finite(row["episode_return_mean"]),
            }
            print("TICK " + json.dumps(tick), flush=True)


def race(system: str, seed: int, minutes: float, log: Path) -> list[dict]:
    """One run in a fresh process; its ticks."""
    command = [sys.executable, __file__, "--child", system, "--seed", str(seed)]
    command += ["--minutes", str(minutes), "--started", str(time.time())]
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=out, text=True, start_new_session=True
        )
        ticks = []
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("TICK "):
                ticks.append(json.loads(line[5:]))
        try:
            process.wait(timeout=minutes * 60 + 300)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    return ticks


def at(ticks: list[dict], seconds: float) -> dict | None:
    """The last tick by `seconds`."""
    before = [tick for tick in ticks if tick["time"] <= seconds]
    return before[-1] if before else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--systems", nargs="+", default=["kuberl", "rllib"])
    parser.add_argument("--child")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--started", type=float)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seed, args.minutes, args.started)
        return
    RESULTS.mkdir(exist_ok=True)
    runs: dict[str, list[list[dict]]] = {system: [] for system in args.systems}
    for seed in range(args.seeds):
        for system in args.systems:
            log = RESULTS / f"multi_agent_spread-{system}-{seed}.log"
            runs[system].append(race(system, seed, args.minutes, log))
    marks = [60 * m for m in range(1, int(args.minutes) + 1)]
    table = []
    for seconds in marks:
        entry = {"minute": seconds // 60}
        for system, seeds in runs.items():
            points = [at(ticks, seconds) for ticks in seeds]
            points = [p for p in points if p is not None]
            entry[system] = {
                "agent_steps": [p["agent_steps"] for p in points],
                "return": [p["return"] for p in points],
            }
        table.append(entry)
        print(json.dumps(entry))
    (RESULTS / "multi_agent_spread.json").write_text(json.dumps({"table": table}, indent=1))


if __name__ == "__main__":
    main()
