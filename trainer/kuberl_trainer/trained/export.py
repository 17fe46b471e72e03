"""Exporting a trained policy's greedy actions as one file that runs without kuberl: an ONNX graph
(onnxruntime, TensorRT, a browser) or a TorchScript module (libtorch).

    from kuberl_trainer.trained.export import export, load_exported
    from kuberl_trainer.trained.inference import load

    export(load("runs/cartpole-ppo"), Path("cartpole.onnx"))
    action, _ = load_exported("cartpole.onnx").predict(obs)  # exported.py's, imported here too

The graph takes a batch of observations as the job's env returns them (after its wrappers):
float32 for a Box, uint8 for uint8 images, int64 for a Discrete space. A MultiDiscrete,
MultiBinary, Dict or Tuple space has no one tensor to take: the graph takes its flat encoding
((batch, n) float32, envs/encoding.py says how, an action mask in its last columns; the
metadata's `obs_encoding` is then `flat`), and `load_exported(...).predict(obs)` computes it from
the env's own observations. It gives the actions `TrainedPolicy.predict` gives, the greedy ones:
int64 for Discrete actions, (batch, k) int64 for MultiDiscrete ones, float32 within the bounds
for a Box; an action mask's illegal actions are never chosen while any is legal. Everything
between is inside: the one-hot encoding of Discrete observations,
the observation normalization with its statistics frozen as the checkpoint saved them (ES's
own too), the networks, and the greedy env actions of the policy's own action distribution
(policies/distributions.py, traced in torch: a Categorical's argmax, a Gaussian's mean clipped
to the bounds, DQN's argmax, SAC's squashed mean rescaled to the bounds).

Both files carry kuberl's metadata (algorithm, env, the spaces as space_record.py writes them,
checkpoint, the job's spec.trainer): an ONNX model in its metadata_props, a TorchScript module in
its extra file kuberl.json. Every export is checked before it is kept: the file, loaded back
(exported.py), must act as the policy does on observations drawn from the observation space.
Exporting makes no env: the policy, its spaces and the observations all come from the
checkpoint.
"""

from __future__ import annotations

import copy
import importlib.metadata
import io
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import gymnasium as gym
import numpy as np
import onnx
import torch
from torch import nn

from kuberl_trainer.envs.encoding import sample_observations
from kuberl_trainer.envs.normalization import Normalizer
from kuberl_trainer.envs.space_record import SPACES, spaces_record
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.job.checkpoint import Checkpoint
from kuberl_trainer.policies.actor_critic import ActorCriticPolicy
from kuberl_trainer.policies.distributions import (
    ActionDistribution,
    features_of,
    legal_only,
    with_arrays,
)
from kuberl_trainer.policies.dqn import DQNPolicy
from kuberl_trainer.policies.es import ESPolicy
from kuberl_trainer.policies.evolution import STANDARDIZED_CLIP
from kuberl_trainer.policies.interface import Policy
from kuberl_trainer.policies.recurrent import GreedyMemoryActions
from kuberl_trainer.policies.sac import SACPolicy
from kuberl_trainer.trained.exported import (
    FLAT,
    FORMATS,
    INPUT,
    METADATA_FILE,
    OBS_ENCODING,
    OPSET,
    OUTPUT,
    STATE_INPUT,
    STATE_OUTPUT,
    STATE_SIZE,
    ExportedPolicy,
    check_suffix,
    load_exported,
    notices_hidden,
)
from kuberl_trainer.trained.inference import TrainedPolicy

CHECK_OBSERVATIONS = 256
"""Observations an export is checked on before it is kept."""


class ExportError(Exception):
    """The policy cannot be exported as one graph that acts as it does, and why."""


# -- the greedy module --------------------------------------------------------------------------


class GreedyPolicy(nn.Module):
    """Observations as the env returns them in, the policy's greedy env actions out."""

    def __init__(self, encode: nn.Module, normalize: nn.Module, act: nn.Module):
        super().__init__()
        self.encode = encode
        self.normalize = normalize
        self.act = act

    def forward(self, obs: torch.Tensor, *memory: torch.Tensor):  # a recurrent one's: its memory
        return self.act(self.normalize(self.encode(obs)), *memory)


