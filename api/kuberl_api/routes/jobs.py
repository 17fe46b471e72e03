"""The jobs routes, under /v1/namespaces/{namespace}/jobs: submit, list and get RLJobs, follow them
(progress, logs, learning curve) and control them (suspend, resume, delete); and /v1/jobs, the
list of every namespace's jobs (`kuberl get jobs -A`, as `kubectl get rljobs -A`).

Every route authorizes first (the verb RBAC would check, on rljobs in the URL's namespace, or at
the cluster scope for /v1/jobs), then asks the backend. Every status code a route can answer is
declared in its `responses`.

The router is built per app (`router`): the progress route's description names where this
deployment's backend reads progress from. The routes are listed there in the order of the OpenAPI
document.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from kuberl_api.backend import ApiError, Backend, ListQuery, bad_request
from kuberl_api.deps import BackendDep, Caller, CurrentCaller, NoBody, PageCaller
from kuberl_api.errors import status_response
from kuberl_api.guard import read_body
from kuberl_api.log_follows import (
    Follows,
    TooManyFollows,
    aclose,
    caller_of,
    closing,
    follows_of,
)
from kuberl_api.page import PLOT_ROUTE
from kuberl_api.routes.documented import (
    LOGS,
    PLOT,
    POLICY,
    SUBMISSION,
    JobName,
    Namespace,
    error_responses,
)
from kuberl_api.schemas import ProgressHistory, ProgressPoint, RLJobList
from kuberl_api.submission import MAX_BODY_BYTES, parse_submission
from kuberl_contract.plots import MEDIA_TYPES, Curve, PlotFormat, draw
from kuberl_operator.spec import Phase, RLJob

TEXT = "text/plain; charset=utf-8"

WATCH_REFUSED = (
    "watching is not supported by this API: poll GET .../jobs or .../jobs/{name} instead "
    "(`kuberl get jobs -w` does)"
)


async def submit_job(
    namespace: Namespace, request: Request, caller: CurrentCaller, backend: BackendDep
):
    """Submit a job. 201 with the stored job; 409 when the name is taken; 422 naming every
    bad field. Nothing is stored unless the whole job is valid."""
    await caller.authorize("create", namespace)
    body = await read_body(request, MAX_BODY_BYTES)
    job_model, document = parse_submission(body, request.headers.get("content-type"), namespace)
    warm_start = job_model.spec.trainer.warm_start
    if warm_start is not None and warm_start.job is not None:
        # Starting from another job's policy reads it: only for a caller who may read that job.
        await caller.authorize("get", namespace, warm_start.job)
    stored = await backend.create(namespace, job_model, document)
    return JSONResponse(stored, status_code=201)


PhaseFilter = Annotated[Phase | None, Query(description="Only jobs in this phase.")]
LabelSelector = Annotated[
    str | None,
    Query(
        alias="labelSelector",
        description="Kubernetes label selector: `team=rl,tier in (a,b),!canary`.",
    ),
]
Limit = Annotated[int | None, Query(ge=0, description="At most this many jobs (0: no limit).")]
Continue = Annotated[
    str | None,
    Query(alias="continue", description="`metadata.continue` of the previous chunk."),
]
Watch = Annotated[
    bool,
    Query(
        description="Only `false` is served: `true` is refused with 400 (this API streams no "
        "watch events). Poll the list or the job instead, as `kuberl get jobs -w` does.",
        json_schema_extra={"enum": [False]},
    ),
]


async def list_jobs(
    namespace: Namespace,
    caller: CurrentCaller,
    backend: BackendDep,
    phase: PhaseFilter = None,
    label_selector: LabelSelector = None,
    limit: Limit = None,
    continue_token: Continue = None,
    watch: Watch = False,
):
    """List the namespace's jobs by name, a chunk at a time."""
    query = ListQuery(phase, label_selector, limit or None, continue_token)
    return await _listed(namespace, query, watch, caller, backend)


async def list_jobs_of_every_namespace(
    caller: CurrentCaller,
    backend: BackendDep,
    phase: PhaseFilter = None,
    label_selector: LabelSelector = None,
    limit: Limit = None,
    continue_token: Continue = None,
    watch: Watch = False,
):
    """List every namespace's jobs, by namespace and name, a chunk at a time. Authorized as
    `list` on rljobs at the cluster scope: on the kubernetes backend only a ClusterRoleBinding
    grants it (as for `kubectl get rljobs -A`), so a caller allowed in some namespaces only is
    refused (403) rather than shown those."""
    query = ListQuery(phase, label_selector, limit or None, continue_token)
    return await _listed(None, query, watch, caller, backend)


