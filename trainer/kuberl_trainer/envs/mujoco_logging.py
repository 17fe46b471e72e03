"""MuJoCo's warnings sent to Python's logging. MuJoCo prints them to stderr and appends them to
MUJOCO_LOG.TXT in the working directory by default: mujoco 4.0 warns on every HalfCheetah-v5 it
compiles (gymnasium's model uses the deprecated `settotalmass`), so each `kuberl validate` and each
env a worker made would write a file beside the user's manifests."""

from __future__ import annotations

import logging

import gymnasium as gym

logger = logging.getLogger("kuberl.mujoco")

_routed = False


def route_warnings(env: str) -> None:
    """Send MuJoCo's warnings to logging once `env` is one of gymnasium's MuJoCo envs:
    deprecations at debug level, anything else (an unstable simulation) as a warning."""
    global _routed
    spec = gym.registry.get(env)
    if _routed or spec is None or not str(spec.entry_point).startswith("gymnasium.envs.mujoco"):
        return
    import mujoco

    def warn(message: str) -> None:
        level = logging.DEBUG if "deprecated" in message else logging.WARNING
        logger.log(level, "MuJoCo: %s", message.strip())

    mujoco.set_mju_user_warning(warn)
    _routed = True