class OneHot(nn.Module):
    """Discrete observations, (B,) int64, one-hot encoded as float32 (B, n), as encode_obs does:
    a comparison with start..start+n-1 (Discrete.start), which every ONNX runtime has."""

    def __init__(self, n: int, start: int = 0):
        super().__init__()
        self.register_buffer("indices", torch.arange(start, start + n))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs.unsqueeze(-1) == self.indices).float()


class Standardize(nn.Module):
    """clip((obs - mean) / std, +-clip), computed in float64 as the numpy normalizer and ES's
    standardizer compute it (float32 observations promoted), then float32 again: the same
    arithmetic, so the same normalized observations to the last bit. The `kept` last columns (an
    action mask's) pass as they are."""

    def __init__(
        self,
        mean: np.ndarray | torch.Tensor,
        std: np.ndarray | torch.Tensor,
        clip: float,
        kept: int = 0,
    ):
        super().__init__()
        self.register_buffer("mean", _constant(mean, torch.float64))
        self.register_buffer("std", _constant(std, torch.float64))
        self.clip = float(clip)
        self.kept = kept

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = obs[..., : -self.kept] if self.kept else obs
        normalized = ((features.double() - self.mean) / self.std).clamp(-self.clip, self.clip)
        if not self.kept:
            return normalized.float()
        return torch.cat([normalized.float(), obs[..., -self.kept :]], dim=-1)


class GreedyActions(nn.Module):
    """The env actions a network's outputs stand for when greedy: its action distribution's
    `greedy_env_actions`, computed in torch, with copies of the distribution's bounds, which the
    trace records as constants of the graph. With `mask_n`, the net takes the observations
    without their action mask's columns, and the actions it rules out are never chosen (a net
    that masks itself, DQN's, takes none)."""

    def __init__(self, net: nn.Module, distribution: ActionDistribution, mask_n: int | None = None):
        super().__init__()
        self.net = net
        self.distribution = with_arrays(distribution, _constant)
        self.mask_n = mask_n

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = legal_only(torch, self.net(features_of(obs, self.mask_n)), obs, self.mask_n)
        return self.distribution.greedy_env_actions(torch, out)


def _constant(value: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A copy of `value` as a tensor: the module keeps no memory of the policy's."""
    return torch.as_tensor(value, dtype=dtype).clone()


def greedy_module(policy: TrainedPolicy) -> nn.Module:
    """The policy's greedy acting as one module, built from copies of its networks (eval mode,
    no gradients): what `TrainedPolicy.predict` computes, from the env's raw observations to the
    env's actions."""
    module = GreedyPolicy(
        _encoder(policy.spaces),
        _observation_filter(policy.normalizer, policy.spaces.action_mask_n or 0),
        _greedy_actions(policy.policy),
    )
    return module.eval().requires_grad_(False)


def _encoder(spaces: SpaceInfo) -> nn.Module:
    """encode_obs: images as they are, Discrete observations one-hot, other Boxes flattened; the
    structured ones come encoded (see the module)."""
    if spaces.image is not None or spaces.structured is not None:
        return nn.Identity()  # the CNN casts and scales them itself
    if spaces.obs_discrete_n is not None:
        return OneHot(spaces.obs_discrete_n, spaces.obs_discrete_start)
    return nn.Flatten()


def _observation_filter(normalizer: Normalizer, mask_n: int) -> nn.Module:
    """spec.trainer.normalization's observation filter, its statistics frozen; an action mask's
    `mask_n` columns untouched."""
    if not normalizer.config.observations:
        return nn.Identity()
    stats, settings = normalizer.stats.obs, normalizer.config
    std = np.sqrt(stats.var + settings.epsilon)
    return Standardize(stats.mean, std, settings.clip_observations, mask_n)


def _greedy_actions(policy: Policy) -> nn.Module:
    """What the policy's `compute_actions(obs, explore=False)` does to normalized observations:
    a copy of its network, and its distribution's greedy env actions."""
    if isinstance(policy, ActorCriticPolicy) and policy.memory is not None:  # its copies
        return GreedyMemoryActions(policy.model, with_arrays(policy.model.distribution, _constant))
    if isinstance(policy, ActorCriticPolicy):  # PG, A2C, A3C, PPO, IMPALA, APPO
        model = policy.model
        net = model.actor if model.encoder is None else nn.Sequential(model.encoder, model.actor)
        return GreedyActions(copy.deepcopy(net), model.distribution, model.mask_n)
    if isinstance(policy, DQNPolicy):  # DQN, APEX
        return GreedyActions(copy.deepcopy(policy.model), policy.distribution)
    if isinstance(policy, SACPolicy):
        return GreedyActions(copy.deepcopy(policy.model.actor.net), policy.distribution)
    if isinstance(policy, ESPolicy):
        net = nn.Sequential(_es_standardizer(policy), copy.deepcopy(policy.model.net))
        return GreedyActions(net, policy.distribution, policy.model.mask_n)
    raise ExportError(f"no greedy graph is known for {type(policy).__name__}")


def _es_standardizer(policy: ESPolicy) -> nn.Module:
    """ES's observation standardizer (ObservationStats.normalize) with its statistics frozen:
    none before two observations were counted, as there."""
    if (mean_std := policy.model.obs_stats.mean_std()) is None:
        return nn.Identity()
    return Standardize(*mean_std, clip=STANDARDIZED_CLIP)


# -- what goes in and comes out -----------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """One input's or output's item shape (without the batch axis) and dtype."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        dims = ["batch", *map(str, self.shape)]
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''}) {self.dtype}"


