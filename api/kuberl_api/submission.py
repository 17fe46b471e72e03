"""A submitted request body turned into a validated RLJob, or into a 4xx naming every bad field.

The RLJob contract is the operator's (`validate_rljob`); this module only decodes the body by its
media type and adds the rules that belong to a server: the job's namespace is the URL's, and a
warm start names no relative path, which the server would read in its own working directory
(`served_warm_start_problems`, as the operator's webhook checks it).
"""

from __future__ import annotations

from typing import Any

from kuberl_api.backend import ApiError, Cause
from kuberl_operator.bounded import MAX_MANIFEST_BYTES, load_json
from kuberl_operator.builders import served_warm_start_problems
from kuberl_operator.spec import RLJob
from kuberl_operator.validation import InvalidManifest, Problem, parse_yaml_document, validate_rljob

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
MAX_BODY_BYTES = MAX_MANIFEST_BYTES


def parse_submission(
    body: bytes, content_type: str | None, namespace: str
) -> tuple[RLJob, dict[str, Any]]:
    """The job and the document as submitted (with the URL's namespace), or ApiError: 415 unknown
    media type, 422 with one cause per problem. The body was read within MAX_BODY_BYTES
    (guard.read_body answers 413 beyond)."""
    try:
        document = decode_body(body, content_type, "the manifest")
    except InvalidManifest as exc:
        raise invalid(exc.problems) from None
    problems = _namespace_problems(document, namespace)
    document = _as_submitted(document)
    try:
        job = validate_rljob(document)
    except InvalidManifest as exc:
        raise invalid([*exc.problems, *problems]) from None
    problems += served_warm_start_problems(job)
    if problems:
        raise invalid(problems)
    document = {**document, "metadata": {**document["metadata"], "namespace": namespace}}
    return job, document


def decode_body(body: bytes, content_type: str | None, what: str) -> Any:
    """The JSON or YAML document of a body, parsed within the bounds of kuberl_operator.bounded;
    ApiError 415 for another media type (naming `what` should be sent), InvalidManifest for a
    body that does not parse."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type not in JSON_TYPES | YAML_TYPES:
        accepted = ", ".join(sorted(JSON_TYPES | YAML_TYPES))
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"Content-Type {media_type or '(none)'} is not one of {accepted}: send "
            f"{what} with one of them",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidManifest([Problem("", "the body is not UTF-8 text")]) from None
    return load_json(text) if media_type in JSON_TYPES else parse_yaml_document(text)


# Set by the server, never by a submission (Kubernetes ignores them on create too).
SERVER_METADATA = frozenset(
    {
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


def _as_submitted(document: Any) -> Any:
    """The document without status and server-set metadata (what a create may set)."""
    if not isinstance(document, dict):
        return document
    document = {key: value for key, value in document.items() if key != "status"}
    if isinstance(metadata := document.get("metadata"), dict):
        document["metadata"] = {k: v for k, v in metadata.items() if k not in SERVER_METADATA}
    return document


def invalid(problems: list[Problem]) -> ApiError:
    """A 422 whose message lists every problem and whose causes name each field."""
    causes = [Cause(problem.path, problem.message) for problem in problems]
    summary = "; ".join(str(problem) for problem in problems)
    return ApiError(422, "Invalid", f"invalid RLJob: {summary}", causes)


def _namespace_problems(document: Any, namespace: str) -> list[Problem]:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    written = metadata.get("namespace") if isinstance(metadata, dict) else None
    if written is not None and written != namespace:
        return [
            Problem(
                "metadata.namespace",
                f"{written!r} differs from the namespace in the URL ({namespace!r}): remove it "
                "or submit to that namespace",
            )
        ]
    return []
