"""Atari sampling throughput per worker: kuberl's RolloutWorker against RLlib's env runner.

Env steps per second of ONE worker's sampling of ALE/Pong-v5 (frame skip 4 with max-pooling,
84x84 grey frames, a stack of 4, the v5 defaults otherwise: sticky actions 0.25, minimal action
set, 30 no-ops and FIRE at reset), choosing every step's actions with one batched forward pass of
the Nature CNN (conv [32,8,4], [64,4,2], [64,3,1], a 512-unit dense layer, policy/value heads),
in this one process, for each number of envs of --envs and each number of CPUs a worker has of
--cpus (1 and 2 by default): as many torch threads on both sides, and what each system does
with a worker's CPUs besides:

- kuberl:         RolloutWorker.sample() of a PPO job of a worker with C CPUs (cpus, as a
                  remote worker of cpusPerWorker C gets them): ale-py's native vector env (C++
                  stepping and preprocessing, uint8 stacks) on as many stepping threads (its
                  default for such a worker), actions, episode bookkeeping, and the GAE
                  postprocessing of the batch, which needs the critic's value of every observation.
                  Its CNN computes as model.precision's default has it: in bfloat16 on a CPU with
                  native bfloat16, where "kuberl float32" is the same sampler in float32.
- rllib:          RLlib 2.60's SingleAgentEnvRunner (new API stack) from a PPOConfig with
                  num_env_runners=0 and num_cpus_per_env_runner C, built and sampled here
                  without Ray actors (C torch threads, as Ray's OMP_NUM_THREADS gives an actor):
                  RLlib's Atari recipe (`wrap_atari_for_new_api_stack(gym.make(id,
                  frameskip=1), dim=84, framestack=4)`, as its tuned Atari examples make the env,
                  so that its MaxAndSkipEnv skips the frames) in gymnasium's SyncVectorEnv
                  (RLlib's default `gym_env_vectorize_mode`), the Nature CNN as RLlib's default
                  CNN encoder: valid-padded convolutions ending in a [512, 7, 1] one, the dense
                  layer as a 7x7 convolution of the 7x7 maps, and linear heads on the shared 512
                  features.
- rllib async:    with C > 1 only, the same runner with gym_env_vectorize_mode "async": RLlib's way
                  to spread a runner's envs over CPUs (gymnasium's AsyncVectorEnv, a process per
                  env). Its CPU rate counts this process only, not the env processes.

Beside them, the parts of a step, so that one can say where the time goes:

- kuberl envs:    `worker.envs.step` with random actions (the worker's env, no network at all).
- kuberl forward: `worker.acting_policy.compute_actions` of the worker's current observations
                  (the acting forward pass and the action sampling, no env).
- kuberl postprocess: the policy's `postprocess_trajectory` of a rollout the worker sampled
                  (the critic's forward pass over every observation, log-probabilities, GAE).
- rllib random:   the RLlib runner's `sample(random_actions=True)`: its envs and its episode
                  bookkeeping and connectors, without the module's forward pass.
- rllib forward:  the RLlib module's `forward_exploration` of N observations (no env).

The machine is shared, so each round times every sampler once, in a rotating order, for at least
--seconds of whole calls, and the table shows medians over rounds; ratios are medians of per-round
ratios. Two untimed calls warm every sampler up. Rates are per second of wall time and per second
of this process's CPU time (ale-py's stepping threads included).

    python bench/atari_sampling.py [--envs 8 32 64] [--cpus 1 2] [--rounds 3] [--seconds 3]
        [--steps-per-call 1024]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import warnings

import torch

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # nothing here starts Ray; in case it does

import ale_py
import gymnasium as gym
import numpy as np
from driver_clock import save_results
from pydantic import TypeAdapter
from sampling import interleaved_rounds

gym.register_envs(ale_py)

ENV = "ALE/Pong-v5"
# The Nature CNN in RLlib 2.60's default encoder: its conv stack pads "same" unless told
# otherwise, and a [512, 7, 1] valid convolution of the 7x7x64 maps is the 3136 -> 512 dense
# layer, followed by the stack's ReLU; the heads (no hidden layers) then read the 512 features.
RLLIB_CONV_FILTERS = [
    [32, 8, 4, "valid"],
    [64, 4, 2, "valid"],
    [64, 3, 1, "valid"],
    [512, 7, 1, "valid"],
]


def with_threads(threads: int, sample):
    """`sample` run with `threads` torch threads: the process's count is global, and the samplers
    of workers of different CPUs take turns in it."""

    def run() -> int:
        torch.set_num_threads(threads)
        return sample()

    return run


def kuberl_samplers(
    num_envs: int, steps_per_call: int, seed: int, cpus: int, precision: str = "auto"
):
    """kuberl's sample() and its parts, on one RolloutWorker of `cpus` CPUs whose CNN computes in
    `precision` (model.precision)."""
    from kuberl_contract.config import TrainerConfig
    from kuberl_trainer.envs.making import episode_steps
    from kuberl_trainer.envs.spaces import encode_obs
    from kuberl_trainer.job.algorithms import policy_class
    from kuberl_trainer.rollouts.rollout_worker import RolloutWorker

    rollout_length = max(1, steps_per_call // num_envs)
    config = TypeAdapter(TrainerConfig).validate_python(
        {
            "algorithm": "PPO",
            "env": ENV,
            "stop": {"timesteps": 10**9},
            "seed": seed,
            "hyperparameters": {"rollout_length": rollout_length},
            "model": {"precision": precision},
        }
    )
    worker = RolloutWorker(policy_class(config), config, num_envs, seed, cpus=cpus)
    policy = worker.acting_policy
    # One rollout as sample() hands it to the policy, kept for the postprocess sampler.
    rollouts: list[dict[str, np.ndarray]] = []
    postprocess = policy.postprocess_trajectory

    def keep_rollout(rollout):
        if not rollouts:
            rollouts.append(rollout)
        return postprocess(rollout)

    policy.postprocess_trajectory = keep_rollout
    worker.sample()
    del policy.postprocess_trajectory  # the class's method again

    envs = worker.envs
    random_actions = np.random.default_rng(seed).integers

    def env_steps() -> int:
        for _ in range(rollout_length):
            obs, rewards, terminated, truncated, info = envs.step(
                random_actions(envs.single_action_space.n, size=num_envs)
            )
        # The worker's next sample() goes on from where its envs are: tell it where that is.
        worker.obs = encode_obs(obs, worker.spaces)
        worker.resetting = episode_steps(rewards, terminated, truncated, info)[1]
        return rollout_length * num_envs

    def forward() -> int:
        for _ in range(rollout_length):
            policy.compute_actions(worker.obs)
        return rollout_length * num_envs

    def postprocessing() -> int:
        postprocess(rollouts[0])
        return rollout_length * num_envs

    samplers = {
        "kuberl": lambda: worker.sample().env_steps,
        "kuberl envs": env_steps,
        "kuberl forward": forward,
        "kuberl postprocess": postprocessing,
    }
    return {name: with_threads(cpus, sample) for name, sample in samplers.items()}


def rllib_samplers(num_envs: int, steps_per_call: int, seed: int, cpus: int):
    """RLlib's SingleAgentEnvRunner.sample() and its parts, on one runner of `cpus` CPUs; with
    more than one, also a runner that steps its envs in processes of their own."""
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    logging.getLogger("ray.rllib").setLevel(logging.ERROR)  # a deprecation warning per runner
    # Every runner registers its env creator under the same gymnasium id, and says so.
    warnings.filterwarnings("ignore", message=".*Overriding environment rllib-single-agent-env")

    # RLlib's tuned Atari examples: frameskip=1 on the ALE env, the wrapper's MaxAndSkipEnv
    # skipping 4; here its FrameStack stacks 4 (they stack in a connector instead, the same work).
    tune.register_env(
        "atari-sampling-pong",
        lambda cfg: wrap_atari_for_new_api_stack(gym.make(ENV, **cfg), dim=84, framestack=4),
    )
    config = (
        PPOConfig()
        .environment("atari-sampling-pong", env_config={"frameskip": 1}, clip_rewards=True)
        # num_env_runners=0: the runner built here is the local one and owns the envs.
        .env_runners(
            num_env_runners=0, num_envs_per_env_runner=num_envs, num_cpus_per_env_runner=cpus
        )
        .rl_module(
            model_config=DefaultModelConfig(
                conv_filters=RLLIB_CONV_FILTERS,
                conv_activation="relu",
                head_fcnet_hiddens=[],
                vf_share_layers=True,
            )
        )
        .debugging(seed=seed)
    )
    runner = SingleAgentEnvRunner(config=config)
    # Its own runner: an episode that mixes steps with and without the module's outputs fails
    # RLlib's validation.
    random_runner = SingleAgentEnvRunner(config=config)
    if cpus > 1:
        async_config = config.copy(copy_frozen=False).env_runners(gym_env_vectorize_mode="async")
        async_runner = SingleAgentEnvRunner(config=async_config)

    def sample(on: SingleAgentEnvRunner, random_actions: bool) -> int:
        episodes = on.sample(num_timesteps=steps_per_call, random_actions=random_actions)
        # Episode chunks; their lengths add up to the env steps taken (>= steps_per_call).
        return sum(len(episode) for episode in episodes)

    space = runner.env.single_observation_space
    obs = torch.from_numpy(
        np.random.default_rng(seed)
        .uniform(space.low, space.high, (num_envs, *space.shape))
        .astype(np.float32)
    )
    rollout_length = max(1, steps_per_call // num_envs)

    def forward() -> int:
        with torch.inference_mode():
            for _ in range(rollout_length):
                runner.module.forward_exploration({Columns.OBS: obs})
        return rollout_length * num_envs

    samplers = {
        "rllib": lambda: sample(runner, False),
        "rllib random": lambda: sample(random_runner, True),
        "rllib forward": forward,
    }
    if cpus > 1:
        samplers["rllib async"] = lambda: sample(async_runner, False)
    return {name: with_threads(cpus, sample) for name, sample in samplers.items()}


RLLIB_SAMPLE = ("rllib", "rllib async")
"""RLlib's whole sample() in each way it may step its envs: the ratios take its faster one."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 32, 64], help="per worker")
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2], help="per worker")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed per sampler per round")
    parser.add_argument(
        "--steps-per-call",
        type=int,
        default=1024,
        help="env steps per sample() call: each env takes this / ENVS steps (kuberl's "
        "rollout_length)",
    )
    args = parser.parse_args()

    from kuberl_trainer.policies.models import native_bfloat16_cpu

    load_before = os.getloadavg()
    runs: dict[tuple[int, int], dict[str, list[dict[str, float]]]] = {}
    for cpus in args.cpus:
        for num_envs in args.envs:
            samplers = kuberl_samplers(num_envs, args.steps_per_call, 0, cpus)
            if native_bfloat16_cpu():  # the default computes in bfloat16: float32 beside it
                float32 = kuberl_samplers(num_envs, args.steps_per_call, 0, cpus, "float32")
                samplers["kuberl float32"] = float32["kuberl"]
            samplers |= rllib_samplers(num_envs, args.steps_per_call, 0, cpus)
            runs[cpus, num_envs] = interleaved_rounds(
                samplers, args.rounds, args.seconds, f"{cpus} CPU(s), {num_envs} envs,"
            )
            del samplers  # the envs of both sides, before the next case makes more

    # Ratios are medians of per-round ratios: a round's samplers ran seconds apart, under about
    # the same load, so the ratio drifts less than the rates do. RLlib's sample() is, in each
    # round, the faster of its ways to step the envs.
    def ratio(a: list[dict], b: list[dict], clock: str) -> float:
        return statistics.median(x[clock] / y[clock] for x, y in zip(a, b, strict=True))

    rows = []
    for (cpus, num_envs), by_name in runs.items():
        rllib_rounds = zip(
            *(by_name[name] for name in RLLIB_SAMPLE if name in by_name), strict=True
        )
        rllib = [max(round_, key=lambda m: m["wall"]) for round_ in rllib_rounds]
        for name, mine in by_name.items():
            wall = [m["wall"] for m in mine]
            whole = name if name in ("kuberl float32", *RLLIB_SAMPLE) else name.split()[0]
            row = {"sampler": name, "cpus": cpus, "num_envs": num_envs, "runs": mine}
            row |= {"wall_median": statistics.median(wall), "wall_min": min(wall)}
            row |= {"wall_max": max(wall), "cpu_median": statistics.median(m["cpu"] for m in mine)}
            for clock in ("wall", "cpu"):
                row[f"{clock}_vs_rllib"] = ratio(mine, rllib, clock)
                # A part's share of its system's sample() time per env step (CPU clock).
                row[f"{clock}_share"] = ratio(by_name[whole], mine, clock)
            rows.append(row)

    print(
        f"\n{ENV}, kuberl's CNN in "
        f"{'bfloat16 (kuberl float32: in float32)' if native_bfloat16_cpu() else 'float32'}, "
        f"{args.steps_per_call:,} env steps per call, median of {args.rounds} interleaved rounds "
        f"of {args.seconds:g} s; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs. / RLlib: against the faster of rllib and rllib async.\n"
    )
    print(
        "| sampler | CPUs | envs | steps/s wall (min-max) | steps/CPU-s | / RLlib wall (CPU) "
        "| share of its sample() wall (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['sampler']} | {r['cpus']} | {r['num_envs']} | {r['wall_median']:,.0f} "
            f"({r['wall_min']:,.0f}-{r['wall_max']:,.0f}) | {r['cpu_median']:,.0f} | "
            f"{r['wall_vs_rllib']:.2f}x ({r['cpu_vs_rllib']:.2f}x) | "
            f"{r['wall_share']:.0%} ({r['cpu_share']:.0%}) |"
        )

    meta = {
        "env": ENV,
        "envs": args.envs,
        "cpus": args.cpus,
        "steps_per_call": args.steps_per_call,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "rllib_conv_filters": RLLIB_CONV_FILTERS,
        "loadavg_before": load_before,
        "gymnasium": gym.__version__,
        "ale_py": ale_py.__version__,
        "native_bfloat16_cpu": native_bfloat16_cpu(),
    }
    path = save_results("atari-sampling", meta, {"rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
