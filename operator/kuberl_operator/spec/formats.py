"""The Kubernetes formats the RLJob's fields take: quantities, counts or percentages, names,
label keys and values, node selectors and tolerations, with the regexes the CRD carries and their
meaning in words (PATTERN_HINTS) for error messages."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, model_validator

from kuberl_contract.config import DNS_SUBDOMAIN_PATTERN, Spec
from kuberl_contract.config.checkpoint import JOB_NAME_PATTERN
from kuberl_operator.constants import CONTROL_PLANE_NODE_LABELS

# resource.Quantity as Kubernetes' own CRDs spell it, minus the sign: resources are never negative.
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
PERCENT_PATTERN = r"^[0-9]+%$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+$"
IMAGE_PATTERN = r"^\S+$"
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MOUNT_PATH_PATTERN = r"^(/[^/:\s]+)+/?$"  # absolute, not the root; Kubernetes forbids ':'

# What a pattern means in words, for error messages (validation.py shows these instead of regexes).
PATTERN_HINTS: dict[str, str] = {
    DNS_SUBDOMAIN_PATTERN: "a DNS subdomain: lowercase letters, digits, '-' and '.', starting and "
    "ending with a letter or digit",
    LABEL_VALUE_PATTERN: "a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit",
    JOB_NAME_PATTERN: "an RLJob's name: lowercase letters, digits and '-', starting with a letter "
    "and ending with a letter or digit",
    VERSION_PATTERN: "a version like 2.60.0",
    IMAGE_PATTERN: "an image reference without spaces, like ghcr.io/org/trainer:1.0",
    REASON_PATTERN: "a CamelCase reason like TrainingStarted",
    MOUNT_PATH_PATTERN: "an absolute directory path other than / and without ':' or spaces, like "
    "/kuberl/checkpoints",
}


def _quantity(value: object) -> object:
    """Kubernetes reads quantities as an integer or a string; YAML floats are neither."""
    if isinstance(value, float):
        raise ValueError(
            f"write {value} as a quoted string such as '{value}' or '{round(value * 1000)}m': "
            "Kubernetes accepts quantities as integers or strings only"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write a number with an optional suffix, "
            "such as 500m, 2, 512Mi or 8Gi"
        )
    return value


def _int_or_percent(value: object) -> object:
    if isinstance(value, str) and not re.fullmatch(PERCENT_PATTERN, value):
        raise ValueError(f"{value!r} is neither a count nor a percentage: write 1 or '25%'")
    if isinstance(value, str) and int(value[:-1]) > 100:
        raise ValueError(f"{value!r} is more than 100%")
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ValueError(f"{value} is negative: write a count >= 0 or a percentage like '25%'")
    return value


def _int_or_string_schema(pattern: str) -> WithJsonSchema:
    # The shape Kubernetes' own CRDs use for quantities and int-or-percent fields.
    return WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": pattern,
            "x-kubernetes-int-or-string": True,
        }
    )


Quantity = Annotated[str, BeforeValidator(_quantity), _int_or_string_schema(QUANTITY_PATTERN)]
"""A Kubernetes resource quantity such as 500m, 2 or 8Gi (an integer or a string in YAML)."""

IntOrPercent = Annotated[
    int | str, BeforeValidator(_int_or_percent), _int_or_string_schema(PERCENT_PATTERN)
]
"""A count, or a percentage of a total written like '25%'."""


def is_qualified_key(key: str) -> bool:
    """A label or annotation key as the API server takes it: an optional DNS-subdomain prefix and
    '/', then a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    return bool(re.fullmatch(LABEL_KEY_PATTERN, key)) and len(name) <= 63 and len(prefix) <= 253


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Rejects keys and values the Kubernetes API server would refuse, naming the offending one."""
    for key, value in labels.items():
        if not is_qualified_key(key):
            raise ValueError(
                f"{key!r} is not a valid label key: an optional DNS-subdomain prefix and '/', then "
                "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
                "digit"
            )
        if len(value) > 63 or not re.fullmatch(LABEL_VALUE_PATTERN, value):
            raise ValueError(f"{value!r} (at {key!r}) is not {PATTERN_HINTS[LABEL_VALUE_PATTERN]}")
    return labels


LabelMap = Annotated[dict[str, str], AfterValidator(check_labels)]
"""Label keys to values, checked as the API server would (labels and node selectors)."""


def check_not_control_plane(selector: dict[str, str]) -> dict[str, str]:
    """Refuses a node selector that picks control-plane nodes: they run the cluster itself (the
    API server, etcd), and a job's pods there would share a node with the cluster's secrets."""
    for key in selector:
        if key in CONTROL_PLANE_NODE_LABELS:
            raise ValueError(
                f"{key!r} selects control-plane nodes, which run the cluster itself; RLJob pods "
                "may not run there: remove it and select worker nodes by their own labels"
            )
    return selector


NodeSelector = Annotated[LabelMap, AfterValidator(check_not_control_plane)]
"""Node labels a pod requires; never a control-plane node's."""


class Toleration(Spec):
    """A Kubernetes toleration: lets pods schedule onto nodes with a matching taint."""

    key: str | None = None
    """Taint key to match. Required: a toleration of every taint (no key, operator Exists) is
    refused, as are the control-plane taints."""

    operator: Literal["Equal", "Exists"] = "Equal"
    """Equal matches key and value; Exists matches the key with any value."""

    value: str | None = None
    """Taint value to match (operator Equal only)."""

    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; null matches every effect."""

    toleration_seconds: int | None = Field(None, ge=0)
    """How long a NoExecute taint is tolerated before eviction; null tolerates it forever."""

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value: must be empty when operator is Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds: only applies to effect NoExecute")
        # Without a key, Exists tolerates every taint: the pod could go onto control-plane and
        # other reserved nodes.
        if not self.key:
            raise ValueError(
                "key: a toleration without a key tolerates every taint, the control plane's "
                "included; name the taint to tolerate, such as nvidia.com/gpu"
            )
        if self.key in CONTROL_PLANE_NODE_LABELS:
            raise ValueError(
                f"key: {self.key} is the taint of control-plane nodes, which run the cluster "
                "itself; RLJob pods may not run there: remove this toleration"
            )
        return self
