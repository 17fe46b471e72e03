"""The API's own response shapes (a job itself is the operator's `RLJob` model).

Errors use Kubernetes' `Status` shape, with one `details.causes` entry per bad field, so kubectl
users and Kubernetes client libraries read them without a second parser. Lists look like
Kubernetes lists (`items`, `metadata.continue`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from kuberl_operator.bounded import INT64_MAX
from kuberl_operator.constants import API_VERSION
from kuberl_operator.spec import RLJob


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class StatusCause(_Camel):
    field: str = Field(description="Dotted path of the offending field, such as spec.trainer.env.")
    message: str = Field(description="What is wrong with it and how to fix it.")
    reason: str = Field("FieldValueInvalid", description="Kubernetes' cause type.")


class StatusDetails(_Camel):
    name: str | None = Field(None, description="The job the error is about, when there is one.")
    kind: str = Field("rljobs", description="The resource.")
    causes: list[StatusCause] = Field(default_factory=list, description="One per bad field.")


class Status(_Camel):
    """An error, in the shape of Kubernetes' `Status`."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["Status"] = "Status"
    status: Literal["Failure"] = "Failure"
    code: int = Field(description="The HTTP status code.")
    reason: str = Field(description="NotFound, AlreadyExists, Invalid, Unauthorized, ...")
    message: str = Field(description="What went wrong, for people.")
    details: StatusDetails = Field(default_factory=StatusDetails)


class ListMeta(_Camel):
    continue_: str | None = Field(
        None,
        alias="continue",
        description="Pass as `continue` to get the next chunk; absent on the last chunk.",
    )


class RLJobList(_Camel):
    """A chunk of jobs, ordered by name."""

    api_version: Literal["kuberl.io/v1alpha1"] = API_VERSION
    kind: Literal["RLJobList"] = "RLJobList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[RLJob]


class ProgressPoint(_Camel):
    """One training iteration."""

    iteration: int = Field(ge=0, description="Training iterations completed.")
    timesteps: int = Field(ge=0, description="Env steps sampled in total.")
    episode_return_mean: float | None = Field(
        None, description="Mean return of the recent training episodes (null before the first)."
    )
    evaluation_return_mean: float | None = Field(
        None, description="The latest greedy evaluation's mean return, when the job evaluates."
    )
    samples_per_second: float | None = Field(None, description="Env steps sampled per second.")
    time_total_seconds: float | None = Field(None, description="Training time so far.")
    checkpoint: str | None = Field(
        None,
        description="Location (path or URI) of the newest complete checkpoint when the row was "
        "written; null before the first.",
    )


class ProgressHistory(_Camel):
    """A job's training progress, oldest iteration first."""

    namespace: str
    name: str
    source: str = Field(description="Where the rows come from (depends on the backend).")
    items: list[ProgressPoint]


class ScaleRequest(_Camel):
    """The desired number of rollout workers (PUT .../scale)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workers: int = Field(
        ge=0,
        le=INT64_MAX,
        description="Rollout workers wanted: spec.rolloutWorkers.replicas, within the job's "
        "minReplicas and maxReplicas.",
    )

    @field_validator("workers", mode="before")
    @classmethod
    def _integral_number(cls, value: object) -> object:
        """2.0 is an integer to JSON Schema (and the document says `integer`): taken as 2. A
        fraction or a string stays refused."""
        return int(value) if isinstance(value, float) and value.is_integer() else value


class JobScale(_Camel):
    """A job's rollout workers: how many are wanted, how many are ready, and the bounds a scale
    must stay within (GET .../scale)."""

    workers: int = Field(ge=0, description="Rollout workers wanted (spec.rolloutWorkers.replicas).")
    ready_workers: int = Field(
        ge=0,
        description="Rollout worker pods the operator counts in the job's current Ray cluster "
        "(status.replicas); 0 where the backend counts none (the local one).",
    )
    min_workers: int = Field(
        ge=0,
        description="The fewest workers the job may be scaled down to while it runs "
        "(spec.rolloutWorkers.minReplicas; without it, workers).",
    )
    max_workers: int = Field(
        ge=0,
        description="The most workers the job may be scaled up to while it runs "
        "(spec.rolloutWorkers.maxReplicas; without it, workers).",
    )
    elastic: bool = Field(
        description="Whether the fleet is elastic (minReplicas and maxReplicas both set): a "
        "running job on a cluster is then resized in place. Otherwise a new count applies with "
        "the job's next attempt."
    )
