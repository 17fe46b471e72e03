"""Hyperparameter names users bring from Stable-Baselines3 and RLlib, and where kuberl keeps what
each one sets, algorithm by algorithm: read from the declarations beside kuberl's fields
(`known_as` says how they are written and why such names are refused, not accepted).

An unknown field that is one of these names is refused with a pointer (`known_name_hint`), and
`kuberl explain` lists them beside the fields they map to (`names_mapped_to`). For an algorithm,
a name points at the hyperparameter that declares it `KnownAs`, or at nothing where its class
declares it `NoEquivalent` (of the algorithm's class and its bases, the nearest deciding); else
at the field of the trainer, of its sections or of the rollout workers that declares it.

Pointers name a hyperparameter (`rollout_length`), a field of the trainer relative to it
(`{trainer}.seed`, filled in with the trainer's path), or a path elsewhere in the spec
(`spec.rolloutWorkers.replicas`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from pydantic import BaseModel

from kuberl_contract.config import ALGORITHMS, PBT, AlgorithmTrainerConfig, RolloutConfig, Spec
from kuberl_contract.hyperparameters.evolution import PBTHyperparameters
from kuberl_contract.hyperparameters.known_as import (
    RAY_TUNE,
    RL_ZOO,
    RLLIB,
    SB3,
    TRAINER,
    KnownAs,
    NoEquivalent,
    library_of,
)

__all__ = [
    "ALGORITHM_NAMES",
    "KNOWN_NAMES",
    "PBT",
    "RAY_TUNE",
    "RLLIB",
    "RL_ZOO",
    "SB3",
    "TRAINER",
    "Declarations",
    "KnownName",
    "Pointer",
    "declared_pointers",
    "known_name_hint",
    "names_mapped_to",
]

ALGORITHM_NAMES = tuple(ALGORITHMS)
"""Every algorithm of the table (ALGORITHMS), PBT aside."""


@dataclass(frozen=True)
class Pointer:
    """Where kuberl keeps what a known name sets, for one algorithm."""

    field: str | None
    """A hyperparameter of the algorithm, `{trainer}.<path>` or `spec.<path>`; None where kuberl
    has no equivalent."""

    note: str
    """What kuberl's field means and how to convert a value; without a field, why there is
    none and what comes closest."""

    @property
    def hyperparameter(self) -> str | None:
        """The hyperparameter pointed at, None for a field elsewhere in the spec (or none)."""
        if self.field is None or "." in self.field:
            return None
        return self.field


@dataclass(frozen=True)
class KnownName:
    """A hyperparameter name of another library, and what it becomes in each algorithm."""

    name: str
    """As the other library spells it."""

    library: str
    """Whose name it is (SB3, RLLIB, ...)."""

    pointers: dict[str, Pointer]
    """By algorithm name: every algorithm of the table, and PBT where it has one."""


Declarations = dict[str, tuple[set[str], Pointer]]
"""By known name: the libraries that use it, and where it points."""


def declared_pointers(model: type[BaseModel]) -> Declarations:
    """The names declared on the fields and in the `no_equivalent` of `model` and of its bases,
    the class nearest `model` deciding, in the order the bases first declare them."""
    declared: Declarations = {}
    for cls in reversed(model.__mro__):
        own: Declarations = {}
        fields = getattr(cls, "__pydantic_fields__", {})
        for name in inspect.get_annotations(cls):
            for known in fields[name].metadata if name in fields else ():
                if isinstance(known, KnownAs):
                    _declare(own, known, name, cls.__qualname__)
        for none in vars(cls).get("no_equivalent", ()):
            _declare(own, none, None, cls.__qualname__)
        declared.update(own)
    return declared


def _declare(
    declared: Declarations, known: KnownAs | NoEquivalent, field: str | None, where: str
) -> None:
    """Adds the names of `known`, pointing at `field`; a name declared twice in one place (a
    class, the spec's sections) could point two ways, and is refused."""
    for name, libraries in known.libraries().items():
        if name in declared:
            raise ValueError(f"{where} declares {name} twice")
        declared[name] = (libraries, Pointer(field, known.note))


def _declare_section(declared: Declarations, model: type[BaseModel], path: str) -> None:
    """Adds the names declared on the fields of the spec's section at `path`, and on those of
    the sections within it (not its hyperparameters: they are the algorithm's)."""
    for name, field in model.model_fields.items():
        field_path = f"{path}.{field.alias or name}"
        for known in field.metadata:
            if isinstance(known, KnownAs):
                _declare(declared, known, field_path, "the spec")
        if isinstance(field.annotation, type) and issubclass(field.annotation, Spec):
            _declare_section(declared, field.annotation, field_path)


def _spec_pointers() -> Declarations:
    """The names every algorithm keeps outside its hyperparameters, in the same place."""
    declared: Declarations = {}
    _declare_section(declared, AlgorithmTrainerConfig, TRAINER)
    _declare_section(declared, RolloutConfig, "spec.rolloutWorkers")
    # spec.learner is the operator's own section, which the contract does not define.
    gpus = KnownAs("GPUs of the learner", rllib="num_gpus")
    _declare(declared, gpus, "spec.learner.gpus", "the spec")
    return declared


def _table() -> dict[str, KnownName]:
    """Every known name, each algorithm's pointer for it; none for an algorithm's own field. A
    population's pointers are its hyperparameters' (`known_name_hint` says where the others
    go)."""
    spec = _spec_pointers()
    models = {algorithm: row.hyperparameters for algorithm, row in ALGORITHMS.items()}
    libraries: dict[str, set[str]] = {}
    pointers: dict[str, dict[str, Pointer]] = {}
    for algorithm, model in (*models.items(), (PBT, PBTHyperparameters)):
        declared = declared_pointers(model)
        if algorithm != PBT:
            declared = spec | declared
        for name, (used_by, pointer) in declared.items():
            libraries.setdefault(name, set()).update(used_by)
            if name not in model.model_fields:
                pointers.setdefault(name, {})[algorithm] = pointer
    return {
        name: KnownName(name, library_of(libraries[name]), pointers.get(name, {}))
        for name in libraries
    }


KNOWN_NAMES: dict[str, KnownName] = _table()
"""Every known name, by its spelling."""


def known_name_hint(
    name: str,
    algorithm: str,
    trainer_path: str = "spec.trainer",
    hyperparameters_path: str | None = None,
) -> str | None:
    """Why `name`, unknown where it was written, is refused, and what to set instead; None when
    it is no other library's name, or one that `algorithm` has a field of its own for.
    `trainer_path` is where the trainer sits (a population's trials: spec.trainer.trainer);
    `hyperparameters_path`, given where the name was not written among the hyperparameters,
    prefixes the hyperparameter pointed at."""
    known = KNOWN_NAMES.get(name)
    if known is None:
        return None
    pointer = known.pointers.get(algorithm)
    if pointer is None and algorithm == PBT:
        pointer = _same_section(known)
    if pointer is None and algorithm == PBT:
        return (
            f"unknown field; this is {known.library}'s name for a trainer's setting: PBT's "
            "hyperparameters are the population's, and the trials' own go in "
            f"{trainer_path}.trainer.hyperparameters"
        )
    if pointer is None:  # the algorithm's own field (a test holds the table so)
        return None
    if pointer.field is None:
        note = pointer.note.replace(TRAINER, trainer_path)
        return (
            f"unknown field; this is {known.library}'s name, and {algorithm} has no "
            f"equivalent: {note}"
        )
    field, note = (text.replace(TRAINER, trainer_path) for text in (pointer.field, pointer.note))
    if pointer.hyperparameter and hyperparameters_path:
        field = f"{hyperparameters_path}.{field}"
    return f"unknown field; this is {known.library}'s name: kuberl's is {field} ({note})"


def _same_section(known: KnownName) -> Pointer | None:
    """The pointer of a name that every algorithm keeps in the same section outside the
    hyperparameters (seed, envs per worker): a population has that section too."""
    pointers = {known.pointers.get(algorithm) for algorithm in ALGORITHM_NAMES}
    if len(pointers) != 1:
        return None
    (pointer,) = pointers
    if pointer is None or pointer.field is None or pointer.hyperparameter:
        return None
    return pointer


def names_mapped_to(field: str, algorithm: str) -> list[str]:
    """The known names that `algorithm`'s hyperparameter `field` stands for, other than its own
    name."""
    return [
        known.name
        for known in KNOWN_NAMES.values()
        if (pointer := known.pointers.get(algorithm)) is not None
        and pointer.hyperparameter == field
    ]
