"""Sampling throughput per core: kuberl's RolloutWorker against the raw ceiling and RLlib.

Four samplers step the same envs in this one process with 1 torch thread, for each case (an env
and a number of envs per sampler):

- ceiling: the envs as `gymnasium.make_vec` makes them by default (natively vectorized where the id
           has a vector entry point, as CartPole; else a SyncVectorEnv) plus one 64x64 tanh MLP
           forward per step in numpy (faster than torch's at these sizes); nothing else.
- kuberl:  a remote RolloutWorker's sample() with a PPO policy (actions, log-probs, GAE
           postprocessing): the numpy policy that only acts (policy/acting.py).
- kuberl-torch: the same with the torch policy, as the driver's local worker samples.
- rllib:   RLlib 2.60's SingleAgentEnvRunner (new API stack, PPO config, same 64x64 tanh policy),
           built and sampled locally without Ray actors, so it also runs on one core; its envs
           natively vectorized too where the id allows (`gym_env_vectorize_mode`), its best setting.

The machine is shared, so each measurement round runs every sampler once, in a rotating order,
and the table shows medians over rounds. Warm-up calls are not timed.

    python bench/sampling.py [--rounds 7] [--seconds 2]
        [--cases CartPole-v1:8 Pendulum-v1:8 CartPole-v1:64 CartPole-v1:256 CartPole-v1:1024]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import statistics
import time
from pathlib import Path

# One core for every sampler: numpy's BLAS reads this when numpy loads (torch imports it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch

torch.set_num_threads(1)  # before anything builds a model: all the samplers get one core

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

HIDDEN = [64, 64]
RESULTS = Path(__file__).parent / "results"
CASES = ["CartPole-v1:8", "Pendulum-v1:8", "CartPole-v1:64", "CartPole-v1:256", "CartPole-v1:1024"]


def ceiling_sampler(env_id: str, num_envs: int, rollout_length: int, seed: int):
    """The least any sampler must do per step: step the envs, run one policy forward."""
    envs = gym.make_vec(env_id, num_envs)
    space = envs.single_action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    out = space.n if discrete else int(np.prod(space.shape))
    sizes = [int(np.prod(envs.single_observation_space.shape)), *HIDDEN, out]
    rng = np.random.default_rng(seed)
    layers = [
        (rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
        for a, b in itertools.pairwise(sizes)
    ]
    obs, _ = envs.reset(seed=seed)

    def sample() -> int:
        nonlocal obs
        for _ in range(rollout_length):
            y = np.asarray(obs, dtype=np.float32)
            for index, (weight, bias) in enumerate(layers):
                y = y @ weight
                y += bias
                if index < len(layers) - 1:
                    np.tanh(y, out=y)
            actions = y.argmax(-1) if discrete else np.clip(y, space.low, space.high)
            obs, *_ = envs.step(actions)
        return rollout_length * num_envs

    return sample


def kuberl_sampler(env_id: str, num_envs: int, rollout_length: int, seed: int, remote: bool = True):
    """A rollout worker's sample(): a remote one's (its policy in numpy), or with `remote` False
    the driver's local worker's (the torch policy)."""
    from kuberl_contract.config import TrainerConfig
    from kuberl_trainer.job.algorithms import policy_class, remote_policy
    from kuberl_trainer.rollouts.rollout_worker import RolloutWorker

    config = TypeAdapter(TrainerConfig).validate_python(
        {
            "algorithm": "PPO",
            "env": env_id,
            "stop": {"timesteps": 10**9},
            "seed": seed,
            "hyperparameters": {"rollout_length": rollout_length, "hidden_sizes": HIDDEN},
        }
    )
    torch_policy = policy_class(config)
    worker = RolloutWorker(
        remote_policy(config) if remote else torch_policy, config, num_envs, seed, cpus=1
    )
    if remote:  # the learner's weights, as a remote worker gets them before its first call
        worker.set_weights(torch_policy(worker.spaces, config, seed).get_weights(), 0)
    return lambda: len(worker.sample())


def kuberl_torch_sampler(env_id: str, num_envs: int, rollout_length: int, seed: int):
    return kuberl_sampler(env_id, num_envs, rollout_length, seed, remote=False)


def rllib_sampler(env_id: str, num_envs: int, rollout_length: int, seed: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    logging.getLogger("ray.rllib").setLevel(logging.ERROR)  # a deprecation warning per runner

    native = gym.registry[env_id].vector_entry_point is not None
    config = (
        PPOConfig()
        .environment(env_id)
        # num_env_runners=0: the runner built here is the local one and owns the envs.
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            gym_env_vectorize_mode=(
                gym.VectorizeMode.VECTOR_ENTRY_POINT if native else gym.VectorizeMode.SYNC
            ),
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=HIDDEN, fcnet_activation="tanh", vf_share_layers=False
            )
        )
        .debugging(seed=seed)
    )
    runner = SingleAgentEnvRunner(config=config)
    steps = rollout_length * num_envs
    # It returns episode chunks; their lengths add up to the env steps taken (>= steps).
    return lambda: sum(len(episode) for episode in runner.sample(num_timesteps=steps))


SAMPLERS = {
    "ceiling": ceiling_sampler,
    "kuberl": kuberl_sampler,
    "kuberl-torch": kuberl_torch_sampler,
    "rllib": rllib_sampler,
}


def measure(sample, seconds: float) -> dict[str, float]:
    """Env steps per second of wall time and per second of this process's CPU time, over whole
    sample() calls lasting at least `seconds`. Other people's jobs on the machine slow the wall
    clock; CPU time counts only what the sampler itself spent, so it is the steadier number."""
    steps, wall, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        steps += sample()
    return {
        "wall": steps / (time.perf_counter() - wall),
        "cpu": steps / (time.process_time() - cpu),
    }


def interleaved_rounds(
    samplers: dict, rounds: int, seconds: float, label: str
) -> dict[str, list[dict[str, float]]]:
    """Each sampler warmed up with two calls, then `measure`d once a round for `rounds` rounds,
    the order rotating so that none always goes first; each round's rates printed after `label`."""
    for sample in samplers.values():  # warm-up: first calls allocate and fill caches
        sample(), sample()
    names = list(samplers)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            runs[name].append(measure(samplers[name], seconds))
        print(
            f"{label} round {r + 1}/{rounds} (wall/cpu steps/s): "
            + "  ".join(f"{n} {runs[n][-1]['wall']:,.0f}/{runs[n][-1]['cpu']:,.0f}" for n in names),
            flush=True,
        )
    return runs


