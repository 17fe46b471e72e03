"""`kuberl explain [ALGORITHM]`: an algorithm's hyperparameters, read from their models (type,
range, default, docstring), with where to set each and the Stable-Baselines3 and RLlib names that
map to it; a path of RLJob instead (`kuberl explain rljob.spec.trainer.stop`) goes to
explain_paths. Light: pydantic models only, no ray or torch, so it answers at once."""

from __future__ import annotations

import difflib
import sys
import textwrap

from pydantic import BaseModel

from kuberl_cli.explain_paths import (
    EXIT_OK,
    EXIT_UNKNOWN,
    explain_path_command,
    is_rljob_path,
)
from kuberl_contract.config import ALGORITHMS, PBT
from kuberl_contract.hyperparameters import PBTHyperparameters
from kuberl_contract.hyperparameters.fields import (
    FieldDoc,
    field_docs,
    first_sentence,
    markdown_table,
)
from kuberl_contract.hyperparameters.known_names import KNOWN_NAMES, names_mapped_to

HYPERPARAMETERS: dict[str, type[BaseModel]] = {
    **{name: row.hyperparameters for name, row in ALGORITHMS.items()},
    PBT: PBTHyperparameters,
}
"""Every algorithm `spec.trainer.algorithm` takes, and its hyperparameters."""

RECURSIVE_NEEDS_A_PATH = (
    "--recursive lists the fields under a path of RLJob (kuberl explain rljob.spec --recursive); "
    "an algorithm's hyperparameters have none"
)

_WIDTH = 100
_INDENT = "    "


def explain_command(
    algorithm: str | None, full: bool = False, markdown: bool = False, recursive: bool = False
) -> int:
    """Prints the algorithms (without one), one algorithm's hyperparameters, or the field of RLJob
    a path names (`rljob.spec.trainer.stop`); EXIT_UNKNOWN after a did-you-mean for an algorithm
    or a path that is not one."""
    if algorithm is not None and is_rljob_path(algorithm):
        return explain_path_command(algorithm, recursive=recursive, full=full, markdown=markdown)
    if recursive:
        print(RECURSIVE_NEEDS_A_PATH, file=sys.stderr)
        return EXIT_UNKNOWN
    if algorithm is None:
        print("\n".join(algorithm_lines()))
        return EXIT_OK
    name = _algorithm_named(algorithm)
    if name is None:
        print(unknown_algorithm(algorithm), file=sys.stderr)
        return EXIT_UNKNOWN
    lines = markdown_table(HYPERPARAMETERS[name]) if markdown else hyperparameter_lines(name, full)
    print("\n".join(lines))
    return EXIT_OK


def algorithm_lines() -> list[str]:
    """One line per algorithm: its name and what it is."""
    width = max(map(len, HYPERPARAMETERS))
    lines = [f"{name:<{width}}  {_what_it_is(model)}" for name, model in HYPERPARAMETERS.items()]
    return [*lines, "", "kuberl explain ALGORITHM lists its hyperparameters."]


def hyperparameter_lines(algorithm: str, full: bool = False) -> list[str]:
    """Every hyperparameter of `algorithm`: name, type, range and default; where to set it; its
    description (the first sentence, or all of it with `full`); the other libraries' names."""
    model = HYPERPARAMETERS[algorithm]
    lines = [f"{algorithm}: {_what_it_is(model)}.", ""]
    for doc in field_docs(model):
        lines += [_heading(doc), f"{_INDENT}set: spec.trainer.hyperparameters.{doc.name}"]
        description = doc.description if full else f"{doc.summary}."
        # whole words only: a name such as Stable-Baselines3 or actor-critic is not split
        lines += textwrap.wrap(
            description,
            _WIDTH,
            initial_indent=_INDENT,
            subsequent_indent=_INDENT,
            break_on_hyphens=False,
        )
        lines += [f"{_INDENT}{line}" for line in _other_names(doc.name, algorithm)]
        lines.append("")
    if not full:
        lines.append(f"kuberl explain {algorithm} --full prints each description whole.")
    return lines


def unknown_algorithm(given: str) -> str:
    close = difflib.get_close_matches(given.upper(), list(HYPERPARAMETERS), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown algorithm {given!r}{hint} (algorithms: {', '.join(HYPERPARAMETERS)})"


def _algorithm_named(given: str) -> str | None:
    """The algorithm, however its name is capitalised."""
    by_upper = {name.upper(): name for name in HYPERPARAMETERS}
    return by_upper.get(given.upper())


def _what_it_is(model: type[BaseModel]) -> str:
    """The docstring's first sentence, up to its colon: `Asynchronous PPO`."""
    return first_sentence(" ".join((model.__doc__ or "").split())).split(": ")[0]


def _heading(doc: FieldDoc) -> str:
    """`learning_rate: float, (0, 1], default 0.0003`."""
    return ", ".join(part for part in (f"{doc.name}: {doc.type}", doc.range) if part) + (
        f", default {doc.default}"
    )


def _other_names(field: str, algorithm: str) -> list[str]:
    """`RLlib: lr`, one line per library whose names map to the field."""
    by_library: dict[str, list[str]] = {}
    for name in names_mapped_to(field, algorithm):
        by_library.setdefault(KNOWN_NAMES[name].library, []).append(name)
    return [f"{library}: {', '.join(names)}" for library, names in sorted(by_library.items())]
