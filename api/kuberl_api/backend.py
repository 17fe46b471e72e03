"""What every backend offers the routes, and the errors they raise.

Routes speak only this interface, so the local backend (trainer processes and SQLite) and the
kubernetes backend (RLJob custom objects) answer the same requests the same way. Errors carry the
HTTP status and Kubernetes' `Status` reason, so a client reads one error shape whichever backend
is behind the API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from kuberl_operator.constants import PLURAL
from kuberl_operator.spec import Progress, RLJob

Verb = Literal["create", "list", "get", "update", "patch", "delete"]


class Cause(NamedTuple):
    """One reason a request was refused: the field it concerns (a dotted path) and why."""

    field: str
    message: str


class ApiError(Exception):
    """A request the API refuses, with its HTTP status and Kubernetes `Status` reason."""

    def __init__(
        self, code: int, reason: str, message: str, causes: list[Cause] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.causes = causes or []


def no_policy(namespace: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'job "{name}" in namespace "{namespace}" has no exported policy: one is exported when '
        "a stop condition ends the job (spec.trainer.checkpoint.exportPolicy, on by default)",
    )


def not_found(namespace: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'job "{name}" not found in namespace "{namespace}"')


def already_exists(namespace: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'job "{name}" already exists in namespace "{namespace}"')


def bad_request(field_path: str, message: str) -> ApiError:
    return ApiError(400, "BadRequest", f"{field_path}: {message}", [Cause(field_path, message)])


class Action(NamedTuple):
    """What a caller asks to do, in RBAC's terms: a verb on rljobs (or on one of their
    subresources: `scale`) in a namespace, or, with `namespace` None, at the cluster scope (in
    every namespace: GET /v1/jobs)."""

    verb: Verb
    namespace: str | None
    name: str | None = None
    subresource: str | None = None

    @property
    def resource(self) -> str:
        """`rljobs`, or `rljobs/scale` for a subresource, as RBAC rules and kubectl name it."""
        return PLURAL + (f"/{self.subresource}" if self.subresource else "")

    @property
    def scope(self) -> str:
        """Where, in the words of kubectl's refusals: `in namespace "x"` or `at the cluster
        scope`."""
        if self.namespace is None:
            return "at the cluster scope (in every namespace)"
        return f'in namespace "{self.namespace}"'


@dataclass(frozen=True)
class Identity:
    """Whose a bearer token is, as Kubernetes' UserInfo says (TokenReview's `status.user`, which a
    SubjectAccessReview asks about). Where no Kubernetes decides, a token holder has no name."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


class Authorizer(Protocol):
    """Says who may do what. `authenticate` says whose a token is, or raises ApiError 401 (who
    are you?); `check` whether they may do an action, or raises ApiError 403 (not allowed): a
    request that asks about several actions (a scrape of /metrics) authenticates once.
    `authorize` is the two for one action."""

    async def authenticate(self, token: str | None) -> Identity: ...

    async def check(self, identity: Identity, action: Action) -> None: ...

    async def authorize(self, token: str | None, action: Action) -> None: ...


@dataclass(frozen=True)
class ListQuery:
    """Filters and the chunk wanted, as Kubernetes spells them (`labelSelector`, `limit`,
    `continue`), plus the job's phase."""

    phase: str | None = None
    label_selector: str | None = None
    limit: int | None = None
    continue_token: str | None = None


@dataclass(frozen=True)
class JobChunk:
    """One chunk of a list, as Kubernetes serves a list `limit` items at a time; `continue_token`
    fetches the next, None on the last chunk."""

    items: list[dict[str, Any]]
    continue_token: str | None = None


# The phase of a job the operator has not reconciled yet (no status): accepted, not started, as
# Kubernetes says of a Pod; the operator's first status says Pending too.
NOT_SEEN_PHASE = "Pending"


@dataclass(frozen=True)
class JobSummary:
    """What /metrics reports about one job (bounded labels and three numbers)."""

    namespace: str
    name: str
    algorithm: str
    phase: str
    episode_return_mean: float | None = None
    evaluation_return_mean: float | None = None
    timesteps: int = 0

    @classmethod
    def of(cls, document: dict[str, Any]) -> JobSummary:
        """The summary of an RLJob document (as stored or as Kubernetes returns it)."""
        status = document.get("status") or {}
        progress = Progress.model_validate(status.get("progress") or {})
        return cls(
            namespace=document["metadata"].get("namespace") or "",
            name=document["metadata"]["name"],
            algorithm=str(document["spec"]["trainer"]["algorithm"]),
            phase=status.get("phase") or NOT_SEEN_PHASE,
            episode_return_mean=progress.episode_return_mean,
            evaluation_return_mean=progress.evaluation_return_mean,
            timesteps=progress.timesteps,
        )


@dataclass(frozen=True)
class ProgressRow:
    """One training iteration of a job's history."""

    iteration: int
    timesteps: int
    episode_return_mean: float | None = None
    evaluation_return_mean: float | None = None
    samples_per_second: float | None = None
    time_total_seconds: float | None = None
    checkpoint: str | None = None
    """The newest complete checkpoint when the row was written."""


class Backend(Protocol):
    """Where jobs live and run. Methods raise ApiError for anything the caller should read."""

    name: str
    """`local` or `kubernetes`, for /readyz and logs."""

    history_source: str
    """Where GET .../progress gets its rows, in words (shown in the OpenAPI description)."""

    counts_jobs: bool
    """Whether the API exports the count of jobs by phase (kuberl_jobs): where it runs them
    itself; on a cluster the operator counts them, once."""

    no_history_reason: str | None
    """Why the backend keeps no progress history to draw (GET .../plot answers 501 with it), or
    None when it keeps one."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def not_ready_reason(self) -> str | None:
        """None when the backend can serve requests, else why not."""
        ...

    async def create(self, namespace: str, job: RLJob, document: dict[str, Any]) -> dict[str, Any]:
        """Stores a validated job (`document` is the manifest as submitted) and returns it."""
        ...

    async def list(self, namespace: str | None, query: ListQuery) -> JobChunk:
        """One chunk of the namespace's jobs ordered by name, or, with `namespace` None, of every
        namespace's jobs ordered by namespace and name."""
        ...

    async def get(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def get_json(self, namespace: str, name: str) -> str:
        """The job as JSON text: the hot path of GET .../jobs/NAME skips a decode and re-encode
        where the backend stores JSON."""
        ...

    async def progress(self, namespace: str, name: str) -> list[ProgressRow]: ...

    async def set_suspended(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]: ...

    async def scale(self, namespace: str, name: str, workers: int) -> dict[str, Any]:
        """Sets the desired rollout workers (spec.rolloutWorkers.replicas) within the job's
        bounds; the job after the change. 422 outside the bounds, 409 where the backend cannot
        apply the change now (a running local trainer)."""
        ...

    async def delete(self, namespace: str, name: str, purge: bool = False) -> dict[str, Any]:
        """Stop the job and remove it; the job as it was. Its trained model is kept unless
        `purge` (where the backend keeps it: the local one's run directory; a cluster's
        checkpoints stay on their storage whatever is asked)."""

    async def logs(self, namespace: str, name: str, tail_lines: int | None) -> AsyncIterator[str]:
        """The trainer's (the driver's) output so far, or its last `tail_lines` lines (a line ends
        at a newline), in pieces of bounded size: a log is never held whole. Raises ApiError
        before the first piece (an unknown job is a 404)."""
        ...

    async def follow_logs(
        self, namespace: str, name: str, tail_lines: int | None
    ) -> AsyncIterator[str]:
        """The same, then what the trainer writes as it writes it, ending when it has ended. Raises
        ApiError before the first chunk (an unknown job is a 404), never after."""
        ...

    async def policy(self, namespace: str, name: str) -> bytes:
        """The greedy policy the job exported when it ended (ONNX): 404 before there is one,
        501 where the backend cannot reach the job's storage."""
        ...

    async def summaries(self) -> list[JobSummary]: ...
