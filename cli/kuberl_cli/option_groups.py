"""Options that several commands share, declared once as an option group: a dataclass whose fields
are annotated as typer options, and that a command takes as one parameter.

Typer makes a command's options of its function's parameters and has no parameter type that
stands for several options. So `with_option_groups` shows typer a signature in which each
parameter annotated with an option group is replaced by the group's fields, and makes the group of
what they were given before it calls the command.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints


def with_option_groups(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with each parameter annotated with an option group (`api: ApiOptions`) shown to
    typer as the group's options, where the parameter stands, and given the group when it runs.
    Such a parameter comes after the positional ones (after `*`), since options are keywords."""
    signature = inspect.signature(command, eval_str=True)
    groups = {
        name: parameter.annotation
        for name, parameter in signature.parameters.items()
        if dataclasses.is_dataclass(parameter.annotation)
    }
    parameters = [
        option
        for name, parameter in signature.parameters.items()
        for option in (_options(groups[name]) if name in groups else [parameter])
    ]

    @functools.wraps(command)
    def with_groups(**given: Any) -> None:
        for name, group in groups.items():
            options = {field.name: given.pop(field.name) for field in dataclasses.fields(group)}
            given[name] = group(**options)
        command(**given)

    # What typer reads: the signature, and the annotations it resolves the types from.
    with_groups.__signature__ = signature.replace(parameters=parameters)
    with_groups.__annotations__ = {option.name: option.annotation for option in parameters}
    return with_groups


def _options(group: type[Any]) -> list[inspect.Parameter]:
    """The group's fields as keyword parameters: their typer options, and their defaults."""
    annotations = get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty
            if field.default is dataclasses.MISSING
            else field.default,
            annotation=annotations[field.name],
        )
        for field in dataclasses.fields(group)
    ]