def parse_case(case: str) -> tuple[str, int]:
    """'CartPole-v1:1024' -> ('CartPole-v1', 1024)."""
    env_id, _, num_envs = case.rpartition(":")
    return env_id, int(num_envs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=CASES, help="ENV:ENVS_PER_SAMPLER")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed per sampler per round")
    parser.add_argument(
        "--steps-per-call",
        type=int,
        default=16_384,
        help="env steps per sample() call: each env takes this / ENVS_PER_SAMPLER steps",
    )
    args = parser.parse_args()

    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    for case in args.cases:
        env_id, num_envs = parse_case(case)
        rollout_length = max(1, args.steps_per_call // num_envs)
        samplers = {
            name: make(env_id, num_envs, rollout_length, seed=0) for name, make in SAMPLERS.items()
        }
        runs[case] = interleaved_rounds(samplers, args.rounds, args.seconds, case)

    # Ratios are medians of per-round ratios: a round's samplers ran seconds apart, under about
    # the same load, so the ratio drifts less than the rates do.
    def ratio(a: list[dict], b: list[dict], clock: str) -> float:
        return statistics.median(x[clock] / y[clock] for x, y in zip(a, b, strict=True))

    rows = []
    for case, by_name in runs.items():
        env_id, num_envs = parse_case(case)
        for name, mine in by_name.items():
            wall = [m["wall"] for m in mine]
            row = {"system": name, "env": env_id, "num_envs": num_envs, "runs": mine}
            row |= {"wall_median": statistics.median(wall), "wall_min": min(wall)}
            row |= {"wall_max": max(wall), "cpu_median": statistics.median(m["cpu"] for m in mine)}
            for clock in ("wall", "cpu"):
                row[f"{clock}_vs_ceiling"] = ratio(mine, by_name["ceiling"], clock)
                row[f"{clock}_vs_rllib"] = ratio(mine, by_name["rllib"], clock)
            rows.append(row)
    # RLlib at its best: the number of envs, of those run, at which it sampled this env fastest.
    for row in rows:
        rllib = [r for r in rows if r["system"] == "rllib" and r["env"] == row["env"]]
        best = max(rllib, key=lambda r: r["cpu_median"])
        row["rllib_best_num_envs"] = best["num_envs"]
        row["cpu_vs_rllib_best"] = row["cpu_median"] / best["cpu_median"]

    print(
        f"\n1 torch thread, {args.steps_per_call:,} env steps per call, median of {args.rounds} "
        f"interleaved rounds of {args.seconds:g} s; load average {load_before[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        "| system | env | envs | steps/s wall (min-max) | steps/CPU-s | / ceiling wall (CPU) "
        "| / RLlib wall (CPU) | / RLlib's best CPU (its envs) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['system']} | {r['env']} | {r['num_envs']:,} | {r['wall_median']:,.0f} "
            f"({r['wall_min']:,.0f}-{r['wall_max']:,.0f}) | {r['cpu_median']:,.0f} | "
            f"{r['wall_vs_ceiling']:.2f} ({r['cpu_vs_ceiling']:.2f}) | "
            f"{r['wall_vs_rllib']:.2f}x ({r['cpu_vs_rllib']:.2f}x) | "
            f"{r['cpu_vs_rllib_best']:.2f}x ({r['rllib_best_num_envs']:,}) |"
        )

    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"sampling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {
        "cases": args.cases,
        "hidden": HIDDEN,
        "steps_per_call": args.steps_per_call,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
    }
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
