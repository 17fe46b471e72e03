"""A learning race on Atari Pong: kuberl against RLlib 2.60's APPO, the same wall time, side by
side in one run.

Each system runs in a child process of its own, one after the other with the whole machine (run
side by side, each pinned to one of two cores, RLlib's env runner sampled 100 steps in 30 s while
Ray's own processes shared its core), and is stopped after --minutes of wall time counted from
its start (imports and Ray's start included). Each child prints a line per training iteration (time,
env steps, the mean return of the last 100 episodes: whole games, -21 to 21), and the parent draws
both curves in one figure and tabulates the return each had reached every few minutes.

- kuberl runs PPO with CleanRL's Atari hyperparameters (8 envs x 128 steps, 4 epochs of 4
  minibatches, clip 0.1, entropy 0.01, step size 2.5e-4) on ale-py's vector env (84x84 grey
  frames, a stack of 4, frame skip 4, no sticky actions) with the Nature CNN, sampling and
  learning in its driver process (no Ray).
- RLlib runs its tuned example tuned_examples/appo/pong_appo.py (64x64 frames, its CNN of four
  convolutions, 2 envs per env runner, train batches of 500, a circular buffer of 4 batches each
  used twice) with what changes to fit two cores: one env runner, the learner in the driver
  process, no aggregator actors.

    python bench/pong_race.py [--minutes 20] [--seed 0]
"""

import time

CHILD_START = time.time()  # a child's imports are inside its measured time

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from async_vs_rllib import emit, finite  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
RETURN_WINDOW = 100
RACE_TITLE = "Pong: kuberl PPO against RLlib APPO (its tuned example), 2 cores"
SYSTEMS = ("kuberl", "rllib")


def run_kuberl(seed: int, seconds: float) -> None:
    from driver_clock import IterationClock, run_driver, trainer_config

    from kuberl_contract.config import RolloutConfig

    config = trainer_config(
        algorithm="PPO",
        env="ALE/Pong-v5",
        envConfig={"repeat_action_probability": 0.0, "num_threads": 1},
        seed=seed,
        metricsWindow=RETURN_WINDOW,
        stop={"wallTimeSeconds": seconds},
        hyperparameters={
            "learning_rate": 2.5e-4,
            "rollout_length": 128,
            "gae_lambda": 0.95,
            "clip_range": 0.1,
            "vf_clip_range": 0.1,
            "vf_coeff": 0.5,
            "entropy_coeff": 0.01,
            "num_epochs": 4,
            "minibatch_size": 256,
            "max_grad_norm": 0.5,
        },
    )

    def tick(t) -> None:
        emit(
            "TICK", {"time": t.time, "steps": t.timesteps, "return": finite(t.episode_return_mean)}
        )

    run_driver(config, RolloutConfig(envs_per_worker=8), IterationClock(on_tick=tick))


def rllib_config(seed: int):
    """tuned_examples/appo/pong_appo.py on one core."""
    import gymnasium as gym
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    from ray.tune.registry import register_env

    def make_env(env_config):
        import ale_py

        gym.register_envs(ale_py)
        env = gym.make("ALE/Pong-v5", **env_config)
        return wrap_atari_for_new_api_stack(env, dim=64, framestack=None)

    register_env("pong", make_env)
    return (
        APPOConfig()
        .environment(
            "pong",
            env_config={
                "frameskip": 1,
                "full_action_space": False,
                "repeat_action_probability": 0.0,
            },
            clip_rewards=True,
        )
        .env_runners(
            env_to_module_connector=lambda env, spaces=None, device=None: FrameStackingEnvToModule(
                num_frames=4
            ),
            num_env_runners=1,
            num_envs_per_env_runner=2,
            num_cpus_per_env_runner=1,
        )
        .learners(num_learners=0, num_aggregator_actors_per_learner=0)
        .training(
            learner_connector=lambda obs_space, act_space: FrameStackingLearner(num_frames=4),
            train_batch_size_per_learner=500,
            target_network_update_freq=2,
            lr=0.0005,
            vf_loss_coeff=1.0,
            entropy_coeff=[[0, 0.01], [3000000, 0.0]],
            broadcast_interval=5,
            circular_buffer_num_batches=4,
            circular_buffer_iterations_per_batch=2,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                vf_share_layers=True,
                conv_filters=[(16, 4, 2), (32, 4, 2), (64, 4, 2), (128, 4, 2)],
                conv_activation="relu",
                head_fcnet_hiddens=[256],
            )
        )
        .reporting(min_time_s_per_iteration=5, metrics_num_episodes_for_smoothing=RETURN_WINDOW)
        .debugging(seed=seed)
    )


def run_rllib(seed: int, seconds: float) -> None:
    import ray
    import torch

    torch.set_num_threads(1)
    algo = None
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        algo = rllib_config(seed).build_algo()
        while time.time() - CHILD_START < seconds:
            result = algo.train()["env_runners"]
            steps = int(result.get("num_env_steps_sampled_lifetime", 0))
            emit(
                "TICK",
                {
                    "time": time.time(),
                    "steps": steps,
                    "return": finite(result.get("episode_return_mean")),
                },
            )
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()


