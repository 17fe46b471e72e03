"""Atari through ale-py: its `ALE/*` ids registered on first use, and its native vector env
(`ale_py.vector_env:AtariVectorEnv`: C++ stepping on threads of its own, with the standard
preprocessing, returning uint8 (N, stack, 84, 84) frame stacks) made so that the episode
statistics are the full game's, as RLlib and Stable-Baselines3 report them:

- rewards: the env is made without ale-py's reward clipping, which is done here instead
  (`reward_clipping`, true by default as in ale-py), so the learner sees clipped rewards and the
  statistics the game's score (`RAW_REWARD` in the step's info);
- lives: with `life_loss_info: true`, ale-py ends an episode at every lost life and goes on with
  the same game; those ends are marked (`LIFE_LOST`), so the learner bootstraps nothing across a
  lost life (the DQN paper's setting) while the statistics and the envs go on to the game's end.
  (`episodic_life: true` instead resets the game at the first lost life: each life is then an
  episode of its own, statistics included.)

`rendering_env` makes one env of an `ALE/*` id that renders frames (the vector env cannot), with
the same preprocessing built from gymnasium's wrappers: what a recorded evaluation plays on.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

from kuberl_trainer.cpu_quota import usable_cpus

NAMESPACE = "ALE/"
LEGACY_ID = re.compile(r"(?P<game>[A-Z][A-Za-z]*?)(?:NoFrameskip|Deterministic)?-v[045]")

RAW_REWARD = "raw_reward"
"""Info key of a vector env's step: each env's reward before clipping, which the episode
statistics sum."""

LIFE_LOST = "life_lost"
"""Info key of a vector env's step: envs whose episode ended (terminated) at a lost life while
their game goes on: the next step is no reset, and the statistics' episode has not ended."""


def register(env: str) -> None:
    """Make ale-py's ids known to gymnasium when `env` is one (ale-py registers them when
    imported; without ale-py installed, the id stays unknown and is reported as such)."""
    if not env.startswith(NAMESPACE) or env in gym.registry:
        return
    try:
        import ale_py
    except ImportError:
        return
    gym.register_envs(ale_py)


def legacy_suggestion(env: str) -> str | None:
    """For gym's old Atari ids (`PongNoFrameskip-v4`, `Pong-v4`, or `Pong-v5` without the
    namespace), what to write instead: the `ALE/` id kuberl makes, and the envConfig that gives
    the v4 ids' behaviour; None for any other id."""
    match = LEGACY_ID.fullmatch(env)
    if match is None:
        return None
    try:
        from ale_py.roms import get_all_rom_ids
    except ImportError:
        return None
    game = match["game"]
    if re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower() not in get_all_rom_ids():
        return None
    return (
        f"; did you mean '{NAMESPACE}{game}-v5'? kuberl makes ale-py's v5 ids (frame skip 4 with "
        "max-pooling, sticky actions at 0.25); for the v4 ids' behaviour add envConfig "
        "{repeat_action_probability: 0.0}"
    )


def is_atari_vector(env: str) -> bool:
    """Whether gymnasium makes `env` natively vectorized with ale-py's vector env."""
    spec = gym.registry.get(env)
    return spec is not None and str(spec.vector_entry_point or "").startswith("ale_py")


def make_atari_vector_env(
    env: str, env_config: dict[str, Any], num_envs: int, cpus: int | None = None
) -> gym.vector.VectorEnv:
    """ale-py's vector env for `env` with `env_config`, its rewards clipped here (see above),
    stepping on `cpus` threads (every CPU this process may use when None) unless envConfig says
    `num_threads`: ale-py's own default is a thread per core of the machine, which on a cluster
    node gives a worker of one CPU dozens of threads that take turns on it."""
    config = dict(env_config)
    clipping = bool(config.pop("reward_clipping", True))
    config.setdefault("num_threads", max(1, min(num_envs, cpus or usable_cpus())))
    envs = gym.make_vec(
        env,
        num_envs,
        vectorization_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
        reward_clipping=False,
        **config,
    )
    if envs.metadata.get("autoreset_mode") != gym.vector.AutoresetMode.NEXT_STEP:
        envs.close()  # rollout workers step every vector env with next-step autoreset
        raise ValueError(f"autoreset_mode must be NextStep, not {config['autoreset_mode']!r}")
    return FullGameStatistics(envs, clipping, bool(config.get("life_loss_info", False)))


