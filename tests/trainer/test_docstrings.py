"""Field descriptions from the docstrings under the fields (kuberl_contract.docstrings): the same
as pydantic's use_attribute_docstrings gives, from one parse per module."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, ValidationError

from kuberl_contract.config import TrainerConfig
from kuberl_contract.docstrings import Described


class Ours(Described):
    """A model of every kind of field, described by the docstrings under them."""

    plain: int = 3
    """A plain default.

    Indented lines are cleaned as inspect.cleandoc cleans them."""

    required: str
    """No default."""

    bounded: float = Field(0.5, ge=0.0)
    """A Field without a description."""

    described: int = Field(1, description="its own description wins")
    """Not this one."""

    annotated: Annotated[int, Field(ge=1)] = 2
    """Constrained in its annotation."""

    undocumented: int = 0
    if True:  # a statement between a field and a string: the string documents nothing
        pass
    """Ignored."""

    class Nested(Described):
        inner: int = 1
        """A nested class's field."""


def test_the_docstring_under_a_field_describes_it():
    """As pydantic's use_attribute_docstrings: a string right after an annotated field, cleaned
    by inspect.cleandoc, unless the field's Field has a description; constraints kept."""
    fields = Ours.model_fields
    assert fields["plain"].description == (
        "A plain default.\n\nIndented lines are cleaned as inspect.cleandoc cleans them."
    )
    assert fields["required"].description == "No default." and fields["required"].is_required()
    assert fields["bounded"].description == "A Field without a description."
    assert fields["described"].description == "its own description wins"
    assert fields["annotated"].description == "Constrained in its annotation."
    assert fields["undocumented"].description is None
    assert Ours.Nested.model_fields["inner"].description == "A nested class's field."
    assert Ours(required="x").model_dump() == {
        "plain": 3,
        "required": "x",
        "bounded": 0.5,
        "described": 1,
        "annotated": 2,
        "undocumented": 0,
    }
    with pytest.raises(ValidationError):
        Ours(required="x", bounded=-1.0)
    with pytest.raises(ValidationError):
        Ours(required="x", annotated=0)


def test_the_trainer_config_is_described():
    from pydantic import TypeAdapter

    schema = TypeAdapter(TrainerConfig).json_schema()
    ppo = schema["$defs"]["PPOConfig"]["properties"]
    assert ppo["env"]["description"].startswith("A gymnasium")
    hyperparameters = schema["$defs"]["PPOHyperparameters"]["properties"]
    assert hyperparameters["learning_rate"]["description"].startswith("Adam step size")
