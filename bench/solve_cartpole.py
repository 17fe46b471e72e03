"""Time to solve CartPole-v1 with PPO: kuberl's two examples against Stable-Baselines3 and RLlib.

Every run is a fresh child process (this same file with --child). The clock starts when the parent
calls Popen, so interpreter start-up and imports count, and stops at the moment the child sees a
10-episode greedy evaluation reach 475 and 100 more greedy episodes, on fresh start states, confirm
it: their mean less its standard error reaches 475 (the child reports that time.time(); shutting
down after it does not count). Every system confirms alike: kuberl with its own
evaluation.confirmEpisodes, SB3 and RLlib with `confirmation` below; a confirmation that fails
lets training go on. Evaluation cadence: kuberl every 20 iterations
of 256 steps (5,120 steps), SB3 every 5,000 steps, RLlib every iteration (4,000 steps). Runs are
interleaved across systems, seed by seed, and capped at 300 s of wall time (SIGINT, then SIGKILL)
and at the step budget of each setup: kuberl and SB3 decay their linear schedules to zero at 100k
steps (rl-zoo's n_timesteps and the example manifest's stop), so 100k is their end; kuberl-fast (the
faster example, cartpole-ppo-fast.yaml) decays at 50k and ends there; RLlib gets 200k.

    python bench/solve_cartpole.py [--seeds 3] [--systems kuberl kuberl-fast sb3 rllib]
"""

import time

CHILD_START = time.time()  # first thing: a child's imports are inside its measured time

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

TARGET = 475.0
EVAL_EPISODES = 10
CONFIRM_EPISODES = 100  # fresh greedy episodes that must hold a passing evaluation's target
WALL_CAP_S = 300.0
RLLIB_MAX_STEPS = 200_000
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
MANIFESTS = {  # kuberl's two examples: rl-zoo's settings, and fewer epochs at a larger step
    "kuberl": ROOT / "deploy/examples/cartpole-ppo.yaml",
    "kuberl-fast": ROOT / "deploy/examples/cartpole-ppo-fast.yaml",
}


# -- children: each prints one line `RESULT {json}` ------------------------------------------


def confirmation(act, seed: int, episodes: int = CONFIRM_EPISODES) -> tuple[float, bool]:
    """The mean return of `episodes` CartPole-v1 episodes, env k reset with `seed + k`, all
    stepped together, with `act(observations) -> actions` greedy, and whether it holds the target
    (the mean less its standard error reaches it): the confirmation SB3 and RLlib get, as kuberl's
    evaluation.confirmEpisodes plays and judges it (kuberl_trainer/job/evaluation.py)."""
    import gymnasium as gym
    import numpy as np

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * episodes)
    obs, _ = envs.reset(seed=[seed + k for k in range(episodes)])
    returns, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        obs, rewards, terminated, truncated, _ = envs.step(act(obs))
        returns += np.where(done, 0.0, rewards)  # an ended env's autoreset steps do not count
        done |= terminated | truncated
    envs.close()
    error = returns.std(ddof=1) / np.sqrt(episodes)
    return float(returns.mean()), bool(returns.mean() - error >= TARGET)


def run_kuberl(seed: int, example: str = "kuberl") -> dict:
    import yaml
    from pydantic import TypeAdapter

    from kuberl_contract.config import RolloutConfig, TrainerConfig
    from kuberl_trainer.job.driver import Driver

    spec = yaml.safe_load(MANIFESTS[example].read_text())["spec"]
    trainer = spec["trainer"] | {
        "seed": seed,
        # the manifest's training-return stop replaced by the greedy evaluation; same horizon
        "stop": {"evaluationReturnMean": TARGET, "timesteps": spec["trainer"]["stop"]["timesteps"]},
        "evaluation": {  # every 20 x 256 steps, a passing one confirmed
            "everyIterations": 20,
            "episodes": EVAL_EPISODES,
            "confirmEpisodes": CONFIRM_EPISODES,
        },
    }
    config = TypeAdapter(TrainerConfig).validate_python(trainer)
    rollout = RolloutConfig.model_validate(spec["rolloutWorkers"])
    with tempfile.TemporaryDirectory() as run_dir:
        result = Driver(config, rollout, Path(run_dir), "bench").run()
        now = time.time()
    solved = (result.evaluation_return_mean or 0.0) >= TARGET
    return {
        "solved": solved,
        "solved_at": now if solved else None,
        "steps": result.timesteps,
        "last_eval": result.evaluation_return_mean,
        "stopped_by": result.stopped_by,
        # the driver's summed iteration times; the rest of the wall time is start-up and setup
        "train_s": result.time_total_s,
    }


