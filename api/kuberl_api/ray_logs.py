"""A cluster job's driver output, read where Ray keeps it: the Ray Jobs API of the job's head
(`GET /api/jobs/{submission id}/logs`). The operator submits the driver there, and Ray writes its
output to a file inside the head pod, which `kubectl logs` does not show.

The API reaches the head as the operator does, over the operator's client
(kuberl_operator.ray_jobs), and presents the job's Ray auth token, derived as the operator derives
it from the operator's key (KUBERL_RAY_AUTH_KEY, set from the Secret that holds the operator's)
and the job's namespace, name and UID. So the API reads no Secret and its ServiceAccount gains no
right; each job's NetworkPolicy admits the API's pods to the head's dashboard port, and nothing
else of the head (builders.children.build_network_policy).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kuberl_api.backend import ApiError, last_lines
from kuberl_operator.builders import child_names, ray_auth_token, submission_id
from kuberl_operator.ray_jobs import RayHeads, RayJobsClient, RayJobsError
from kuberl_operator.settings import InvalidSettings, OperatorSettings, env_name
from kuberl_operator.spec import Phase, RLJob
from kuberl_operator.status.phases import ACTIVE

# The operator's settings the API needs to find a head and speak to it; read from the same
# variables as the operator's.
SETTINGS = ("ray_auth_key", "ray_dashboard_url")
KEY_ENV = env_name("ray_auth_key")


@dataclass(frozen=True)
class Driver:
    """A job's current driver: the Jobs API of its attempt's head and its submission id."""

    jobs: RayJobsClient
    submission_id: str


class DriverLogs:
    """Reads the drivers' output of every job, over one HTTP session (`close` ends it)."""

    def __init__(self, environ: Mapping[str, str], poll_s: float = 1.0) -> None:
        """Settings from `environ` (KUBERL_RAY_AUTH_KEY, KUBERL_RAY_DASHBOARD_URL), read once."""
        given = {env_name(f): environ[env_name(f)] for f in SETTINGS if environ.get(env_name(f))}
        self.poll_s = poll_s
        self.heads = RayHeads()
        self.settings = OperatorSettings()
        self.unavailable: str | None = None
        """Why no driver's output can be read (answered as 501), or None."""
        try:
            self.settings = OperatorSettings.from_env(given)
        except InvalidSettings as exc:
            self.unavailable = f"the API's settings are unusable: {exc}"
        if self.unavailable is None and self.settings.ray_auth_key is None:
            self.unavailable = (
                f"the API has no Ray auth key ({KEY_ENV}, the operator's) to read the driver's "
                "output from the job's Ray head: give it the operator's key (the `key` of the "
                "chart's <release>-ray-auth-key Secret), or "
                "read it in the head pod, where Ray writes it to a file (`kubectl logs` does not "
                "show it): kubectl exec <head pod> -- ray job logs <job>-<attempt>"
            )

    async def close(self) -> None:
        await self.heads.close()

    def driver(self, job: dict[str, Any]) -> Driver | None:
        """Where the job's current driver is, or None before its first attempt. Raises ApiError
        501 when the API cannot speak to heads at all."""
        if self.unavailable:
            raise ApiError(501, "NotImplemented", self.unavailable)
        try:
            model = RLJob.model_validate(job)
        except ValidationError:
            return None  # the operator fails such a job without submitting a driver
        namespace, uid = model.metadata.namespace or "default", job["metadata"].get("uid")
        if model.status.attempt == 0 or not uid:
            return None
        token = ray_auth_token(self.settings, namespace, model.name, uid)
        # The head Service the operator reaches the job's head by (reconciler._head_url).
        names = child_names(model)
        url = self.settings.dashboard_url(names.head_service, names.ray_cluster, namespace)
        return Driver(self.heads.jobs(url, token), submission_id(model, model.status.attempt))

    async def snapshot(self, job: dict[str, Any], tail_lines: int | None) -> str:
        """The driver's output so far ("" before there is a driver)."""
        driver = self.driver(job)
        if driver is None:
            return ""
        try:
            return last_lines(await driver.jobs.logs(driver.submission_id), tail_lines)
        except RayJobsError as exc:
            raise _unreachable(job, exc) from None

    async def follow(
        self,
        job: dict[str, Any],
        read_job: Callable[[], Awaitable[dict[str, Any]]],
        tail_lines: int | None,
    ) -> AsyncIterator[str]:
        """The driver's output as it is written, until the Ray job ends. Before there is a driver
        (the job is Pending, or its head is coming up) the job is read again (`read_job`) every
        poll; the stream ends at once when the job is not active (finished or suspended: its Ray
        cluster is gone or going) or no longer exists."""
        while True:
            driver = self.driver(job)
            if driver is not None:
                try:
                    found = await driver.jobs.status(driver.submission_id)
                    text = await driver.jobs.logs(driver.submission_id) if found else ""
                except RayJobsError:
                    found = None  # the head is not up (yet, or any more)
                if found is not None:
                    if shown := last_lines(text, tail_lines):
                        yield shown
                    async for chunk in driver.jobs.follow_logs(
                        driver.submission_id, after=len(text), poll_s=self.poll_s
                    ):
                        yield chunk
                    return
            if not _active(job):
                return
            await asyncio.sleep(self.poll_s)
            try:
                job = await read_job()
            except ApiError:
                return  # deleted meanwhile


def _active(job: dict[str, Any]) -> bool:
    """Whether the job has, or will get by itself, a running driver (a job the operator has not
    seen yet has no phase: it is about to be Pending)."""
    return ((job.get("status") or {}).get("phase") or Phase.PENDING) in ACTIVE


def _unreachable(job: dict[str, Any], exc: RayJobsError) -> ApiError:
    name = job["metadata"]["name"]
    if _active(job):
        return ApiError(
            503,
            "ServiceUnavailable",
            f"the driver's output of job {name} is on its Ray head, which cannot be read now "
            f"(it may be starting): {exc}",
        )
    return ApiError(
        404,
        "NotFound",
        f"job {name} has no driver output any more: it was on the job's Ray head, which the "
        f"operator deletes when the job finishes or is suspended ({exc})",
    )
