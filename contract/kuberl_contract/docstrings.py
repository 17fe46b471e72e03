"""Field docstrings as pydantic descriptions, read with one parse per module.

kuberl documents every config field with a docstring under it, which becomes the field's
description (the CRD's, `kuberl explain`'s, the REST API's schema). pydantic's
`use_attribute_docstrings` finds each class's source by walking the call stack and resolving
every frame's module file: half of importing the trainer's config (0.1 CPU-seconds), paid by every
process that imports it (the driver, every `kuberl` command, the API, the operator). `describe`
does the same from one parse of each module, with pydantic's rule: a string right after an
annotated field in the class's own body, cleaned by inspect.cleandoc, describes that field unless
its Field already has a description. A model gets it by deriving from `Described`.
"""

from __future__ import annotations

import ast
import inspect
import sys
from functools import cache
from itertools import pairwise
from typing import Any

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


class Described(BaseModel):
    """A model whose fields are described by the docstrings under them (`describe`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        describe(cls)


def describe(cls: type) -> None:
    """Give the fields of model class `cls` (before pydantic collects them: call it from
    `__init_subclass__`) the docstrings under them as their descriptions."""
    docstrings = _module_docstrings(cls.__module__).get(cls.__qualname__, {})
    annotations = inspect.get_annotations(cls)
    for name, docstring in docstrings.items():
        if name not in annotations:
            continue
        value = cls.__dict__.get(name, PydanticUndefined)
        if isinstance(value, FieldInfo):
            if value.description is None:
                setattr(cls, name, FieldInfo.merge_field_infos(value, description=docstring))
        elif value is PydanticUndefined:
            setattr(cls, name, Field(description=docstring))
        else:
            setattr(cls, name, Field(default=value, description=docstring))


@cache
def _module_docstrings(module_name: str) -> dict[str, dict[str, str]]:
    """Each class of the module (by qualified name): its fields' docstrings."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    if not path or not path.endswith(".py"):
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read())
    except (OSError, SyntaxError):
        return {}
    found: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = _field_docstrings(node.body)
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def _field_docstrings(body: list[ast.stmt]) -> dict[str, str]:
    docstrings: dict[str, str] = {}
    for before, node in pairwise(body):
        if (
            isinstance(before, ast.AnnAssign)
            and isinstance(before.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings[before.target.id] = inspect.cleandoc(node.value.value)
    return docstrings