def run_sb3(seed: int) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)  # as kuberl's driver; small MLPs are fastest on one thread

    def linear(start: float):  # rl-zoo's lin_X: X times the remaining fraction of training
        return lambda progress_remaining: progress_remaining * start

    class EvalStop(BaseCallback):
        """EvalCallback without the extras: greedy episodes every 5,000 steps, stop at target.
        One eval env per episode, all stepped together, as kuberl evaluates."""

        def __init__(self):
            super().__init__()
            self.eval_env = make_vec_env("CartPole-v1", n_envs=EVAL_EPISODES, seed=seed + 10**6)
            self.next_eval, self.solved_at, self.last_eval = 5_000, None, None
            self.confirmed = False

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += 5_000
            mean, _ = evaluate_policy(
                self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True
            )
            self.last_eval = float(mean)
            if mean >= TARGET:
                self.last_eval, self.confirmed = confirmation(
                    lambda obs: self.model.predict(obs, deterministic=True)[0],
                    seed + 2 * 10**6 + self.num_timesteps,
                )
            if self.confirmed:
                self.solved_at = time.time()
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    callback = EvalStop()
    learn_start = time.time()
    model.learn(total_timesteps=100_000, callback=callback)
    return {
        "solved": callback.solved_at is not None,
        "solved_at": callback.solved_at,
        "steps": model.num_timesteps,
        "last_eval": callback.last_eval,
        "train_s": (callback.solved_at or time.time()) - learn_start,
    }


def run_rllib(seed: int) -> dict:
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    # tuned_examples/ppo/cartpole_ppo.py plus the layout and the greedy evaluation.
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=4000)
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True
            )
        )
        .env_runners(num_env_runners=2, num_envs_per_env_runner=8)
        .evaluation(
            evaluation_interval=1,
            evaluation_duration=EVAL_EPISODES,
            evaluation_duration_unit="episodes",
            evaluation_num_env_runners=0,
            evaluation_config=PPOConfig.overrides(explore=False),
        )
        .debugging(seed=seed)
    )
    torch.set_num_threads(1)  # the learner runs in this process (num_learners=0): as the others
    try:  # a private instance ended with this process (also when interrupted while starting)
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        algo = config.build_algo()
        train_start = time.time()
        steps, last_eval, confirmed = 0, 0.0, False
        while steps < RLLIB_MAX_STEPS and not confirmed:
            result = algo.train()
            steps = int(result["env_runners"]["num_env_steps_sampled_lifetime"])
            last_eval = float(result["evaluation"]["env_runners"]["episode_return_mean"])
            if last_eval >= TARGET:
                module = algo.get_module()

                def act(obs, module=module):
                    with torch.no_grad():
                        batch = {"obs": torch.as_tensor(obs)}
                        logits = module.forward_inference(batch)["action_dist_inputs"]
                    return logits.argmax(-1).numpy()

                last_eval, confirmed = confirmation(act, seed + 2 * 10**6 + steps)
        now, solved = time.time(), confirmed
        return {
            "solved": solved,
            "solved_at": now if solved else None,
            "steps": steps,
            "last_eval": last_eval,
            "train_s": now - train_start,
        }
    finally:
        ray.shutdown()


CHILDREN = {
    "kuberl": run_kuberl,
    "kuberl-fast": lambda seed: run_kuberl(seed, "kuberl-fast"),
    "sb3": run_sb3,
    "rllib": run_rllib,
}


def child_main(system: str, seed: int) -> None:
    result = CHILDREN[system](seed) | {"child_start": CHILD_START}
    print("RESULT " + json.dumps(result), flush=True)


# -- parent ----------------------------------------------------------------------------------


