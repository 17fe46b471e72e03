"""EnvPool against the envs kuberl steps: is EnvPool worth offering for Atari or MuJoCo?

Env steps per second of the env alone (random actions, no network), one vector env of N envs
stepped from this process, for each number of envs of --envs and each number of stepping threads
of --threads:

- ALE/Pong-v5: kuberl's env, ale-py's native vector env (`ale_py.vector_env:AtariVectorEnv`, C++
  stepping and preprocessing on its own threads), against EnvPool's `Pong-v5` with the same game
  settings: frame skip 4 with max-pooling, 84x84 grey frames, a stack of 4, sticky actions 0.25,
  FIRE at reset, the whole game an episode (no episodic life) and rewards unclipped.
- HalfCheetah-v5: kuberl's env, gymnasium's envs stepped one by one in this process (MuJoCo has
  no native vector env in gymnasium; --threads does not apply), against EnvPool's
  `HalfCheetah-v5` on as many threads.

Each round times every env once for --seconds, in a rotating order; the table gives medians over
--rounds and EnvPool's rate over kuberl's env's (the median of per-round ratios). EnvPool is not
a dependency of kuberl nor of the bench extra (with its assets it installs some 740 MB):
`pip install envpool` first (1.2.5 was measured).

    python bench/envpool_envs.py [--envs 8 32 64] [--threads 1 2] [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import ale_py
import gymnasium as gym
import numpy as np
from driver_clock import save_results

from kuberl_trainer.envs.making import make_vector_env

try:
    import envpool
except ImportError:  # not a dependency of kuberl, nor of the bench extra (its assets are large)
    raise SystemExit("bench/envpool_envs.py needs EnvPool: pip install envpool") from None

gym.register_envs(ale_py)

PONG, CHEETAH = "ALE/Pong-v5", "HalfCheetah-v5"


def stepper(envs, num_envs: int, seed: int) -> Callable[[], int]:
    """One step of `envs` with random actions; returns the env steps taken. EnvPool's spaces are
    a single env's, gymnasium's vector envs' the batch's."""
    rng = np.random.default_rng(seed)
    space = getattr(envs, "single_action_space", envs.action_space)
    if isinstance(envs, envpool.python.envpool.EnvPoolMixin):
        envs.reset()  # seeded when made
    else:
        envs.reset(seed=seed)
    if isinstance(space, gym.spaces.Discrete):

        def actions() -> np.ndarray:
            return rng.integers(0, space.n, num_envs)
    else:

        def actions() -> np.ndarray:
            return rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32)

    def step() -> int:
        envs.step(actions())
        return num_envs

    return step


def kuberl_env(env: str, num_envs: int, threads: int):
    return make_vector_env(env, {}, num_envs, cpus=threads)


def envpool_env(env: str, num_envs: int, threads: int):
    common = {"num_envs": num_envs, "batch_size": num_envs, "num_threads": threads, "seed": 0}
    if env == PONG:  # ale-py's v5 settings (kuberl's defaults for it), spelled EnvPool's way
        return envpool.make_gymnasium(
            "Pong-v5",
            **common,
            img_height=84,
            img_width=84,
            stack_num=4,
            frame_skip=4,
            repeat_action_probability=0.25,
            episodic_life=False,
            reward_clip=False,
            use_fire_reset=True,
            noop_max=30,
        )
    return envpool.make_gymnasium(env, **common)


def timed(step: Callable[[], int], seconds: float) -> float:
    """Env steps per second of wall time over at least `seconds` of whole steps."""
    start, steps = time.perf_counter(), 0
    while (elapsed := time.perf_counter() - start) < seconds:
        steps += step()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--games", nargs="+", default=[PONG, CHEETAH], choices=[PONG, CHEETAH])
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for env in args.games:
        for threads in args.threads:
            for num_envs in args.envs:
                pair = {"kuberl": kuberl_env(env, num_envs, threads)}
                pair["envpool"] = envpool_env(env, num_envs, threads)
                steps = {name: stepper(e, num_envs, 0) for name, e in pair.items()}
                rates: dict[str, list[float]] = {name: [] for name in steps}
                for r in range(args.rounds):
                    for name in list(steps)[r % 2 :] + list(steps)[: r % 2]:
                        rates[name].append(timed(steps[name], args.seconds))
                for e in pair.values():
                    e.close()
                row = {"env": env, "threads": threads, "num_envs": num_envs, "rates": rates}
                row |= {f"{name}_median": statistics.median(v) for name, v in rates.items()}
                row["envpool_vs_kuberl"] = statistics.median(
                    b / a for a, b in zip(rates["kuberl"], rates["envpool"], strict=True)
                )
                rows.append(row)
                print(
                    f"{env} {num_envs} envs, {threads} thread(s): kuberl's env "
                    f"{row['kuberl_median']:,.0f}/s, EnvPool {row['envpool_median']:,.0f}/s, "
                    f"{row['envpool_vs_kuberl']:.2f}x",
                    flush=True,
                )
    print(
        f"\nEnv steps/s, random actions, median of {args.rounds} rounds of {args.seconds:g} s; "
        f"load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        f" (MuJoCo: kuberl's envs step in this one thread whatever --threads)\n"
    )
    print("| env | envs | threads | kuberl's env | EnvPool | EnvPool / kuberl's |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['env']} | {r['num_envs']} | {r['threads']} | {r['kuberl_median']:,.0f} | "
            f"{r['envpool_median']:,.0f} | {r['envpool_vs_kuberl']:.2f}x |"
        )
    meta = vars(args) | {"loadavg_before": load_before, "envpool": envpool.__version__}
    path = save_results("envpool-envs", meta, {"rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