async def _listed(
    namespace: str | None, query: ListQuery, watch: bool, caller: Caller, backend: Backend
) -> JSONResponse:
    """The RLJobList of `namespace` (of every namespace when None)."""
    if watch:
        # Refused rather than ignored: a kubectl-style client would otherwise take one list for
        # a stream of events that never comes.
        raise bad_request("watch", WATCH_REFUSED)
    await caller.authorize("list", namespace)
    found = await backend.list(namespace, query)
    metadata = {"continue": found.continue_token} if found.continue_token else {}
    return JSONResponse(
        {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLJobList", "metadata": metadata}
        | {"items": found.items}
    )


async def get_job(namespace: Namespace, name: JobName, caller: PageCaller, backend: BackendDep):
    """One job, with its status. The status page's cookie is accepted in place of the bearer
    token."""
    await caller.authorize("get", namespace, name)
    return Response(await backend.get_json(namespace, name), media_type="application/json")


async def job_progress(
    namespace: Namespace, name: JobName, caller: CurrentCaller, backend: BackendDep
):
    await caller.authorize("get", namespace, name)
    rows = await backend.progress(namespace, name)
    history = ProgressHistory(
        namespace=namespace,
        name=name,
        source=backend.history_source,
        items=[ProgressPoint(**asdict(row)) for row in rows],
    )
    return JSONResponse(history.model_dump(mode="json", by_alias=True))


async def suspend_job(
    namespace: Namespace, name: JobName, caller: CurrentCaller, backend: BackendDep
):
    """Set spec.suspend: a running trainer checkpoints and stops; the job is Suspended."""
    await caller.authorize("patch", namespace, name)
    return JSONResponse(await backend.set_suspended(namespace, name, True))


async def resume_job(
    namespace: Namespace, name: JobName, caller: CurrentCaller, backend: BackendDep
):
    """Clear spec.suspend: the job continues from its newest checkpoint."""
    await caller.authorize("patch", namespace, name)
    return JSONResponse(await backend.set_suspended(namespace, name, False))


async def delete_job(
    namespace: Namespace,
    name: JobName,
    caller: CurrentCaller,
    backend: BackendDep,
    purge: Annotated[
        bool,
        Query(
            description="Also remove the job's files where the backend keeps them (the local "
            "backend's run directory: checkpoints, progress, the exported policy). Without it "
            "they are kept, and the answer's annotation kuberl.io/kept-run-directory says where."
        ),
    ] = False,
):
    """Stop the job's trainer and remove the job; answers the job as it was."""
    await caller.authorize("delete", namespace, name)
    return JSONResponse(await backend.delete(namespace, name, purge))


async def job_logs(
    namespace: Namespace,
    name: JobName,
    caller: PageCaller,
    backend: BackendDep,
    follows: Annotated[Follows, Depends(follows_of)],
    tail_lines: Annotated[
        int | None,
        Query(
            alias="tailLines",
            ge=0,
            description="Only the last N lines (with `follow`: start from them).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        Query(
            description="Stream the output as it is written (chunked text/plain), until the "
            "trainer has ended: at once for a job that has (Succeeded, Failed, Suspended), "
            "waiting for one that is still to start. A job is followed at most "
            "KUBERL_LOG_FOLLOWS_PER_JOB times at once (8), and a caller follows at most "
            "KUBERL_LOG_FOLLOWS_PER_CALLER logs at once (4): beyond that, 429 with Retry-After."
        ),
    ] = False,
):
    """The trainer's output (stdout and stderr), streamed: on the local backend its log file, on
    the kubernetes backend the driver's log as the job's Ray head serves it (through the
    operator's log relay). The status page's cookie is accepted in place of the bearer token."""
    await caller.authorize("get", namespace, name)
    if not follow:
        chunks = await backend.logs(namespace, name, tail_lines)  # errors before the stream
        return StreamingResponse(chunks, media_type=TEXT, background=BackgroundTask(aclose, chunks))
    chunks = await backend.follow_logs(namespace, name, tail_lines)  # errors before the stream
    try:
        close = follows.open(caller_of(caller.token), (namespace, name))
    except TooManyFollows as refused:
        await aclose(chunks)
        retry = {"Retry-After": str(refused.retry_after_s)}
        return status_response(refused.code, refused.reason, refused.message, headers=retry)
    stream = closing(chunks, close)  # the follow's place is given back when the stream ends
    # X-Accel-Buffering: an nginx ingress in front would otherwise hold the stream back.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    # The background task closes the stream when the client went away mid-way (the response
    # then stops iterating it without closing it).
    return StreamingResponse(
        stream, media_type=TEXT, headers=headers, background=BackgroundTask(stream.aclose)
    )


async def job_plot(
    namespace: Namespace,
    name: JobName,
    caller: PageCaller,
    backend: BackendDep,
    format: Annotated[PlotFormat, Query(description="The image format.")] = "png",
):
    """The job's learning curve: the mean episode return (the greedy evaluation's dashed)
    against env steps; a job without progress yet gets a figure saying so. The status page's
    cookie is accepted in place of the bearer token. 501 where the backend keeps no history."""
    await caller.authorize("get", namespace, name)
    if backend.no_history_reason:
        await backend.get(namespace, name)  # an unknown job is a 404 all the same
        raise ApiError(501, "NotImplemented", backend.no_history_reason)
    rows = await backend.progress(namespace, name)
    curve = Curve(
        name,
        timesteps=[row.timesteps for row in rows],
        returns=[row.episode_return_mean for row in rows],
        evaluation_returns=[row.evaluation_return_mean for row in rows],
    )
    # matplotlib draws for tens of milliseconds: off the event loop.
    image = await asyncio.to_thread(draw, [curve], format, name)
    return Response(image, media_type=MEDIA_TYPES[format], headers={"Cache-Control": "no-cache"})


async def job_policy(namespace: Namespace, name: JobName, caller: PageCaller, backend: BackendDep):
    """The greedy policy the job exported when a stop condition ended it: an ONNX graph,
    observation in, action out (see `kuberl export`), for onnxruntime or `kuberl evaluate`. The
    status page's cookie is accepted in place of the bearer token; 404 while there is none."""
    await caller.authorize("get", namespace, name)
    return Response(
        await backend.policy(namespace, name),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}.onnx"'},
    )


