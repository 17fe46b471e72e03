"""Numbers as JSON can hold them. A float that is not finite (NaN, Infinity: a diverged run's
return) has no JSON form, and Kubernetes stores only strict JSON; such a figure is unknown, so
every part of kuberl writes it as null. Standard library only, like progress_row."""

from __future__ import annotations

import math
from typing import Any


def finite_or_none(value: Any) -> Any:
    """`value` with every float that is not finite made None, JSON's null: `value` itself, or
    anything within it when it is a dict or a list (a status, a whole document)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_none(item) for item in value]
    return value
