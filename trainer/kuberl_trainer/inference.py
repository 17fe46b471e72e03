"""Using a trained policy: `load` a run directory or a checkpoint and act with it (`predict`, as
Stable-Baselines3's models do), or `evaluate` it on seeded episodes of its env.

    from kuberl_trainer.inference import load

    policy = load("runs/cartpole-ppo")            # its newest checkpoint
    action, _ = policy.predict(obs, deterministic=True)
    print(policy.evaluate(episodes=10, seed=0).summary())
    policy.evaluate(episodes=3, video="cartpole.mp4")  # the episodes recorded too (video.py)

What `load` takes:
- a run directory (`kuberl train`'s `--run-dir`): the newest intact checkpoint in its
  `checkpoints/`;
- a checkpoint location (a folder of `checkpoint-*` folders, or an object store's URI of one, as
  `spec.trainer.checkpoint.uri`): its newest intact checkpoint;
- one checkpoint (`.../checkpoint-00000042`, a folder or an object store's URI).

The policy is the one the job trained, rebuilt from the checkpoint's own copy of the job's
`spec.trainer` (the manifest is not needed) with its weights and, with normalization on, the
observation statistics frozen as they were saved: acting and evaluating never update them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter, ValidationError

from kuberl_trainer.algorithms import policy_class
from kuberl_trainer.checkpoint import Checkpoint, checkpoint_named
from kuberl_trainer.checkpoint_format import CheckpointError
from kuberl_trainer.config import PBT, TrainerConfig
from kuberl_trainer.envs import encode_obs
from kuberl_trainer.errors import InvalidJobError
from kuberl_trainer.models import use_float32
from kuberl_trainer.rollout_worker import RolloutWorker
from kuberl_trainer.video import Recording, Video

_TRAINER_CONFIG = TypeAdapter(TrainerConfig)


class LoadError(InvalidJobError):
    """What was named holds no policy kuberl can load, and why."""


@dataclass(frozen=True)
class Evaluation:
    """Whole episodes of a policy on its env, each on an env of its own, seeded."""

    returns: np.ndarray
    lengths: np.ndarray
    seed: int
    deterministic: bool
    video: Video | None = None  # when the episodes were recorded

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": len(self.returns),
            "return_mean": self.mean,
            "return_std": self.std,
            "length_mean": float(np.mean(self.lengths)),
            "seed": self.seed,
            "deterministic": self.deterministic,
            "returns": [float(r) for r in self.returns],
            "lengths": [int(n) for n in self.lengths],
            **({"video": self.video.as_dict()} if self.video is not None else {}),
        }

    def summary(self) -> str:
        mode = "greedy" if self.deterministic else "stochastic"
        return (
            f"return {self.mean:.2f} ± {self.std:.2f} over {len(self.returns)} {mode} episodes "
            f"(seed {self.seed}), mean length {np.mean(self.lengths):.1f}"
        )


class Provenance:
    """Where a loaded policy comes from, from its `meta`: the checkpoint's (a TrainedPolicy's),
    or the metadata an exported file carries, which copies it."""

    meta: dict[str, Any]
    config: Any

    @property
    def iteration(self) -> int:
        return int(self.meta["iteration"])

    @property
    def timesteps(self) -> int:
        return int(self.meta["timesteps"])

    @property
    def uri(self) -> str:
        """The checkpoint's location."""
        return self.meta["checkpoint"]

    def describe(self) -> str:
        """`PPO on CartPole-v1, iteration 60, 15,172 env steps (CHECKPOINT)`."""
        return (
            f"{self.config.algorithm} on {self.config.env}, iteration {self.iteration}, "
            f"{self.timesteps:,} env steps ({self.uri})"
        )


