"""An exported policy's file (export.py writes it): its formats, names and metadata, and the file
loaded back with its runtime (onnxruntime, or torch.jit), acting as `TrainedPolicy.predict` does,
greedy only.

    policy = load_exported("cartpole.onnx")   # or inference.load, which takes any policy
    action, _ = policy.predict(obs)

Acting needs only the file: the observations' shape and dtype are in its metadata, with the
spaces the policy was trained on. Evaluating makes the env of the job's spec.trainer, which the
metadata copies, under the rules of any file (see inference.py's LoadedPolicy and env_trust.py).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pydantic import TypeAdapter

from kuberl_contract.config import TrainerConfig
from kuberl_trainer.envs.encoding import encode_structured
from kuberl_trainer.envs.space_record import SPACES, spaces_from_record
from kuberl_trainer.trained.loaded import LoadedPolicy, shape_of

OPSET = 18
FORMATS = {".onnx": f"ONNX opset {OPSET}", ".pt": "TorchScript"}
"""The file suffixes `export` writes, and what each one is."""
METADATA_FILE = "kuberl.json"
"""The TorchScript module's extra file that holds the metadata."""
INPUT, OUTPUT = "obs", "actions"
STATE_INPUT, STATE_OUTPUT, STATE_SIZE = "state", "next_state", "state_size"
"""A recurrent policy's graph also takes the lanes' memory, (batch, state_size) float32, and gives
the next one (zeros: an episode's start); the metadata's state_size says how wide it is."""
OBS_ENCODING, FLAT = "obs_encoding", "flat"
"""The metadata key saying the graph takes a structured space's flat encoding (envs/encoding.py),
and its value."""
GREEDY_ONLY = (
    "an exported policy is greedy only: it holds the distribution's mode, not the distribution; "
    "sample with the checkpoint it was exported from instead"
)

_TRAINER_CONFIG = TypeAdapter(TrainerConfig)

Runner = Callable[..., Any]
"""An exported file's actions for a batch of observations; a recurrent policy's file takes the
memory too and gives (actions, next memory)."""


def check_suffix(path: Path) -> str:
    """The export format's suffix of `path`; ValueError naming the accepted ones otherwise."""
    if path.suffix not in FORMATS:
        accepted = ", ".join(f"{suffix} ({name})" for suffix, name in FORMATS.items())
        raise ValueError(f"{path}: cannot export to {path.suffix or 'no suffix'}; use {accepted}")
    return path.suffix


@contextmanager
def notices_hidden() -> Iterator[None]:
    """The exporters' warnings that no user can act on hidden, their errors raised as ever: torch
    2.13 deprecates TorchScript (torch.jit) in favour of torch.export, yet libtorch loads nothing
    else, and warns that its ONNX exporter is not the default one (see export.py's
    _write_onnx)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", r"`torch\.jit\.", DeprecationWarning)
        warnings.filterwarnings("ignore", "You are using the legacy", DeprecationWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        yield


class ExportedPolicy(LoadedPolicy):
    """An exported file loaded with its runtime, acting as a checkpoint's policy does, greedy
    only. `trust_env_code` and `env` say which env it is evaluated on, as `inference.load`'s."""

    def __init__(self, path: str | Path, trust_env_code: bool = False, env: str | None = None):
        self.path = Path(path)
        suffix = check_suffix(self.path)
        load = _load_onnx if suffix == ".onnx" else _load_torchscript
        self.meta, self._run = load(self.path)
        if "obs_shape" not in self.meta:
            raise ValueError(f"{self.path} holds no kuberl metadata: was it made by kuberl export?")
        self.observation_shape = tuple(json.loads(self.meta["obs_shape"]))
        self.obs_dtype = np.dtype(self.meta["obs_dtype"])
        trained_on = _TRAINER_CONFIG.validate_python(json.loads(self.meta["trainer"]))
        super().__init__(trained_on, trust_env_code, env)
        self.observation_space, self.action_space = _recorded_spaces(self.meta)
        self.takes_encoded = self.meta.get(OBS_ENCODING) == FLAT
        self.state_size = int(self.meta.get(STATE_SIZE, 0))
        if self.takes_encoded:  # predict takes the env's observations, and encodes them
            self.observation_shape = shape_of(self.observation_space)

    @property
    def source(self) -> str:
        return str(self.path)

    def describe(self) -> str:
        return f"{super().describe()}, exported as {self.meta['format']} to {self.path}"

    def check_mode(self, deterministic: bool) -> None:
        if not deterministic:
            raise ValueError(GREEDY_ONLY)

    def _act(self, batch: Any, explore: bool) -> np.ndarray:
        if self.takes_encoded:
            batch = encode_structured(self.observation_space, batch)
        return self._run(np.ascontiguousarray(batch, dtype=self.obs_dtype))

    def _step(self, batch: Any, state: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        if self.takes_encoded:
            batch = encode_structured(self.observation_space, batch)
        obs = np.ascontiguousarray(batch, dtype=self.obs_dtype)
        return self._run(obs, np.ascontiguousarray(state, dtype=np.float32))


def _recorded_spaces(meta: dict[str, str]) -> tuple[gym.Space | None, gym.Space | None]:
    """The spaces the metadata records; none in a file of an older kuberl, which acts on its
    observations' shape and dtype alone."""
    if SPACES not in meta:
        return None, None
    return spaces_from_record(json.loads(meta[SPACES]))


def _load_onnx(path: Path) -> tuple[dict[str, str], Runner]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = dict(session.get_modelmeta().custom_metadata_map)

    def run(obs: np.ndarray, state: np.ndarray | None = None) -> Any:
        if state is None:
            return session.run([OUTPUT], {INPUT: obs})[0]
        return tuple(session.run([OUTPUT, STATE_OUTPUT], {INPUT: obs, STATE_INPUT: state}))

    return meta, run


def _load_torchscript(path: Path) -> tuple[dict[str, str], Runner]:
    extra_files = {METADATA_FILE: ""}
    with notices_hidden():
        module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra_files)

    def run(obs: np.ndarray, state: np.ndarray | None = None) -> Any:
        with torch.inference_mode():
            if state is None:
                return module(torch.tensor(obs)).numpy()
            actions, state = module(torch.tensor(obs), torch.tensor(state))
            return actions.numpy(), state.numpy()

    return json.loads(extra_files[METADATA_FILE] or "{}"), run


def load_exported(
    path: str | Path, trust_env_code: bool = False, env: str | None = None
) -> ExportedPolicy:
    """An exported policy (`.onnx` or `.pt`), ready to act."""
    return ExportedPolicy(path, trust_env_code, env)
