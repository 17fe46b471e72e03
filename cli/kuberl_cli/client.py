"""`kuberl submit`, `logs`, `suspend`, `resume`, `scale`, `delete`: the REST API from a terminal,
in the spirit of kubectl (`get`, `describe` and the older `jobs` and `status` are in
kuberl_cli.get, and the commands' arguments and options in kuberl_cli.api_commands). A job is
named as kubectl names an object, `job NAME` or `rljob/NAME`, or by its name alone (job_name), by
every command that takes one.

Standard library HTTP only, so the client needs nothing beyond the CLI's own dependencies. Every
failure ends in one clear line on stderr (the server's message, and each bad field on a line of
its own) and a non-zero exit status: 1 when the server refused, 2 when the file is missing, 3 when
the server cannot be reached, 130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kuberl_cli.views import finished, phase_of
from kuberl_operator.constants import KEPT_FILES_ANNOTATION, KIND, PLURAL, SHORT_NAMES
from kuberl_operator.spec import Phase

# kuberl's own port: 8080 is the operator's metrics' (and a thousand dev servers').
DEFAULT_PORT = 8470
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
SERVER_ENV, TOKEN_ENV = "KUBERL_SERVER", "KUBERL_API_TOKEN"
EXIT_OK, EXIT_REFUSED, EXIT_NO_FILE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
DEFAULT_NAMESPACE = "default"

RESOURCES = frozenset({"job", "jobs", KIND.lower(), PLURAL, *SHORT_NAMES, f"{PLURAL}.kuberl.io"})
"""The names `get`, `describe` and `delete` accept for the resource, as kubectl accepts `pod`,
`pods` and `po`."""


class ClientError(Exception):
    """A request that did not succeed; `exit_code` says how, the message says why, and
    `http_status` is the server's answer when there was one."""

    def __init__(self, message: str, exit_code: int, http_status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code, self.http_status = exit_code, http_status


@dataclass(frozen=True)
class Client:
    server: str
    token: str | None
    namespace: str

    @classmethod
    def from_options(cls, server: str | None, token: str | None, namespace: str) -> Client:
        server = server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
        return cls(server.rstrip("/"), token or os.environ.get(TOKEN_ENV) or None, namespace)

    @staticmethod
    def every_namespace_path() -> str:
        """The list of every namespace's jobs (-A)."""
        return "/v1/jobs"

    def jobs_path(self, name: str = "", action: str = "") -> str:
        path = f"/v1/namespaces/{urllib.parse.quote(self.namespace, safe='')}/jobs"
        path += f"/{urllib.parse.quote(name, safe='')}" if name else ""
        return path + (f"/{action}" if action else "")

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> bytes:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(url, data=body, method=method)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise ClientError(_refusal(exc.code, exc.read()), EXIT_REFUSED, exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(
                f"cannot reach the kuberl API at {self.server}: {reason} (is `kuberl serve` "
                f"running? set --server or {SERVER_ENV})",
                EXIT_UNREACHABLE,
            ) from None

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return json.loads(self.call(method, path, **kwargs))


def resource_and_name(words: list[str], command: str) -> str | None:
    """The job's name in `[RESOURCE] [NAME]` or `RESOURCE/NAME` (None when only the resource is
    named); ClientError naming the word when the resource is not a job."""
    if len(words) == 1 and "/" in words[0]:
        words = words[0].split("/", 1)
    resource, *rest = words
    if resource.lower() not in RESOURCES:
        raise ClientError(
            f'{command}: unknown resource type "{resource}": kuberl serves jobs '
            f"(also {', '.join(sorted(RESOURCES - {'jobs'}))})",
            EXIT_REFUSED,
        )
    if len(rest) > 1:
        raise ClientError(f"{command}: one job name at a time, got {' '.join(rest)}", EXIT_REFUSED)
    return rest[0] if rest else None


def named_job(words: list[str], command: str) -> str:
    """As resource_and_name, for a command that needs the job's name: ClientError without one."""
    name = resource_and_name(words, command)
    if name is None:
        raise ClientError(f"{command}: name the job: kuberl {command} job NAME", EXIT_REFUSED)
    return name


def job_name(words: str | list[str], command: str) -> str:
    """The job's name in `NAME` alone, `TYPE/NAME` or `TYPE NAME` (kubectl's forms, TYPE one of
    RESOURCES): the one reading of a job's name for every command that takes one."""
    words = [words] if isinstance(words, str) else words
    alone = len(words) == 1 and "/" not in words[0] and words[0].lower() not in RESOURCES
    return words[0] if alone else named_job(words, command)


def _refusal(code: int, body: bytes) -> str:
    """The server's Status message and causes, one per line."""
    try:
        status = json.loads(body)
        message = status["message"]
        causes = (status.get("details") or {}).get("causes") or []
    except (ValueError, KeyError, TypeError):
        return f"HTTP {code}: {body.decode(errors='replace').strip()[:500]}"
    if causes:
        lines = [f"  {c['field'] or '(document)'}: {c['message']}" for c in causes]
        return "\n".join([f"HTTP {code}: {status.get('reason', 'Error')}", *lines])
    return f"HTTP {code}: {message}"


def run(action: Any, *args: Any) -> int:
    """Runs a command body, turning ClientError into its message and exit status."""
    try:
        action(*args)
    except ClientError as exc:
        print(f"kuberl: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # ends a watch: no traceback
        return EXIT_INTERRUPTED
    return EXIT_OK


# --- commands -----------------------------------------------------------------------------------


def logs(client: Client, name: str, tail: int | None, follow: bool = False) -> None:
    """The job's output; with `follow`, each line as the server streams it, until the server ends
    the stream (the job has ended). `name` may be `job/NAME`, as kubectl logs takes it."""
    path = client.jobs_path(job_name(name, "logs"), "logs")
    if not follow:
        text = client.call("GET", path, params={"tailLines": tail})
        sys.stdout.write(text.decode("utf-8", errors="replace"))
        return
    query = {"follow": "true"} | ({"tailLines": str(tail)} if tail is not None else {})
    request = urllib.request.Request(f"{client.server}{path}?{urllib.parse.urlencode(query)}")
    if client.token:
        request.add_header("Authorization", f"Bearer {client.token}")
    try:
        # No timeout: a trainer may print nothing for minutes, and the server ends the stream.
        with urllib.request.urlopen(request) as response:
            for line in response:  # the chunked body, a line at a time, as it arrives
                sys.stdout.write(line.decode("utf-8", errors="replace"))
                sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): done, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the exit's flush
    except urllib.error.HTTPError as exc:
        raise ClientError(_refusal(exc.code, exc.read()), EXIT_REFUSED, exc.code) from None
    except (urllib.error.URLError, OSError) as exc:  # unreachable, or gone while streaming
        reason = getattr(exc, "reason", exc)
        raise ClientError(
            f"cannot reach the kuberl API at {client.server}: {reason}", EXIT_UNREACHABLE
        ) from None


def set_suspended(client: Client, name: str, suspend: bool) -> None:
    """Suspends or resumes the job `name` names (NAME, job/NAME)."""
    verb = "suspend" if suspend else "resume"
    name = job_name(name, verb)
    job = client.json("POST", client.jobs_path(name, verb))
    print(suspend_message(name, suspend, job))


def suspend_message(name: str, suspend: bool, job: dict[str, Any]) -> str:
    """What a suspend or resume did, as the job's phase says: a finished job is neither suspended
    nor resumed (its spec.suspend is set, and nothing runs)."""
    phase = phase_of(job)
    if finished(job):
        verb = "suspend" if suspend else "resume"
        return f"{name} already finished ({phase}): there is nothing to {verb}"
    if not suspend:
        return f"{name} resumed ({phase})"
    return f"{name} {'suspended' if phase == Phase.SUSPENDED else 'suspending'} ({phase})"


def scale(client: Client, words: list[str], workers: int) -> None:
    """Sets the rollout workers of the job `words` name (job NAME, rljob/NAME), as `kubectl scale
    rljob/NAME --replicas=N` does."""
    name = job_name(words, "scale")
    body = json.dumps({"workers": workers}).encode()
    path = client.jobs_path(name, "scale")
    job = client.json("PUT", path, body=body, content_type="application/json")
    print(scale_message(name, job))


def scale_message(name: str, job: dict[str, Any]) -> str:
    """What a scale did: the workers now wanted, and how many the job has ready."""
    wanted = job["spec"]["rolloutWorkers"]["replicas"]
    ready = (job.get("status") or {}).get("replicas") or 0
    return f"{name} scaled to {wanted} worker{'' if wanted == 1 else 's'} ({ready} ready)"


def delete(client: Client, words: list[str], purge: bool = False) -> None:
    """Deletes the job `words` name as kubectl names it (job NAME, rljob/NAME), or by its name
    alone, as `kuberl delete NAME` always has; its run directory goes too with `purge`."""
    name = job_name(words, "delete")
    params = {"purge": "true"} if purge else None
    job = client.json("DELETE", client.jobs_path(name), params=params)
    kept = (job.get("metadata", {}).get("annotations") or {}).get(KEPT_FILES_ANNOTATION)
    if kept:
        print(f"{name} deleted; its run directory (checkpoints, progress) is kept in {kept}")
    else:
        print(f"{name} deleted")