class FullGameStatistics(gym.vector.VectorWrapper):
    """Rewards clipped to their sign when `clipping`, the game's own in info[RAW_REWARD]; with
    `life_loss`, info[LIFE_LOST] marks the terminations at a lost life. (Also any seed taken.)"""

    def __init__(self, env: gym.vector.VectorEnv, clipping: bool, life_loss: bool):
        super().__init__(env)
        self.clipping = clipping
        self.life_loss = life_loss

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """As the env's, with `seed` brought below 2^31: ale-py seeds env k with seed + k as a
        C int, and kuberl's seeds go up to 2^32 (a resumed run's workers draw new ones)."""
        if isinstance(seed, int | np.integer):
            seed = int(seed) % (2**31 - self.num_envs)
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: np.ndarray):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        raw = np.asarray(rewards, dtype=np.float32)
        info = {**info, RAW_REWARD: raw}
        if self.life_loss:
            info[LIFE_LOST] = terminated & (np.asarray(info["lives"]) > 0)
        return obs, np.sign(raw) if self.clipping else raw, terminated, truncated, info


_VECTOR_ENV_ONLY = (
    "num_threads",
    "batch_size",
    "thread_affinity_offset",
    "autoreset_mode",
    "maxpool",  # AtariPreprocessing always max-pools the last two frames
    "reward_clipping",  # the statistics sum the game's own rewards either way
    "life_loss_info",  # the learner's terminations: the statistics' episodes are whole games
)
"""envConfig keys of ale-py's vector env that the single env and its wrappers have no use for."""


def rendering_env(env: str, env_config: dict[str, Any]) -> gym.Env:
    """One env of an `ALE/*` id that renders, with the observations the policy was trained on:
    the preprocessing of ale-py's vector env (frame skip with max-pooling, 84x84 grey frames, no-ops
    and FIRE at reset, a stack of 4) built from gymnasium's AtariPreprocessing and
    FrameStackObservation, set from the job's envConfig as the vector env reads it."""
    settings = {key: value for key, value in env_config.items() if key not in _VECTOR_ENV_ONLY}
    frame_skip = settings.pop("frameskip", gym.spec(env).kwargs.get("frameskip", 4))
    stack_size = settings.pop("stack_num", 4)
    screen_size = (settings.pop("img_width", 84), settings.pop("img_height", 84))
    grayscale = settings.pop("grayscale", True)
    noop_max = settings.pop("noop_max", 30)
    episodic_life = settings.pop("episodic_life", False)
    fire_reset = settings.pop("use_fire_reset", True)
    # The game itself skips no frames: AtariPreprocessing skips them, max-pooling the last two.
    game = gym.make(env, frameskip=1, render_mode="rgb_array", **settings)
    game = gym.wrappers.AtariPreprocessing(
        game,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=episodic_life,
        grayscale_obs=grayscale,
    )
    if fire_reset and "FIRE" in game.unwrapped.get_action_meanings():
        game = FireOnReset(game)
    return gym.wrappers.FrameStackObservation(game, stack_size)


class FireOnReset(gym.Wrapper):
    """FIRE once after every reset, as ale-py's vector env does (`use_fire_reset`): the games that
    need it to start (Breakout's ball) start."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self._fire)
        if terminated or truncated:
            return self.env.reset(**kwargs)
        return obs, info

    @property
    def _fire(self) -> int:
        return self.env.unwrapped.get_action_meanings().index("FIRE")
