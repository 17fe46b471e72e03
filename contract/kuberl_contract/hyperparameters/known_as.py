"""Hyperparameter names users bring from Stable-Baselines3, RLlib, RL Baselines3 Zoo and Ray Tune,
declared beside kuberl's settings that hold what they set.

kuberl accepts none of them as an alias: the same name means different things in the two
libraries (`train_batch_size` is PPO's whole batch in RLlib and DQN's minibatch) and sometimes
counts in other units than kuberl's field (RLlib's `target_network_update_freq` counts env steps,
kuberl's `target_update_interval` gradient steps). An unknown field that is one of these names is
refused with a pointer instead, which `known_names` derives from two declarations:

- `KnownAs`, in a field's annotation (`Annotated[StepSize, KnownAs("Adam step size",
  rllib="lr")]`): these names set this field; the note says what it means and how to convert a
  value where the units differ. pydantic keeps it out of the JSON schema, so the CRD does not
  see it.
- `NoEquivalent`, in a hyperparameters class's `no_equivalent`: these names set something the
  algorithm has no field for; the note says why and what comes closest.

A class's declarations hold for its subclasses, and a subclass's override its bases': the
bases say what most algorithms lack (only PPO clips its value predictions), the algorithms that
have it say where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

SB3 = "Stable-Baselines3"
RLLIB = "RLlib"
RL_ZOO = "RL Baselines3 Zoo"
RAY_TUNE = "Ray Tune"

TRAINER = "{trainer}"
"""In a note, stands for the trainer's path (spec.trainer, or a population's
spec.trainer.trainer)."""

Names = str | tuple[str, ...]
"""One name, or several."""

_LIBRARIES = {"sb3": SB3, "rllib": RLLIB, "rl_zoo": RL_ZOO, "ray_tune": RAY_TUNE}
"""Each library by the keyword that takes its names."""


@dataclass(frozen=True)
class _OtherNames:
    """Names of other libraries, given by library (`sb3="n_steps"`), and a note on them."""

    note: str
    sb3: Names = ()
    rllib: Names = ()
    rl_zoo: Names = ()
    ray_tune: Names = ()

    def libraries(self) -> dict[str, set[str]]:
        """Each name, in the order written, and the libraries that use it."""
        named: dict[str, set[str]] = {}
        for attribute, library in _LIBRARIES.items():
            for name in _as_tuple(getattr(self, attribute)):
                named.setdefault(name, set()).add(library)
        return named


class KnownAs(_OtherNames):
    """Other libraries' names for what the annotated field sets. `note` says what the field
    means to someone who knows those names, and how to convert a value where the units differ;
    `{trainer}` in it stands for the trainer's path."""

    def absent(self, why: str) -> NoEquivalent:
        """The same names, for an algorithm that has no such field: `why` says why, and what
        comes closest."""
        return NoEquivalent(why, self.sb3, self.rllib, self.rl_zoo, self.ray_tune)


class NoEquivalent(_OtherNames):
    """Other libraries' names for something an algorithm has no field for, declared in its
    hyperparameters class's `no_equivalent`. `note` says why there is none and what comes
    closest."""


def _as_tuple(names: Names) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else names


def library_of(libraries: set[str]) -> str:
    """Whose name it is, for a name that these libraries use: `Stable-Baselines3 and RLlib`."""
    return " and ".join(library for library in _LIBRARIES.values() if library in libraries)