def router(history_source: str) -> APIRouter:
    """The jobs routes of an app whose backend reads progress from `history_source`."""
    every_namespace = APIRouter(tags=["jobs"])
    every_namespace.add_api_route(
        "/v1/jobs",
        list_jobs_of_every_namespace,
        methods=["GET"],
        response_model=RLJobList,
        responses=error_responses(),
    )
    every_namespace.include_router(_namespaced(history_source))
    return every_namespace


def _namespaced(history_source: str) -> APIRouter:
    """The routes under /v1/namespaces/{namespace}/jobs."""
    jobs = APIRouter(prefix="/v1/namespaces/{namespace}/jobs", tags=["jobs"])
    jobs.add_api_route(
        "",
        submit_job,
        methods=["POST"],
        status_code=201,
        response_model=RLJob,
        responses=error_responses(404, 409, 413, 415, 422),
        openapi_extra=SUBMISSION,
    )
    jobs.add_api_route(
        "", list_jobs, methods=["GET"], response_model=RLJobList, responses=error_responses()
    )
    jobs.add_api_route(
        "/{name}", get_job, methods=["GET"], response_model=RLJob, responses=error_responses(404)
    )
    jobs.add_api_route(
        "/{name}/progress",
        job_progress,
        methods=["GET"],
        response_model=ProgressHistory,
        responses=error_responses(404),
        description="The job's training progress, one row per iteration. Source in this "
        f"deployment: {history_source}.",
    )
    for path, endpoint, method in (
        ("/{name}/suspend", suspend_job, "POST"),
        ("/{name}/resume", resume_job, "POST"),
        ("/{name}", delete_job, "DELETE"),
    ):
        jobs.add_api_route(
            path,
            endpoint,
            methods=[method],
            response_model=RLJob,
            responses=error_responses(404, 415),
            dependencies=NoBody,
        )
    # response_class=Response, as for the policy and the plot: the 200 is text, not JSON.
    jobs.add_api_route(
        "/{name}/logs", job_logs, methods=["GET"], response_class=Response, responses=LOGS
    )
    jobs.add_api_route(
        "/{name}/policy",
        job_policy,
        methods=["GET"],
        response_class=Response,
        responses=POLICY,
    )
    jobs.add_api_route(
        "/{name}/plot",
        job_plot,
        methods=["GET"],
        name=PLOT_ROUTE,
        response_class=Response,
        responses=PLOT,
    )
    return jobs