def input_spec(policy: TrainedPolicy) -> TensorSpec:
    """Observations as the env returns them: int64 indices of a Discrete space, uint8 images,
    float32 otherwise (what `predict` casts a Box's observations to); the flat encoding of a
    structured space."""
    space, spaces = policy.observation_space, policy.spaces
    if spaces.structured is not None:
        return TensorSpec((spaces.obs_dim,), "float32")
    if isinstance(space, gym.spaces.Discrete):
        return TensorSpec((), "int64")
    dtype = spaces.obs_dtype if spaces.image is not None else np.dtype(np.float32)
    return TensorSpec(tuple(space.shape), str(dtype))


def output_spec(policy: TrainedPolicy) -> TensorSpec:
    """The env's actions as `predict` gives them: int64 indices, or float32 vectors."""
    spaces = policy.spaces
    if spaces.multi_discrete_actions:
        return TensorSpec((spaces.action_dim,), "int64")
    if spaces.discrete_actions:
        return TensorSpec((), "int64")
    return TensorSpec((spaces.action_dim,), "float32")


def metadata(policy: TrainedPolicy, suffix: str) -> dict[str, str]:
    """What the file says about itself, as strings (ONNX's metadata_props hold strings only):
    where it came from, its input and output, the spaces, and the job's spec.trainer (JSON),
    which names the env to evaluate it on."""
    observations, actions = input_spec(policy), output_spec(policy)
    meta = {
        "kuberl_version": _kuberl_version(),
        "format": FORMATS[suffix],
        "algorithm": policy.config.algorithm,
        "env": policy.config.env,
        "observation_space": str(policy.observation_space),
        "action_space": str(policy.action_space),
        SPACES: json.dumps(spaces_record(policy.observation_space, policy.action_space)),
        "checkpoint": shareable_location(policy.uri),
        "iteration": str(policy.meta["iteration"]),
        "timesteps": str(policy.meta["timesteps"]),
        "obs_shape": json.dumps(observations.shape),
        "obs_dtype": observations.dtype,
        "actions_shape": json.dumps(actions.shape),
        "actions_dtype": actions.dtype,
        "trainer": json.dumps(policy.config.model_dump(mode="json", by_alias=True)),
    }
    if suffix == ".onnx":
        meta["opset"] = str(OPSET)
    if policy.spaces.structured is not None:
        meta[OBS_ENCODING] = FLAT
    meta |= {STATE_SIZE: str(policy.state_size)} if policy.state_size else {}
    return meta


