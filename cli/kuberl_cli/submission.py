"""`kuberl submit [-f] FILE` and `kuberl apply -f FILE`, each with `--set PATH=VALUE` and
`--seed N` as `kuberl train` takes them (kuberl_cli.overrides).

The API creates a job (POST) and changes two fields of one that exists: spec.suspend (POST
.../suspend and .../resume) and spec.rolloutWorkers.replicas (PUT .../scale); it has no update of
any other field. So `apply`, as kubectl apply does for an object's immutable fields, creates the
job when it is not there, says `unchanged` when the manifest asks for what the job already is,
makes the changes the API allows, and refuses any other, naming each field that differs: such a
job must be deleted and submitted again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kuberl_cli.client import (
    DEFAULT_NAMESPACE,
    EXIT_NO_FILE,
    EXIT_REFUSED,
    Client,
    ClientError,
    scale_message,
    suspend_message,
)
from kuberl_cli.overrides import OverrideError, with_overrides
from kuberl_cli.views import phase_of
from kuberl_operator.validation import (
    InvalidManifest,
    parse_yaml_document,
    read_manifest_file,
    validate_rljob,
)

SUSPEND, REPLICAS = "spec.suspend", "spec.rolloutWorkers.replicas"
CHANGEABLE = (SUSPEND, REPLICAS)
"""The fields of an existing job the API changes (suspend and resume, scale)."""
JSON = "application/json"


@dataclass(frozen=True)
class Manifest:
    """A manifest as it goes to the API: its body, the body's media type, and the document it
    holds (None when it does not parse here: the server then says what is wrong)."""

    body: bytes
    content_type: str
    document: Any

    @property
    def namespace(self) -> str | None:
        """metadata.namespace when the manifest names one."""
        metadata = self.document.get("metadata") if isinstance(self.document, dict) else None
        written = metadata.get("namespace") if isinstance(metadata, dict) else None
        return written if isinstance(written, str) and written else None


def read_manifest(file: Path, overrides: list[str], seed: int | None = None) -> Manifest:
    """The manifest in `file`, changed by the --set `overrides` and `seed`: sent as written when
    unchanged, else as the changed document in JSON."""
    if not file.is_file():
        raise ClientError(f"{file}: no such file", EXIT_NO_FILE)
    body = file.read_bytes()
    try:
        document = parse_yaml_document(read_manifest_file(file))
    except (InvalidManifest, OSError, UnicodeDecodeError) as exc:
        if overrides or seed is not None:
            raise ClientError(
                f"{file}: cannot apply --set or --seed: {_why(exc)}", EXIT_REFUSED
            ) from None
        return Manifest(body, "application/yaml", None)
    if not overrides and seed is None:
        return Manifest(body, "application/yaml", document)
    try:
        changed = with_overrides(document, overrides, seed)
    except OverrideError as exc:
        raise ClientError(f"{file}: {exc}", EXIT_REFUSED) from None
    return Manifest(json.dumps(changed).encode(), JSON, changed)


def _why(exc: Exception) -> str:
    if isinstance(exc, InvalidManifest):
        return "; ".join(str(problem) for problem in exc.problems)
    return str(exc)


def placed(client: Client, file: Path, manifest: Manifest, namespace: str | None) -> Client:
    """The client in the job's namespace: `namespace` (-n), else the manifest's own, else the
    default one; -n and a metadata.namespace that differ are refused, as kubectl does."""
    written = manifest.namespace
    if namespace is not None and written is not None and written != namespace:
        raise ClientError(
            f'{file}: metadata.namespace is "{written}", which does not match --namespace '
            f'"{namespace}": pass -n {written}, or remove metadata.namespace from the manifest',
            EXIT_REFUSED,
        )
    return replace(client, namespace=namespace or written or DEFAULT_NAMESPACE)


def submit(
    client: Client,
    file: Path,
    namespace: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    seed: int | None = None,
) -> None:
    """Submits the manifest (changed by `overrides` and `seed`) to its namespace (`placed`)."""
    manifest = read_manifest(file, list(overrides), seed)
    client = placed(client, file, manifest, namespace)
    job = _create(client, manifest)
    # On a cluster the operator writes the first status, after the API has answered.
    phase = phase_of(job) if (job.get("status") or {}).get("phase") else "no status yet"
    print(
        f"{job['metadata']['name']} submitted ({phase}) to {client.server} "
        f"in namespace {client.namespace}"
    )


def _create(client: Client, manifest: Manifest) -> dict[str, Any]:
    path = client.jobs_path()
    return client.json("POST", path, body=manifest.body, content_type=manifest.content_type)


def apply(
    client: Client,
    file: Path,
    namespace: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    seed: int | None = None,
) -> None:
    """Creates the job, or brings the existing one to the manifest where the API can (see the
    module's docstring); ClientError naming every field it cannot change."""
    manifest = read_manifest(file, list(overrides), seed)
    if manifest.document is None:  # the server says why, as for submit
        return submit(client, file, namespace, overrides, seed)
    wanted = _comparable(manifest.document, file)
    client = placed(client, file, manifest, namespace)
    name = wanted["metadata"]["name"]
    try:
        current = client.json("GET", client.jobs_path(name))
    except ClientError as exc:
        if exc.http_status != 404:
            raise
        job = _create(client, manifest)
        print(f"{job['metadata']['name']} created in namespace {client.namespace}")
        return None
    changes = differences(wanted, _comparable(current, file))
    if not changes:
        print(f"{name} unchanged")
        return None
    fixed = [field for field in changes if field not in CHANGEABLE]
    if fixed:
        lines = [f"  {field}: {changes[field][1]!r} -> {changes[field][0]!r}" for field in fixed]
        raise ClientError(
            "\n".join(
                [
                    f"{file}: job {name} exists, and the API cannot change "
                    f"{'this field' if len(fixed) == 1 else 'these fields'} of it:",
                    *lines,
                    f"delete the job and submit it again (kuberl delete {name}; kuberl submit "
                    f"-f {file}), or change only {' and '.join(CHANGEABLE)}",
                ]
            ),
            EXIT_REFUSED,
        )
    _change(client, name, changes)
    return None


def _change(client: Client, name: str, changes: dict[str, tuple[Any, Any]]) -> None:
    """Makes the changes the API allows: the workers first, so that a resume starts with them."""
    if REPLICAS in changes:
        body = json.dumps({"workers": changes[REPLICAS][0]}).encode()
        path = client.jobs_path(name, "scale")
        print(scale_message(name, client.json("PUT", path, body=body, content_type=JSON)))
    if SUSPEND in changes:
        suspend = bool(changes[SUSPEND][0])
        job = client.json("POST", client.jobs_path(name, "suspend" if suspend else "resume"))
        print(suspend_message(name, suspend, job))


def _comparable(document: Any, file: Path) -> dict[str, Any]:
    """What apply compares of a job: its name, labels and spec, every default filled in (so
    that a field left out and one written as its default compare equal)."""
    if not isinstance(document, dict):
        raise ClientError(f"{file}: the manifest is not a mapping", EXIT_REFUSED)
    # The server's own fields (status, uid, annotations it writes) are no part of the request.
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    trimmed = {
        "apiVersion": document.get("apiVersion"),
        "kind": document.get("kind"),
        "metadata": {key: metadata[key] for key in ("name", "labels") if key in metadata},
        "spec": document.get("spec"),
    }
    try:
        job = validate_rljob(trimmed)
    except InvalidManifest as exc:
        problems = [f"  {problem}" for problem in exc.problems]
        raise ClientError(
            "\n".join([f"{file}: not a valid RLJob:", *problems]), EXIT_REFUSED
        ) from None
    dumped = job.model_dump(by_alias=True, mode="json")
    return {
        "metadata": {"name": job.name, "labels": dumped["metadata"]["labels"]},
        "spec": dumped["spec"],
    }


def differences(wanted: Any, current: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted field: (wanted, current)} for every leaf in which the two documents differ (a
    list is one leaf)."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        found: dict[str, tuple[Any, Any]] = {}
        for key in [*wanted, *(k for k in current if k not in wanted)]:
            where = f"{path}.{key}" if path else key
            found |= differences(wanted.get(key), current.get(key), where)
        return found
    return {} if wanted == current else {path: (wanted, current)}
