"""Spec: the base of every manifest model, the trainer's and the operator's."""

from __future__ import annotations

from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from kuberl_contract.docstrings import Described


class Spec(Described):
    """Base of manifest models: camelCase keys, unknown keys rejected, docstrings documenting."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        # inf and nan are no JSON numbers: Kubernetes could not store them (nor "1e999" from YAML).
        allow_inf_nan=False,
    )