def shareable_location(uri: str) -> str:
    """A checkpoint's location as a file shared beyond the machine that trained it carries it:
    an object store's URI as it is; a local one as its store's folder and its own name
    (`checkpoints/checkpoint-00000060` in a run directory), no path of that machine."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    path = PurePosixPath(uri.removeprefix("file://"))
    return str(PurePosixPath(path.parent.name, path.name))


def _kuberl_version() -> str:
    try:
        return importlib.metadata.version("kuberl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- exporting ----------------------------------------------------------------------------------


def export(policy: TrainedPolicy, path: Path) -> Path:
    """Write the policy's greedy module to `path`: an ONNX graph for `.onnx`, a TorchScript module
    for `.pt`, with the metadata (its folder made if need be). The file is kept only once, loaded
    back, it acts as the policy does (ExportError otherwise); returns `path`."""
    path = Path(path)
    suffix = check_suffix(path)
    module = greedy_module(policy)
    spec = input_spec(policy)
    example = torch.zeros((2, *spec.shape), dtype=getattr(torch, spec.dtype))
    examples = (example, torch.zeros(2, policy.state_size))[: 2 if policy.state_size else 1]
    path.parent.mkdir(parents=True, exist_ok=True)
    write = _write_onnx if suffix == ".onnx" else _write_torchscript
    write(module, examples, path, metadata(policy, suffix))
    try:
        _check(policy, load_exported(path))
    except Exception:
        path.unlink(missing_ok=True)
        raise
    return path


def export_checkpoint(checkpoint: Checkpoint, path: Path) -> Path:
    """Write the checkpoint's greedy policy to `path` (see `export`): how a job exports its final
    policy (the driver's `export`)."""
    policy = TrainedPolicy(checkpoint)
    try:
        return export(policy, path)
    finally:
        policy.close()


def _write_onnx(module: nn.Module, examples: tuple, path: Path, meta: dict[str, str]) -> None:
    """The module's ONNX graph, any batch size, as one file. Through torch's TorchScript-based
    exporter: a greedy module has no control flow for torch.export to capture, and where that
    exporter took 2 s of the first export (it imports torch._dynamo and reads the source of
    onnxscript's 500 torchlib functions: a third of `make run`), this one takes 0.06 s."""
    graph = io.BytesIO()
    inputs, outputs = [INPUT, STATE_INPUT][: len(examples)], [OUTPUT, STATE_OUTPUT][: len(examples)]
    with notices_hidden():
        torch.onnx.export(
            module,
            examples,
            graph,
            input_names=inputs,
            output_names=outputs,
            opset_version=OPSET,
            dynamo=False,
            dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
        )
    model = onnx.load_model_from_string(graph.getvalue())
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save_model(model, str(path))


def _write_torchscript(
    module: nn.Module, examples: tuple, path: Path, meta: dict[str, str]
) -> None:
    """The module traced: every branch of the greedy module is settled when it is built (the
    layout, the spaces, whether statistics exist), so the trace is the whole computation."""
    with notices_hidden():
        traced = torch.jit.trace(module, examples)
        torch.jit.save(traced, str(path), _extra_files={METADATA_FILE: json.dumps(meta)})


def _check(policy: TrainedPolicy, exported: ExportedPolicy) -> None:
    """ExportError unless the exported file acts as the policy does on observations drawn from
    the observation space: the same discrete actions, continuous ones within 1e-5."""
    obs = sample_observations(policy.observation_space, CHECK_OBSERVATIONS, seed=0)
    expected, memory = policy.predict(obs)
    actual, exported_memory = exported.predict(obs)
    if memory is not None:  # and a second step, each from the memory its first step left
        expected = policy.predict(obs, state=memory)[0]
        actual = exported.predict(obs, state=exported_memory)[0]
    if policy.spaces.discrete_actions:
        differ = np.flatnonzero((actual != expected).reshape(len(actual), -1).any(-1))
    else:
        differ = np.flatnonzero(~np.isclose(actual, expected, rtol=1e-5, atol=1e-5).all(axis=-1))
    if len(differ):
        raise ExportError(
            f"the exported {exported.meta['format']} file acts otherwise than the policy on "
            f"{len(differ)} of {CHECK_OBSERVATIONS} observations (the first: "
            f"{expected[differ[0]]} expected, {actual[differ[0]]} exported)"
        )