def run_child(system: str, seed: int, log_dir: Path, wall_cap: float) -> dict:
    log = (log_dir / f"{system}-seed{seed}.log").open("w")
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", system, "--seed", str(seed)],
        stdout=subprocess.PIPE,
        stderr=log,
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
        with contextlib.suppress(ProcessLookupError):  # e.g. Ray agents orphaned mid-start
            os.killpg(proc.pid, signal.SIGKILL)
        timed_out = True
    log.write(out)
    log.close()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    row = {"system": system, "seed": seed, "exit": proc.returncode, "timed_out": timed_out}
    if not lines:
        return row | {"solved": False, "error": f"no result; see {log.name}"}
    result = json.loads(lines[-1][len("RESULT ") :])
    row |= result
    row["startup_s"] = result["child_start"] - start  # Popen to the child's first line
    row["wall_s"] = result["solved_at"] - start if result["solved"] else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=list(CHILDREN), choices=list(CHILDREN))
    parser.add_argument("--wall-cap", type=float, default=WALL_CAP_S, help="seconds per run")
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args.child, args.seed)

    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = RESULTS / f"solve-{stamp}-logs"
    log_dir.mkdir()
    load_before = os.getloadavg()
    rows = []
    systems = args.systems
    for seed in range(args.seeds):
        k = seed % len(systems)  # rotate who runs first, so drift in load spreads evenly
        for system in systems[k:] + systems[:k]:
            row = run_child(system, seed, log_dir, args.wall_cap)
            rows.append(row)
            if row.get("wall_s"):
                wall = f"{row['wall_s']:.1f} s"
            elif row["timed_out"]:
                wall = f"timed out at {args.wall_cap:g} s"
            else:
                wall = row.get("error", "not solved")
            print(
                f"{system} seed {seed}: {wall}, {row.get('steps', 0):,} steps, "
                f"last eval {row.get('last_eval')}, training {row.get('train_s', 0):.1f} s",
                flush=True,
            )

    summary = {}
    for system in systems:
        mine = [r for r in rows if r["system"] == system]
        times = [r["wall_s"] for r in mine if r.get("solved")]
        steps = [r["steps"] for r in mine if r.get("solved")]
        summary[system] = {
            "solved": f"{len(times)}/{len(mine)}",
            # an unsolved run counts as infinitely slow, so the median never hides failures
            "median_s": statistics.median(
                [r["wall_s"] if r.get("solved") else float("inf") for r in mine]
            ),
            "median_steps": statistics.median(steps) if steps else None,
            # training alone (after imports, env and model set-up), of the solved runs
            "median_train_s": statistics.median(r["train_s"] for r in mine if r.get("solved"))
            if times
            else None,
            "per_seed": {r["seed"]: r.get("wall_s") for r in mine},
            "per_seed_steps": {r["seed"]: r.get("steps") for r in mine},
        }

    print(
        f"\nCartPole-v1 PPO to a {EVAL_EPISODES}-episode greedy return >= {TARGET:g}, confirmed on "
        f"{CONFIRM_EPISODES} fresh episodes; wall time "
        f"from Popen (imports included); load average {load_before[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        "| system | solved | median s | per-seed s | median steps | per-seed steps "
        "| median s training |"
    )
    print("|---|---|---:|---|---:|---|---:|")
    for system, s in summary.items():
        per_seed = ", ".join("—" if t is None else f"{t:.1f}" for t in s["per_seed"].values())
        per_steps = ", ".join(f"{n:,}" if n else "—" for n in s["per_seed_steps"].values())
        med_steps = f"{s['median_steps']:,.0f}" if s["median_steps"] else "—"
        med_train = f"{s['median_train_s']:.1f}" if s["median_train_s"] else "—"
        print(
            f"| {system} | {s['solved']} | {s['median_s']:.1f} | {per_seed} | {med_steps} | "
            f"{per_steps} | {med_train} |"
        )
    ratios = {}
    for ours in ("kuberl", "kuberl-fast"):
        for other in ("sb3", "rllib"):
            if ours in summary and other in summary:
                ratios[f"{ours}/{other}"] = summary[ours]["median_s"] / summary[other]["median_s"]
    if ratios:
        print("\n" + ", ".join(f"{name} = {value:.2f}" for name, value in ratios.items()))

    path = RESULTS / f"solve-{stamp}.json"
    meta = {
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "target": TARGET,
        "wall_cap_s": args.wall_cap,
    }
    path.write_text(
        json.dumps({"meta": meta, "summary": summary, "ratios": ratios, "runs": rows}, indent=2)
    )
    print(f"\nwrote {path} (child logs in {log_dir})")


if __name__ == "__main__":
    main()