def start_child(system: str, args, log: Path, script: str = __file__) -> subprocess.Popen:
    """`script --child system` with the race's seed and minutes, in a session of its own."""
    return subprocess.Popen(
        [
            *(sys.executable, script, "--child", system),
            *("--seed", str(args.seed), "--minutes", str(args.minutes)),
        ],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )


def finish(proc: subprocess.Popen, deadline: float) -> list[dict]:
    """The child's ticks once it ends, stopped at `deadline` (SIGINT, then its process group)."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    ticks = []
    for line in out.splitlines():
        kind, _, record = line.partition(" ")
        if kind == "TICK":
            ticks.append(json.loads(record))
    return ticks


def race(systems: tuple[str, ...], args, prefix: str, script: str = __file__) -> dict:
    """Each system's child run in turn with the whole machine, stopped --minutes (plus 30 s to
    wind down) after its start; its stderr goes to bench/results/PREFIX-SYSTEM.log. Returns each
    system's start time, ticks and the load average once it ended."""
    seconds = args.minutes * 60
    RESULTS.mkdir(exist_ok=True)
    runs = {}
    for system in systems:
        start = time.time()
        proc = start_child(system, args, RESULTS / f"{prefix}-{system}.log", script)
        runs[system] = {"start": start, "ticks": finish(proc, start + seconds + 30)}
        runs[system]["loadavg_after"] = os.getloadavg()
    return runs


def reached(ticks: list[dict], start: float, at: float, key: str = "return") -> float | None:
    """The last `key` (a mean return) a system had reported by `at` seconds after its start."""
    seen = [t[key] for t in ticks if t["time"] - start <= at and t.get(key) is not None]
    return seen[-1] if seen else None


def table(runs: dict, marks: list[float], columns: list[tuple[str, str, str]]) -> None:
    """Print what each column, (header, system, tick key), had reached at each mark (seconds)."""
    lines = [["minutes", *(header for header, _, _ in columns)]]
    for at in marks:
        row = [reached(runs[s]["ticks"], runs[s]["start"], at, key) for _, s, key in columns]
        lines.append([f"{at / 60:.0f}", *("-" if r is None else f"{r:.2f}" for r in row)])
    widths = [8] + [max(12, len(header) + 2) for header, _, _ in columns]
    for line in lines:
        print("".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))


def plot(
    runs: dict,
    path: Path,
    title: str = RACE_TITLE,
    ylabel: str = f"mean return of the last {RETURN_WINDOW} games",
    curves: tuple[tuple[str, str, str], ...] = (("return", "", "-"),),
) -> None:
    """One figure of every system's curves against wall time; a curve is (tick key, label
    suffix, line style), a system's curves sharing its colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for colour, (system, run) in enumerate(runs.items()):
        for key, suffix, style in curves:
            points = [
                (t["time"] - run["start"], t[key]) for t in run["ticks"] if t.get(key) is not None
            ]
            if points:
                minutes, returns = zip(*points, strict=True)
                axes.plot(
                    [m / 60 for m in minutes],
                    returns,
                    style,
                    color=f"C{colour}",
                    label=system + suffix,
                )
    axes.set_xlabel("wall time (minutes)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=SYSTEMS)
    args = parser.parse_args()
    seconds = args.minutes * 60
    if args.child:
        (run_kuberl if args.child == "kuberl" else run_rllib)(args.seed, seconds)
        return

    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"pong-race-{stamp}"
    report(race(SYSTEMS, args, name), SYSTEMS, args, name)


def report(
    runs: dict,
    systems: tuple[str, ...],
    args,
    name: str,
    title: str = RACE_TITLE,
    steps_table: bool = False,
) -> None:
    """Print the returns each system had reached every 5 minutes (and its env steps, with
    `steps_table`) and its totals; draw the curves as bench/results/NAME.png and keep the
    ticks as NAME.json."""
    seconds = args.minutes * 60
    marks = [m * 60 for m in range(5, int(args.minutes) + 1, 5)] or [seconds]
    table(runs, marks, [(system, system, "return") for system in systems])
    if steps_table:
        table(runs, marks, [(f"{system} steps", system, "steps") for system in systems])
    for system in systems:
        ticks = runs[system]["ticks"]
        steps = ticks[-1]["steps"] if ticks else 0
        print(
            f"{system}: {len(ticks)} iterations, {steps:,} env steps in {args.minutes:g} min "
            f"({steps / seconds:,.0f}/s), load average after "
            f"{runs[system]['loadavg_after'][0]:.2f}"
        )
    figure = RESULTS / f"{name}.png"
    plot(runs, figure, title)
    (RESULTS / f"{name}.json").write_text(
        json.dumps({"minutes": args.minutes, "seed": args.seed, "runs": runs})
    )
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
