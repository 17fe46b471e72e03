"""A learning race on HalfCheetah-v5: kuberl's SAC against Stable-Baselines3's, the same wall time,
one after the other in one run.

Both run rl-zoo's HalfCheetah SAC hyperparameters (Stable-Baselines3's defaults with 10,000 env
steps before the first gradient step: one env, [256, 256] networks, 1 gradient step of 256 samples
per env step), with the same seed and 1 torch thread each (kuberl's driver sets its learner to 1;
SB3 is set to the same). Each system runs in a child process of its own with the whole machine
and is stopped --minutes after its start (imports included). Every 1,000 env steps each child
prints a line: the time, env steps, the mean return of the last 20 training episodes and, every
5,000 env steps, the mean return of 10 greedy (deterministic) episodes, one on each of 10 envs
stepped together, the evaluation's time counting in the race. The parent tabulates both returns
every 2 minutes, draws the curves in one figure and writes the results to bench/results/.

- kuberl runs deploy/examples/halfcheetah-sac.yaml (the same hyperparameters, 8 env steps then 8
  gradient steps per iteration) through its Driver, as `kuberl train` does, with the evaluation
  cadence above, a wall-time stop and no checkpoints. Its warm-up acts with the untrained actor.
- SB3 runs `SAC("MlpPolicy", ...)` on a Monitor-wrapped env (one env step, then one gradient
  step), greedy evaluations by `evaluate_policy` from a callback. Its warm-up acts uniformly at
  random.

    python bench/halfcheetah_race.py [--minutes 10] [--seed 0]
"""

import time

CHILD_START = time.time()  # a child's imports are inside its measured time

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from async_vs_rllib import emit, finite  # noqa: E402
from pong_race import RESULTS, plot, race, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "examples" / "halfcheetah-sac.yaml"
ENV = "HalfCheetah-v5"
SYSTEMS = ("kuberl", "sb3")
TORCH_THREADS = 1  # kuberl's LEARNER_TORCH_THREADS
LEARNING_STARTS = 10_000  # rl-zoo's, as in the example
PROGRESS_STEPS = 1_000  # a progress line every this many env steps (one episode)
# Every 5,000 env steps rather than the example's 10,000: about one point a minute at ~90 steps/s.
EVAL_STEPS = 5_000
EVAL_EPISODES = 10  # the example's
RETURN_WINDOW = 20  # kuberl's default metricsWindow; SB3's stats_window_size is set to it
MARK_MINUTES = 2


def tick(time_: float, steps: int, train: float | None, greedy: float | None = None) -> None:
    emit("TICK", {"time": time_, "steps": steps, "train": finite(train), "greedy": finite(greedy)})


def run_kuberl(seed: int, seconds: float) -> None:
    from driver_clock import IterationClock, run_driver, trainer_config

    from kuberl_operator.validation import load_rljob

    job = load_rljob(EXAMPLE)
    document = job.spec.trainer.model_dump(by_alias=True, exclude_unset=True)
    del document["checkpoint"]  # trainer_config's: only at the end
    every = EVAL_STEPS // job.spec.trainer.hyperparameters.rollout_length
    document |= {
        "seed": seed,
        "evaluation": {"everyIterations": every, "episodes": EVAL_EPISODES},
        # The driver counts the time of its iterations only: give it what the budget has left.
        "stop": {"wallTimeSeconds": seconds - (time.time() - CHILD_START)},
    }
    config = trainer_config(**document)

    def on_tick(t) -> None:
        # An iteration ending on a multiple of EVAL_STEPS is one that evaluated.
        if t.timesteps % PROGRESS_STEPS == 0:
            evaluated = t.timesteps % EVAL_STEPS == 0
            greedy = t.evaluation_return_mean if evaluated else None
            tick(t.time, t.timesteps, t.episode_return_mean, greedy)

    clock = IterationClock(on_tick=on_tick)
    run_driver(config, job.spec.rollout_workers, clock)
    last = clock.ticks[-1]
    if last.timesteps % PROGRESS_STEPS:  # where it stopped, for its rate
        tick(last.time, last.timesteps, last.episode_return_mean)


