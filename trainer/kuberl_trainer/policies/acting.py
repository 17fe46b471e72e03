"""Policies that only act, in numpy: what the remote rollout workers of PG, A2C, PPO, IMPALA,
APPO, DQN, Ape-X, SAC and ES hold when the networks are MLPs (`ActingOnly`).

A remote worker never learns: it needs the policy network's forward pass, the action distribution
and the postprocessing, none of torch. Without torch (and reading a Frozen config, frozen.py) a
worker starts in 0.41 CPU-seconds instead of 1.4-1.6 (workers that share a laptop's cores start one
after another beside the learner, and a spot node's are replaced), with 131 MB of memory instead of
324, and at a few envs acts faster: a 64x64 MLP's step over 8 envs takes 8 µs in numpy against 19 in
torch, whose per-call overhead is most of it.

The networks are the torch ones (models.ActorCritic, dqn.QNetwork, sac.SACModel's actor,
es.ESNetwork), read from the weights the learner sends (their state dicts: `actor.0.weight`,
`actor.0.bias`, `actor.2.weight`, ..., `log_std`), computing the same functions to float32
rounding; actions come of the torch policy's own action distribution (distributions.py), computed
in numpy, from a numpy generator seeded with the worker's seed.
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.policies.distributions import (
    EpsilonGreedy,
    NumpyNoise,
    SquashedGaussian,
    action_distribution,
    categorical_logp,
    features_of,
    legal_columns,
    legal_only,
    linear_epsilon,
    masked_forward,
    worker_epsilon,
)
from kuberl_trainer.policies.evolution import (
    STANDARDIZED_CLIP,
    PerturbedActing,
    nothing_seen,
    standardizer,
)
from kuberl_trainer.policies.interface import Policy, Stats, Weights
from kuberl_trainer.policies.numpy_mlp import ACTIVATIONS_IN_PLACE, linear_layers
from kuberl_trainer.policies.postprocessing import (
    gae_columns,
    n_step_columns,
    returns_to_go_columns,
    sequence_columns,
)
from kuberl_trainer.policies.sample_batch import SampleBatch

if TYPE_CHECKING:  # a remote worker gets a Frozen copy, the config never imported (frozen.py)
    from kuberl_contract.config import AnyTrainerConfig

VALUE_ROWS_PER_PASS = 4096
"""Rows of the critic's passes over a window: a pass over a whole window of a thousand envs would
spill its activations out of the cache (PPO sampled 6% slower at 1,024 CartPole envs)."""


RECURRENT_ACTING = "kuberl_trainer.policies.numpy_recurrent:ActingRecurrentPolicy"
"""The numpy acting half of a policy with a memory (PPO's, A2C's: the algorithms that take one)."""


def acts_in_numpy(spaces: SpaceInfo, config: AnyTrainerConfig) -> bool:
    """Whether a numpy policy computes what the job's torch policy would: separate MLPs for the
    actor and the critic. Images take the CNN, and a trunk shared by both (model.vfShareLayers)
    the torch model's other layout, but for a memory's (model.recurrent: numpy_recurrent.py)."""
    model = config.model
    return spaces.image is None and (model.recurrent is not None or not model.vf_share_layers)


@dataclass(frozen=True)
class ActingOnly:
    """How a remote worker that only acts builds its policy (RolloutWorker's `policy_class`): the
    numpy policy `acting` where it computes what the torch policy `policy` would
    (`acts_in_numpy`), the torch policy otherwise. Both are `module:Class` paths, imported in
    the worker's process only as needed, so that the driver never sends it a torch class. The
    driver sends such a worker a Frozen copy of the job's config (kuberl_contract.frozen), which
    the numpy policies read as they would the config."""

    policy: str
    acting: str

    def __call__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int) -> Policy:
        if acts_in_numpy(spaces, config):
            recurrent = config.model.recurrent is not None
            return load_class(RECURRENT_ACTING if recurrent else self.acting)(spaces, config, seed)
        # The torch policy reads the config itself, not a Frozen copy of it: imported here only.
        from kuberl_contract.config import thawed

        return load_class(self.policy)(spaces, thawed(config), seed)


def load_class(path: str) -> Any:
    """The class that `module:Class` names, its module imported."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class OnlyActs(Policy):
    """What the numpy policies share: the learner's weights, MLP forward passes, and no learning."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.activation = ACTIVATIONS_IN_PLACE[self.hp.activation]
        self.weights: Weights | None = None

    def _forward(
        self,
        layers: list[tuple[np.ndarray, np.ndarray]],
        x: np.ndarray,
        last_activated: bool = False,
    ) -> np.ndarray:
        """The MLP of `layers`, (W^T, b) each, with the activation between them (and after the
        last with `last_activated`)."""
        if not layers:
            raise RuntimeError("this worker's policy has no weights yet: the learner sends them")
        for index, (weight_t, bias) in enumerate(layers):
            x = x @ weight_t
            x += bias
            if last_activated or index < len(layers) - 1:
                self.activation(x)
        return x

    def get_weights(self) -> Weights:
        if self.weights is None:
            raise RuntimeError("this worker's policy has no weights yet: the learner sends them")
        return self.weights

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        raise TypeError(f"{type(self).__name__} only acts; the learner's policy learns")

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], Stats]:
        raise TypeError(f"{type(self).__name__} only acts; A3C's workers take the torch policy")

    def apply_gradients(self, gradients: list[np.ndarray]) -> None:
        raise TypeError(f"{type(self).__name__} only acts; the learner's policy learns")

    def get_state(self) -> dict[str, Any]:
        raise TypeError(f"{type(self).__name__} only acts; checkpoints hold the learner's policy")

    def set_state(self, state: dict[str, Any]) -> None:
        raise TypeError(f"{type(self).__name__} only acts; checkpoints hold the learner's policy")


class ActingPolicy(OnlyActs):
    """A2C's, A3C's and PPO's acting half: samples actions, and postprocesses with GAE on the
    critic's values. Subclasses postprocess as their algorithm does."""

    with_critic = True

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.noise = NumpyNoise(np.random.default_rng(seed))
        self.distribution = action_distribution(spaces)
        self.actor: list[tuple[np.ndarray, np.ndarray]] = []
        self.critic: list[tuple[np.ndarray, np.ndarray]] = []
        self.std: np.ndarray | None = None  # a Gaussian's, from its log_std

    # -- acting -----------------------------------------------------------------------------------

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if (mask_n := self.spaces.action_mask_n) is None:  # the common case pays no call
            out = self._forward(self.actor, obs)
        else:
            out = masked_forward(np, partial(self._forward, self.actor), obs, mask_n)
        actions = self.distribution.actions(np, out, self.noise if explore else None, self.std)
        return self.distribution.env_actions(np, actions), {"actions": actions, "dist_inputs": out}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return gae_columns(
            rollout,
            self._values(rollout["obs"]),
            self._values(rollout["next_obs"][-1:]),
            self._logp(rollout["dist_inputs"], rollout["actions"]),
            self.hp.gamma,
            self.hp.gae_lambda,
        )

    def _logp(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(a|s) of the rollout's (T, N) actions, from the distribution inputs recorded
        while sampling."""
        if self.spaces.discrete_actions:
            return categorical_logp(self.distribution, dist_inputs, actions)
        assert self.std is not None
        z = (actions - dist_inputs) / self.std
        log_density = -0.5 * z * z - np.log(self.std) - np.float32(0.5 * np.log(2 * np.pi))
        return log_density.sum(-1, dtype=np.float32)

    def _values(self, obs: np.ndarray) -> np.ndarray:
        """V for (T, N, obs_dim) observations, VALUE_ROWS_PER_PASS rows at a time."""
        flat = features_of(obs, self.spaces.action_mask_n).reshape(obs.shape[0] * obs.shape[1], -1)
        values = np.empty(len(flat), dtype=np.float32)
        for start in range(0, len(flat), VALUE_ROWS_PER_PASS):
            rows = flat[start : start + VALUE_ROWS_PER_PASS]
            values[start : start + len(rows)] = self._forward(self.critic, rows)[:, 0]
        return values.reshape(obs.shape[:2])

    # -- weights ----------------------------------------------------------------------------------

    def set_weights(self, weights: Weights) -> None:
        """The learner's weights: its linear layers as (W^T, b), the critic's only where
        postprocessing needs them."""
        self.weights = weights
        self.actor = linear_layers(weights, "actor")
        self.critic = linear_layers(weights, "critic") if self.with_critic else []
        if not self.spaces.discrete_actions:
            self.std = np.exp(weights["log_std"]).astype(np.float32)


class ActingPGPolicy(ActingPolicy):
    """PG's acting half: no critic, returns-to-go as advantages."""

    with_critic = False

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return returns_to_go_columns(rollout, self.hp.gamma, self.hp.normalize_returns)


class ActingIMPALAPolicy(ActingPolicy):
    """IMPALA's and APPO's acting half: whole sequences with the behaviour policy's
    log-probabilities; the learner computes the values itself (V-trace), so no critic here."""

    with_critic = False

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return sequence_columns(rollout, self._logp(rollout["dist_inputs"], rollout["actions"]))


class ActingDQNPolicy(OnlyActs):
    """DQN's acting half: epsilon-greedy on the Q-network (dueling or not), n-step transitions.
    Its epsilon follows the schedule over the global env steps the learner sends."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.rng = np.random.default_rng(seed)
        self.distribution = EpsilonGreedy(spaces.action_discrete_n)
        self.q: list[tuple[np.ndarray, np.ndarray]] = []  # without dueling heads
        self.body: list[tuple[np.ndarray, np.ndarray]] = []  # dueling: under both heads
        self.value: list[tuple[np.ndarray, np.ndarray]] = []
        self.advantage: list[tuple[np.ndarray, np.ndarray]] = []

    @property
    def epsilon(self) -> float:
        return linear_epsilon(self.hp, self.global_timesteps)

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if (mask_n := self.spaces.action_mask_n) is None:
            q_values = self._q_values(obs)
        else:
            q_values = masked_forward(np, self._q_values, obs, mask_n)
        actions = self.distribution.greedy(np, q_values)
        if explore:
            legal = legal_columns(obs, mask_n)
            actions = self.distribution.explore(self.rng, actions, self.epsilon, legal)
        return actions, {"actions": actions}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return n_step_columns(rollout, self.hp.gamma, self.hp.n_step)

    def _q_values(self, obs: np.ndarray) -> np.ndarray:
        if not self.hp.dueling:
            return self._forward(self.q, obs)
        features = self._forward(self.body, obs, last_activated=True)
        advantages = self._forward(self.advantage, features)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al., eq. 9).
        return self._forward(self.value, features) + advantages - advantages.mean(-1, keepdims=True)

    def set_weights(self, weights: Weights) -> None:
        self.weights = weights
        if not self.hp.dueling:
            self.q = linear_layers(weights, "q")
            return
        self.body = linear_layers(weights, "body.0")
        self.value = linear_layers(weights, "value")
        self.advantage = linear_layers(weights, "advantage")


class ActingAPEXPolicy(ActingDQNPolicy):
    """Ape-X's acting half: DQN's, at its worker's fixed exploration rate (`worker_epsilon`)."""

    @property
    def epsilon(self) -> float:
        return worker_epsilon(self.hp, self.worker_index, self.num_workers)


class ActingSACPolicy(OnlyActs):
    """SAC's acting half: samples of the tanh-squashed Gaussian (its mean when greedy), rescaled
    to the action bounds; n-step transitions."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.noise = NumpyNoise(np.random.default_rng(seed))
        self.distribution = SquashedGaussian(spaces.action_low, spaces.action_high)
        self.actor: list[tuple[np.ndarray, np.ndarray]] = []

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        out = self._forward(self.actor, obs)
        actions = self.distribution.actions(np, out, self.noise if explore else None)
        return self.distribution.env_actions(np, actions), {"actions": actions}

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return n_step_columns(rollout, self.hp.gamma, self.hp.n_step)

    def set_weights(self, weights: Weights) -> None:
        self.weights = weights
        self.actor = linear_layers(weights, "actor.net")


class ActingESPolicy(PerturbedActing, OnlyActs):
    """ES's acting half: the network behind its observation standardizer, acting in each env
    with a perturbed copy of its flat parameters, and counting the observations it saw for the
    standardizer (evolution.py)."""

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.rng = np.random.default_rng(seed)  # as the torch policy's: the same perturbations
        self.distribution = action_distribution(spaces)
        out = spaces.action_discrete_n if spaces.discrete_actions else spaces.action_dim
        sizes = [spaces.feature_dim, *self.hp.hidden_sizes, out]
        self.shapes = list(itertools.pairwise(sizes))  # (fan_in, fan_out) of each layer
        self.num_params = sum(fan_in * fan_out + fan_out for fan_in, fan_out in self.shapes)
        self.net: list[tuple[np.ndarray, np.ndarray]] = []
        self.theta = np.zeros(0, dtype=np.float32)
        # The standardizer's mean and standard deviation; None before it has counted 2.
        self.obs_mean_std: tuple[np.ndarray, np.ndarray] | None = None
        self.seen = nothing_seen(spaces.feature_dim)

    def set_weights(self, weights: Weights) -> None:
        """The learner's weights, and what acting derives from them once: theta (as the torch
        policy's flat_parameters: layer by layer, weight then bias) and the standardizer (as its
        ObservationStats.normalize computes it)."""
        self.weights = weights
        self.net = linear_layers(weights, "net")
        self.theta = np.concatenate(
            [part for weight_t, bias in self.net for part in (weight_t.T.ravel(), bias)]
        )
        stats = [weights[f"obs_stats.{name}"] for name in ("count", "sum", "sumsq")]
        self.obs_mean_std = standardizer(np, *stats)

    def flat_parameters(self) -> np.ndarray:
        return self.theta

    def compute_actions(
        self, obs: np.ndarray, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The network's actions whatever `explore`: ES explores in parameter space."""
        out = masked_forward(np, self._net, obs, self.spaces.action_mask_n)
        actions = self.distribution.greedy_env_actions(np, out)
        return actions, {"actions": actions}

    def _net(self, features: np.ndarray) -> np.ndarray:
        return self._forward(self.net, self._normalize(features))

    def act_perturbed(self, obs: np.ndarray, parameters: np.ndarray) -> np.ndarray:
        """Actions for a (K, obs_dim) batch, row k by the network with the flat parameter vector
        `parameters[k]`."""
        self.count_observations(obs)
        mask_n = self.spaces.action_mask_n
        out = self._normalize(features_of(obs, mask_n))[:, :, None]  # (K, D, 1)
        start = 0
        for layer, (fan_in, fan_out) in enumerate(self.shapes):
            weight = parameters[:, start : start + fan_out * fan_in].reshape(-1, fan_out, fan_in)
            start += fan_out * fan_in
            out = weight @ out + parameters[:, start : start + fan_out, None]
            start += fan_out
            if layer < len(self.shapes) - 1:
                self.activation(out)
        return self.distribution.greedy_env_actions(np, legal_only(np, out[:, :, 0], obs, mask_n))

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise TypeError("ES learns from the returns of perturbed parameters, not from samples")

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        """(obs - mean) / std with the learner's statistics, clipped to +-5 standard deviations;
        unchanged before any count (the torch policy's ObservationStats.normalize)."""
        if self.obs_mean_std is None:
            return obs
        mean, std = self.obs_mean_std
        return np.clip((obs - mean) / std, -STANDARDIZED_CLIP, STANDARDIZED_CLIP).astype(obs.dtype)
