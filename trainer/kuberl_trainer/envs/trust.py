"""What making a job's env would run besides gymnasium's own code: the one place that decides
whether an env named in a policy file (a checkpoint's meta, an exported file's metadata) may be
made without asking.

A policy file carries the job's spec.trainer, and evaluating the policy makes its env from it. A
file may come from anyone, so what it says is data, and only data is made from it without the
user's word:
- a registered gymnasium id (`CartPole-v1`, `ALE/Pong-v5`) with its envConfig as gym.make's
  keyword arguments: the id's entry point was registered by code the user already runs;
- a class of gymnasium.wrappers named by its name (the name is looked up among the classes of
  gymnasium.wrappers.__all__, never as an attribute path), its kwargs plain JSON values, so no
  callable is made from a string.

Anything else is code: a `module:Class` (or `module:function`) env or wrapper, which is imported
and called; gymnasium's own `module:EnvId` form, which imports `module` before it looks for the
id; the compatibility ids that make an env of the old gym from an id in their envConfig; and
gymnasium's RecordVideo, which writes files wherever its kwargs say. Such a file is used only
when the user trusts it or names the env to play on themselves (`kuberl evaluate --env`,
`--trust-env-code`; `load(path, env=...)`, `load(path, trust_env_code=True)`).

A job the user trains (`kuberl train job.yaml`) is their own manifest, and is made as it says; its
`module:Class` may name a module next to it or in the working directory (search_path.py), which is
looked for there only when no installed module has its name, so a file beside a manifest never
replaces an installed module that kuberl or the env imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from kuberl_contract.config import WrapperConfig

RUNS_CODE = "a module:attr path, which runs code"

REGISTERED_IDS_THAT_RUN_CODE = {
    "GymV21Environment-v0": "it makes an env of the old gym from an id in its envConfig, which "
    "may import code",
    "GymV26Environment-v0": "it makes an env of the old gym from an id in its envConfig, which "
    "may import code",
}
"""Registered gymnasium ids that make what their envConfig names (with shimmy installed)."""

WRAPPERS_THAT_REACH_OUT = {
    "RecordVideo": "it writes files to the folder its kwargs name",
}
"""Classes of gymnasium.wrappers that act beyond the env they wrap."""


class EnvCode(NamedTuple):
    """One thing in spec.trainer that making its env would run: where (`env`, `wrappers[0]`),
    the name it gives, and why that is code."""

    field: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.field} {self.name!r} ({self.why})"


def env_code(env: str, wrappers: Sequence[WrapperConfig] = ()) -> list[EnvCode]:
    """Everything that making `env` inside `wrappers` would run beyond gymnasium's registered ids
    and its wrappers (see the module's docstring); empty when the env is data only."""
    found = []
    if ":" in env:  # also gymnasium's `module:EnvId`, which imports `module`
        found.append(EnvCode("env", env, RUNS_CODE))
    elif env in REGISTERED_IDS_THAT_RUN_CODE:
        found.append(EnvCode("env", env, REGISTERED_IDS_THAT_RUN_CODE[env]))
    for index, wrapper in enumerate(wrappers):
        field = f"wrappers[{index}]"
        if ":" in wrapper.name:
            found.append(EnvCode(field, wrapper.name, RUNS_CODE))
        elif wrapper.name in WRAPPERS_THAT_REACH_OUT:
            found.append(EnvCode(field, wrapper.name, WRAPPERS_THAT_REACH_OUT[wrapper.name]))
    return found


def on_named_env(config: Any, env: str) -> Any:
    """`config` (a spec.trainer) playing on the env the user names: `env` in place of its env,
    and none of its envConfig and wrappers, which were made for the env it names."""
    return config.model_copy(update={"env": env, "env_config": {}, "wrappers": []})
