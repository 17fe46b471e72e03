"""Envs with the spaces real envs use (Dict, Tuple, MultiDiscrete, MultiBinary observations,
MultiDiscrete actions) and action masks, importable as `masked_envs:Class` by rollout workers in
any process."""

import gymnasium as gym
import numpy as np

ILLEGAL_PENALTY = -1000.0
"""The reward of an illegal action, which also ends the episode: any episode return below 0 says
an illegal action was taken."""


class PickTheTarget(gym.Env):
    """Each step `legal` of `n` actions are legal (the mask) and one of them is the target (a
    Discrete part of the observation): choosing it pays 1, another legal one 0, an illegal one
    ILLEGAL_PENALTY and ends the episode. Episodes last `length` steps, so a perfect policy
    returns `length`, a random legal one about length * 1/legal. `illegal_actions` counts what
    this instance saw."""

    def __init__(self, n: int = 6, legal: int = 3, length: int = 10, mask_as_box: bool = False):
        self.n, self.legal, self.length = n, legal, length
        mask = gym.spaces.Box(0, 1, (n,), np.float32) if mask_as_box else gym.spaces.MultiBinary(n)
        self.observation_space = gym.spaces.Dict(
            {
                "target": gym.spaces.Discrete(n),
                "noise": gym.spaces.Box(-1, 1, (2,)),
                "action_mask": mask,
            }
        )
        self.action_space = gym.spaces.Discrete(n)
        self.illegal_actions = 0

    def _observe(self):
        legal = self.np_random.choice(self.n, self.legal, replace=False)
        self.target = int(legal[0])
        self.mask = np.zeros(self.n, dtype=self.observation_space["action_mask"].dtype)
        self.mask[legal] = 1
        noise = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"target": self.target, "noise": noise, "action_mask": self.mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        action = int(action)
        self.steps += 1
        if not self.mask[action]:
            self.illegal_actions += 1
            return self._observe(), ILLEGAL_PENALTY, True, False, {}
        reward = float(action == self.target)
        return self._observe(), reward, False, self.steps >= self.length, {}


class PickTheTargets(gym.Env):
    """PickTheTarget with MultiDiscrete actions: one target per component of nvec, each
    component's mask beside the others' (sum(nvec) columns); each right component pays 1 / k."""

    def __init__(self, nvec: tuple[int, ...] = (4, 3), length: int = 10):
        self.nvec, self.length = tuple(nvec), length
        total = sum(self.nvec)
        self.observation_space = gym.spaces.Dict(
            {
                "targets": gym.spaces.MultiDiscrete(list(self.nvec)),
                "action_mask": gym.spaces.MultiBinary(total),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete(list(self.nvec))
        self.illegal_actions = 0

    def _observe(self):
        self.targets = np.array([self.np_random.integers(n) for n in self.nvec])
        masks = []
        for n, target in zip(self.nvec, self.targets, strict=True):
            mask = self.np_random.integers(0, 2, n).astype(np.int8)
            mask[target] = 1
            masks.append(mask)
        self.mask = np.concatenate(masks)
        return {"targets": self.targets.copy(), "action_mask": self.mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        action = np.asarray(action)
        self.steps += 1
        offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        if not self.mask[offsets + action].all():
            self.illegal_actions += 1
            return self._observe(), ILLEGAL_PENALTY, True, False, {}
        reward = float((action == self.targets).mean())
        return self._observe(), reward, False, self.steps >= self.length, {}


class EverySpace(gym.Env):
    """Observations of every structured kind, nested: a Dict of a MultiDiscrete (with starts), a
    MultiBinary, a Tuple of a Discrete (with a start) and a Box, and a Dict in it. The reward is
    1 when the action matches the parity of the MultiDiscrete's first component; `multi` gives
    MultiDiscrete actions (both components must match)."""

    def __init__(self, multi: bool = False, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Dict(
            {
                "counts": gym.spaces.MultiDiscrete([3, 4], start=[1, 0]),
                "flags": gym.spaces.MultiBinary(3),
                "pair": gym.spaces.Tuple(
                    (gym.spaces.Discrete(3, start=2), gym.spaces.Box(-1, 1, (2,)))
                ),
                "inner": gym.spaces.Dict({"level": gym.spaces.Discrete(2)}),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([2, 2]) if multi else gym.spaces.Discrete(2)

    def _observe(self):
        self.obs = self.observation_space.sample()
        return self.obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 31)))
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        self.steps += 1
        parity = int(self.obs["counts"][0] % 2)
        reward = float(np.all(np.asarray(action) == parity))
        return self._observe(), reward, False, self.steps >= self.length, {}
