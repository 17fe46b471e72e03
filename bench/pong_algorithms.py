"""Pong from pixels with kuberl's three candidates for it, PPO, IMPALA and APPO, side by side in
one run: which learns fastest on this machine.

Each runs its example unchanged but for the wall time (deploy/examples/pong-ppo.yaml,
pong-impala.yaml, pong-appo.yaml: spec.trainer and spec.rolloutWorkers), in a child process of
its own, one after the other with the whole machine, and is stopped --minutes after its start
(imports, Ray's start and its rollout worker's included). Each child prints a line per training
iteration (time, env steps, the mean return of the last 100 games); the parent tabulates the
return each had reached every 5 minutes, with its env steps, and draws the curves in one figure.

    python bench/pong_algorithms.py [--minutes 20] [--seed 0] [--only ppo,impala,appo]
"""

import time

CHILD_START = time.time()  # a child's imports are inside its measured time

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

from async_vs_rllib import emit, finite  # noqa: E402
from pong_race import race, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("ppo", "impala", "appo")


def example(system: str) -> Path:
    return ROOT / "deploy" / "examples" / f"pong-{system}.yaml"


def run_example(system: str, seed: int, seconds: float) -> None:
    """The example's trainer and rollout workers, with this run's seed and what is left of its
    wall time after the imports."""
    from driver_clock import IterationClock, run_driver

    from kuberl_operator.spec import RLJob
    from kuberl_operator.validation import parse_yaml_document, read_manifest_file

    job = RLJob.model_validate(parse_yaml_document(read_manifest_file(example(system))))
    trainer = job.spec.trainer
    left = max(1, int(seconds - (time.time() - CHILD_START)))
    stop = trainer.stop.model_copy(update={"wall_time_seconds": left})
    checkpoint = trainer.checkpoint.model_copy(update={"every_iterations": 10**9})
    config = trainer.model_copy(update={"seed": seed, "stop": stop, "checkpoint": checkpoint})

    def tick(t) -> None:
        emit(
            "TICK", {"time": t.time, "steps": t.timesteps, "return": finite(t.episode_return_mean)}
        )

    run_driver(config, job.spec.rollout_workers, IterationClock(on_tick=tick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=SYSTEMS)
    parser.add_argument("--only", default=",".join(SYSTEMS))
    args = parser.parse_args()
    if args.child:
        run_example(args.child, args.seed, args.minutes * 60)
        return

    systems = tuple(s for s in args.only.split(",") if s)
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}; one of {', '.join(SYSTEMS)}")
    name = f"pong-algorithms-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = race(systems, args, name, script=__file__)
    title = "Pong on 2 cores: kuberl's PPO, IMPALA and APPO examples"
    report(runs, systems, args, name, title, steps_table=True)


if __name__ == "__main__":
    main()