def run_sb3(seed: int, seconds: float) -> None:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.utils import safe_mean

    torch.set_num_threads(TORCH_THREADS)
    env = make_vec_env(ENV, n_envs=1, seed=seed)  # Monitor-wrapped: training episode returns
    eval_envs = make_vec_env(ENV, n_envs=EVAL_EPISODES, seed=seed)  # one episode on each
    model = SAC(
        "MlpPolicy",
        env,
        learning_starts=LEARNING_STARTS,
        stats_window_size=RETURN_WINDOW,
        seed=seed,
        device="cpu",
    )

    def train_return() -> float:
        return safe_mean([episode["r"] for episode in model.ep_info_buffer])

    class Progress(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.evaluations = 0

        def _on_step(self) -> bool:
            steps = self.num_timesteps
            if steps % PROGRESS_STEPS == 0:
                greedy = None
                if steps % EVAL_STEPS == 0:
                    # Fresh start states each time, seeded as kuberl seeds its evaluations.
                    self.evaluations += 1
                    eval_envs.seed(seed + 1_000_003 * self.evaluations)
                    greedy, _ = evaluate_policy(
                        model, eval_envs, n_eval_episodes=EVAL_EPISODES, deterministic=True
                    )
                tick(time.time(), steps, train_return(), greedy)
            return time.time() - CHILD_START < seconds

    model.learn(total_timesteps=10**9, callback=Progress())
    tick(time.time(), model.num_timesteps, train_return())


def rates(run: dict, seconds: float) -> dict:
    """Env steps per second over the ticks within the budget: from the start, and from the end of
    the warm-up (learning_starts: no gradient steps before)."""
    ticks = [t for t in run["ticks"] if t["time"] - run["start"] <= seconds]
    if not ticks:
        return {"steps": 0, "steps_per_s": 0.0, "warmup_s": None, "learning_steps_per_s": None}
    last = ticks[-1]
    warm = next((t for t in ticks if t["steps"] >= LEARNING_STARTS), None)
    learning = None
    if warm is not None and last["steps"] > warm["steps"]:
        learning = (last["steps"] - warm["steps"]) / (last["time"] - warm["time"])
    return {
        "steps": last["steps"],
        "steps_per_s": last["steps"] / (last["time"] - run["start"]),
        "warmup_s": None if warm is None else warm["time"] - run["start"],
        "learning_steps_per_s": learning,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=SYSTEMS)
    args = parser.parse_args()
    seconds = args.minutes * 60
    if args.child:
        (run_kuberl if args.child == "kuberl" else run_sb3)(args.seed, seconds)
        return

    stamp = time.strftime("%Y%m%d-%H%M%S")
    load_before = os.getloadavg()
    runs = race(SYSTEMS, args, f"halfcheetah-race-{stamp}", __file__)
    step = MARK_MINUTES * 60
    marks = [m * step for m in range(1, int(seconds // step) + 1)] or [seconds]
    columns = [
        (f"{s} {k}", s, key) for s in SYSTEMS for k, key in (("eval", "greedy"), ("train", "train"))
    ]
    table(runs, marks, columns)
    print(f"load average before: {load_before[0]:.2f}")
    for system in SYSTEMS:
        runs[system]["rates"] = rate = rates(runs[system], seconds)
        learning = rate["learning_steps_per_s"]
        print(
            f"{system}: {rate['steps']} env steps ({rate['steps_per_s']:.1f}/s; after the "
            f"warm-up {'-' if learning is None else f'{learning:.1f}'}/s), "
            f"load average after {runs[system]['loadavg_after'][0]:.2f}"
        )
    figure = RESULTS / f"halfcheetah-race-{stamp}.png"
    plot(
        runs,
        figure,
        title="HalfCheetah-v5: kuberl SAC against Stable-Baselines3 SAC (rl-zoo's), 2 cores",
        ylabel="mean return",
        curves=(
            ("greedy", f", greedy ({EVAL_EPISODES} episodes)", "o-"),
            ("train", f", training (last {RETURN_WINDOW} episodes)", "--"),
        ),
    )
    settings = {
        "minutes": args.minutes,
        "seed": args.seed,
        "torch_threads": TORCH_THREADS,
        "eval_steps": EVAL_STEPS,
        "eval_episodes": EVAL_EPISODES,
        "return_window": RETURN_WINDOW,
        "loadavg_before": load_before,
    }
    (RESULTS / f"halfcheetah-race-{stamp}.json").write_text(json.dumps({**settings, "runs": runs}))
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