class TrainedPolicy(Provenance):
    """A job's policy as a checkpoint saved it, with an env of the job's to know its spaces."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        self.meta = checkpoint.meta
        self.config = trainer_config(checkpoint)
        # One env: the spaces, and what predict() checks observations against. Evaluation makes
        # envs of its own.
        self.worker = RolloutWorker(policy_class(self.config), self.config, num_envs=1, seed=0)
        self.worker.policy.set_state(checkpoint.state["policy"])
        # Float32 whatever model.precision chose for training: the policy acts as its exported
        # file does, on any CPU.
        use_float32(self.worker.policy.model)
        if "normalization" in checkpoint.state:
            self.worker.normalizer.set_stats(checkpoint.state["normalization"])
        self.observation_space = self.worker.envs.single_observation_space
        self.action_space = self.worker.envs.single_action_space

    @property
    def uri(self) -> str:
        """The checkpoint's location."""
        return self.checkpoint.uri

    def predict(self, obs: Any, deterministic: bool = True) -> tuple[np.ndarray, None]:
        """Actions for one observation or a batch of them (a leading axis), as Stable-Baselines3's
        `predict`: the greedy ones by default (the distribution's mode, DQN's argmax, SAC's
        squashed mean), sampled with `deterministic=False`. Returns `(actions, None)`: the
        second item is SB3's recurrent state, which kuberl's policies do not have."""
        obs = np.asarray(obs)
        single_shape = self.observation_space.shape
        single = obs.shape == single_shape
        if not single and obs.shape[1:] != single_shape:
            raise ValueError(
                f"predict: an observation of {self.config.env} has shape {single_shape} (a "
                f"batch of N: {(-1, *single_shape)} with N for -1), got {obs.shape}"
            )
        batch = obs[None] if single else obs
        normalized = self.worker.normalizer.normalize_obs(encode_obs(batch, self.worker.spaces))
        actions, _ = self.worker.acting_policy.compute_actions(
            normalized, explore=not deterministic
        )
        return (actions[0] if single else actions), None

    def evaluate(
        self,
        episodes: int = 10,
        seed: int = 0,
        deterministic: bool = True,
        video: str | Path | None = None,
        video_episodes: int | None = None,
    ) -> Evaluation:
        """`episodes` whole episodes, env k seeded with `seed + k`: the same arguments give the
        same episodes. With `video` (.mp4 or .gif), the first `video_episodes` (default: all, at
        most 10) are recorded there, on envs that render (see video.py; a RecordingError where
        the env cannot render)."""
        if episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {episodes}")
        explore = not deterministic
        if video is None:
            returns, lengths = self.worker.evaluation_episodes(episodes, seed, explore=explore)
            return Evaluation(returns, lengths, seed, deterministic)
        shape = self.observation_space.shape
        with Recording(video, self.config, episodes, video_episodes, shape) as recording:
            returns, lengths = self.worker.evaluation_episodes(
                episodes, seed, explore, envs=recording.envs, observe=recording.record
            )
            return Evaluation(returns, lengths, seed, deterministic, video=recording.save())

    def close(self) -> None:
        self.worker.close()


def trainer_config(checkpoint: Checkpoint) -> Any:
    """The job's `spec.trainer` as the checkpoint recorded it."""
    if checkpoint.meta.get("algorithm") == PBT:
        raise LoadError(
            f"{checkpoint.uri}: a PBT checkpoint holds a population of policies, which kuberl "
            "cannot load as one yet"
        )
    try:
        return _TRAINER_CONFIG.validate_python(checkpoint.meta["config"])
    except (KeyError, ValidationError) as exc:
        raise LoadError(f"{checkpoint.uri}: its meta holds no valid spec.trainer ({exc})") from None


def find_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint that `path` names (see the module's docstring), or a LoadError."""
    try:
        return checkpoint_named(str(path))
    except CheckpointError as exc:
        raise LoadError(str(exc)) from None


EXPORTED_SUFFIXES = (".onnx", ".pt")
"""Files of `kuberl export`, which `load` loads too."""


def load(path: str | Path) -> Any:
    """The policy of a run directory, a checkpoint location or one checkpoint (a TrainedPolicy),
    or of a file `kuberl export` wrote (an ExportedPolicy: greedy only, without kuberl's
    networks)."""
    if Path(str(path)).suffix in EXPORTED_SUFFIXES and Path(str(path)).is_file():
        from kuberl_trainer.export import load_exported  # it builds on this module

        try:
            return load_exported(path)
        except Exception as exc:  # onnxruntime's and torch.jit's own errors: many kinds
            raise LoadError(f"{path}: not a policy kuberl export wrote ({exc})") from None
    return load_checkpoint(path)


def load_checkpoint(path: str | Path) -> TrainedPolicy:
    """The policy of a run directory, a checkpoint location or one checkpoint."""
    return TrainedPolicy(find_checkpoint(path))
