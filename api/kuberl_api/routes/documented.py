"""What the jobs routes declare in the OpenAPI document: their path parameters, the error codes
each answers (all with a Status body), and the request and response bodies FastAPI cannot infer
(a manifest as JSON or YAML, logs as text, a policy or a plot as bytes)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from kuberl_api.schemas import Status
from kuberl_api.submission import JSON_TYPES, YAML_TYPES
from kuberl_operator.constants import MAX_JOB_NAME_LENGTH
from kuberl_operator.spec import DNS_LABEL_PATTERN, JOB_NAME_PATTERN

Namespace = Annotated[
    str, Path(description="The job's namespace.", max_length=63, pattern=DNS_LABEL_PATTERN)
]
JobName = Annotated[
    str,
    Path(description="The job's name.", max_length=MAX_JOB_NAME_LENGTH, pattern=JOB_NAME_PATTERN),
]


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error codes a route answers (all with a Status body)."""
    return {code: {"model": Status} for code in (400, 401, 403, 500, 503, *codes)}


# The RLJob model gives apiVersion and kind defaults (a stored job always has them), but a
# submission must spell them out, as kubectl apply wants.
BODY_SCHEMA = {
    "allOf": [{"$ref": "#/components/schemas/RLJob"}, {"required": ["apiVersion", "kind"]}]
}
SUBMISSION = {
    "requestBody": {
        "required": True,
        "description": "An RLJob manifest, as JSON or YAML.",
        "content": {
            **{media: {"schema": BODY_SCHEMA} for media in sorted(JSON_TYPES)},
            **{media: {"schema": {"type": "string"}} for media in sorted(YAML_TYPES)},
        },
    }
}
LOGS = {
    **error_responses(404, 429, 501),
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
}
POLICY = {
    **error_responses(404, 501),
    200: {
        "description": "The exported policy (ONNX).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    },
}
PLOT = {
    **error_responses(404, 501),
    200: {
        "description": "The learning curve.",
        "content": {
            "image/png": {"schema": {"type": "string", "format": "binary"}},
            "image/svg+xml": {"schema": {"type": "string"}},
        },
    },
}
