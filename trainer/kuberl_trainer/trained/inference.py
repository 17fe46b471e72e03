"""Using a trained policy: `load` a run directory, a checkpoint or an exported file and act with it
(`predict`, as Stable-Baselines3's models do), or `evaluate` it on seeded episodes of its env.

    from kuberl_trainer.trained.inference import load

    policy = load("runs/cartpole-ppo")            # its newest checkpoint
    action, _ = policy.predict(obs, deterministic=True)
    print(policy.evaluate(episodes=10, seed=0).summary())
    policy.evaluate(episodes=3, video="cartpole.mp4")  # the episodes recorded too (video.py)

What `load` takes:
- a run directory (`kuberl train`'s `--run-dir`): the newest intact checkpoint in its
  `checkpoints/`;
- a checkpoint location (a folder of `checkpoint-*` folders, or an object store's URI of one, as
  `spec.trainer.checkpoint.uri`): its newest intact checkpoint;
- one checkpoint (`.../checkpoint-00000042`, a folder or an object store's URI);
- a file of `kuberl export` (`.onnx`, `.pt`; export.py).

The policy is the one the job trained, rebuilt from the checkpoint's own copy of the job's
`spec.trainer` (the manifest is not needed) and the spaces it recorded, with its weights and, with
normalization on, the observation statistics frozen as they were saved: acting and evaluating
never update them. Acting makes no env; evaluating makes the job's env, and a file may come from
anyone: an env or wrapper that would run code the file names is made only when the caller trusts
the file (`trust_env_code=True`), and `env=ID` plays the policy on an env the caller names instead
(envs/trust.py says what counts as code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import TypeAdapter, ValidationError

from kuberl_contract.config import PBT, TrainerConfig, with_hyperparameters
from kuberl_trainer.envs.making import make_vector_env
from kuberl_trainer.envs.normalization import make_normalizer
from kuberl_trainer.envs.space_record import SPACES, spaces_from_record
from kuberl_trainer.envs.spaces import encode_obs, space_info
from kuberl_trainer.job.algorithms import policy_class
from kuberl_trainer.job.checkpoint import Checkpoint, checkpoint_named
from kuberl_trainer.job.checkpoint_format import CheckpointError, describe
from kuberl_trainer.job.pbt_rules import best_of
from kuberl_trainer.policies.models import use_float32
from kuberl_trainer.trained.exported import load_exported
from kuberl_trainer.trained.loaded import LoadedPolicy, LoadError, shape_of

_TRAINER_CONFIG = TypeAdapter(TrainerConfig)


OLDER_CHECKPOINT = (
    "it records no observation and action spaces (an older kuberl wrote it), which only its env "
    "can tell, and "
)


class TrainedPolicy(LoadedPolicy):
    """A job's policy as a checkpoint saved it, built from the spaces the checkpoint recorded: it
    acts with no env, and makes envs only to be evaluated. A population's checkpoint (PBT) gives
    its best trial's policy (`trial`: which; None for one policy)."""

    def __init__(
        self, checkpoint: Checkpoint, trust_env_code: bool = False, env: str | None = None
    ):
        self.checkpoint = checkpoint
        self.meta = checkpoint.meta
        trained_on, state, self.trial = policy_in(checkpoint)
        super().__init__(trained_on, trust_env_code, env)
        config = self.config
        self.observation_space, self.action_space = self._trained_spaces()
        self.observation_shape = shape_of(self.observation_space)
        self.spaces = space_info(
            self.observation_space, self.action_space, config.model, config.image_observations
        )
        self.policy = policy_class(config)(self.spaces, config, 0)
        try:
            self.policy.set_state(state["policy"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LoadError(
                f"{self.uri}: its state holds no {config.algorithm} policy: {describe(exc)}"
            ) from None
        # Float32 whatever model.precision chose for training: the policy acts as its exported
        # file does, on any CPU.
        use_float32(self.policy.model)
        if memory := getattr(self.policy, "memory", None):
            self.state_size = memory.model.state_size
        self.normalizer = make_normalizer(config, self.spaces, num_envs=1)
        if "normalization" in state:
            self.normalizer.set_stats(state["normalization"])

    @property
    def uri(self) -> str:
        """The checkpoint's location."""
        return self.checkpoint.uri

    @property
    def trained_as(self) -> str:
        trial = "" if self.trial is None else f" (trial {self.trial}, the best of PBT's)"
        return super().trained_as + trial

    def _trained_spaces(self) -> tuple[gym.Space, gym.Space]:
        """The spaces the checkpoint recorded; for a checkpoint of an older kuberl, which did not
        record them, those of one env of the job, if it may be made."""
        if SPACES in self.meta:
            try:
                return spaces_from_record(self.meta[SPACES])
            except ValueError as exc:
                raise LoadError(f"{self.uri}: its meta's {SPACES}: {exc}") from None
        config = self.env_to_make(why_made=OLDER_CHECKPOINT)
        envs = make_vector_env(config.env, config.env_config, 1, config.wrappers)
        try:
            return envs.single_observation_space, envs.single_action_space
        finally:
            envs.close()

    def _act(self, obs: Any, explore: bool) -> np.ndarray:
        """The actions for a batch of observations as the env returns them."""
        normalized = self.normalizer.normalize_obs(encode_obs(obs, self.spaces))
        actions, _ = self.policy.compute_actions(normalized, explore=explore)
        return actions

    def _step(self, obs: Any, state: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        self.policy.set_memory((state, None))
        actions = self._act(obs, explore)
        return actions, self.policy.get_memory()[0].numpy()


def policy_in(checkpoint: Checkpoint) -> tuple[Any, dict[str, Any], int | None]:
    """The spec.trainer and the state of the policy the checkpoint holds, and which trial's for a
    population (PBT): the best one, ranked as PBT ranks its trials (the mean return of their
    recent episodes), with the hyperparameters it trained with."""
    config = trainer_config(checkpoint)
    if config.algorithm != PBT:
        return config, checkpoint.state, None
    try:
        population, trials = checkpoint.state["population"], checkpoint.state["trials"]
        best = best_of(population["rows"])
        trial = with_hyperparameters(config.trainer, population["overrides"][best])
        return trial, trials[best], best
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise LoadError(
            f"{checkpoint.uri}: its state holds no PBT population: {describe(exc)}"
        ) from None


def trainer_config(checkpoint: Checkpoint) -> Any:
    """The job's `spec.trainer` as the checkpoint recorded it."""
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


def load(path: str | Path, trust_env_code: bool = False, env: str | None = None) -> Any:
    """The policy of a run directory, a checkpoint location or one checkpoint (a TrainedPolicy),
    or of a file `kuberl export` wrote (an ExportedPolicy: greedy only, without kuberl's
    networks). Its env, made only to evaluate it, is the file's when that runs no code the file
    names, or when `trust_env_code`; `env` (a gymnasium id, or a `module:Class` of the caller's)
    is played on instead when given."""
    if Path(str(path)).suffix in EXPORTED_SUFFIXES and Path(str(path)).is_file():
        try:
            return load_exported(path, trust_env_code, env)
        except Exception as exc:  # onnxruntime's and torch.jit's own errors: many kinds
            raise LoadError(f"{path}: not a policy kuberl export wrote ({exc})") from None
    return load_checkpoint(path, trust_env_code, env)


def load_checkpoint(
    path: str | Path, trust_env_code: bool = False, env: str | None = None
) -> TrainedPolicy:
    """The policy of a run directory, a checkpoint location or one checkpoint (see `load`)."""
    return TrainedPolicy(find_checkpoint(path), trust_env_code, env)
