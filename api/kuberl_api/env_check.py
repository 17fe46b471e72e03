"""The local backend checks a submitted job as `kuberl validate FILE` checks a file, env included:
an env id with a typo, an unsupported space or a wrapper that does not fit is a 422 naming
`spec.trainer.env` (or the field at fault) at submission, not a Failed job a moment later.

Making the env is what `kuberl validate` does by default, and for a `module:Class` env or wrapper
that runs the job's own code. So the check is `kuberl validate` itself, run in a process of its own
with the trainer's environment (processes.trainer_environment: without the API's token), never in
the API's process. The code it runs is the code the job's trainer would run moments later, as the
same user. (The kubernetes backend leaves the env to the driver: neither the API nor the operator
has the trainer's packages there.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kuberl_api.processes import trainer_environment
from kuberl_operator.validation import Problem

CHECK_TIMEOUT_S = 120.0
"""How long making the env may take (Atari's and MuJoCo's first import are the slow ones)."""
CHECKS_AT_ONCE = max(2, os.cpu_count() or 2)
"""Checks a backend runs at once: a burst of submissions waits for these rather than starting a
Python process per request all together."""


VERDICTS_KEPT = 256
"""Verdicts remembered (see env_problems); beyond that the oldest are forgotten."""
_verdicts: dict[str, asyncio.Future[list[Problem]]] = {}


async def env_problems(document: dict[str, Any], work_dir: Path) -> list[Problem]:
    """What `kuberl validate` finds wrong with the submitted job `document` (a valid RLJob by the
    spec's models), each with its field path; empty when nothing is. `work_dir` holds the
    manifest the check reads, for as long as it runs.

    A job whose env and wrappers name no module of their own (gymnasium's registered ids and
    wrappers only) gets the verdict of the same spec checked before, or of the check of it under
    way: it depends on the spec alone, and a burst of submissions of one spec (a sweep, a retry
    loop) then starts one Python process, not one each. A `module:Class` is checked every time,
    since its code may have changed."""
    key = verdict_key(document)
    if key is None:
        return await check(document, work_dir)
    if key not in _verdicts:
        while len(_verdicts) >= VERDICTS_KEPT:
            del _verdicts[next(iter(_verdicts))]
        _verdicts[key] = asyncio.ensure_future(check(document, work_dir))
    verdict = _verdicts[key]
    try:
        return list(await asyncio.shield(verdict))
    except BaseException:
        if verdict.done() and _verdicts.get(key) is verdict:
            del _verdicts[key]  # a check that failed or was cancelled is tried again next time
        raise


def verdict_key(document: dict[str, Any]) -> str | None:
    """The spec as the key of its verdict, or None where the env or a wrapper names a module
    (`module:Class`, or gymnasium's `module:EnvId`) whose code the check runs."""
    trainer = (document.get("spec") or {}).get("trainer") or {}
    if ":" in json.dumps([trainer.get("env"), trainer.get("wrappers")]):
        return None
    return json.dumps(document.get("spec"), sort_keys=True)


async def check(document: dict[str, Any], work_dir: Path) -> list[Problem]:
    """`kuberl validate` of `document` in a process of its own."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        manifest = Path(scratch) / "job.yaml"
        manifest.write_text(yaml.safe_dump(document, sort_keys=False))
        command = [sys.executable, "-m", "kuberl_cli.main", "validate", str(manifest)]
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=trainer_environment(os.environ),  # and the API's directory: as the trainer's
            start_new_session=True,  # its env's code gets no signal meant for the API
        )
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), CHECK_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return [
                Problem(
                    "spec.trainer.env",
                    f"making the env took over {CHECK_TIMEOUT_S:.0f} s when the job was checked: "
                    "make it faster to construct, or check it with `kuberl validate FILE`",
                )
            ]
    if process.returncode == 0:
        return []
    return problems_of(stderr.decode("utf-8", errors="replace"), str(manifest), process.returncode)


def problems_of(stderr: str, manifest: str, exit_code: int | None) -> list[Problem]:
    """`kuberl validate`'s problem lines (`FILE: field: why`) as Problems; warnings are not
    problems. Output of another shape (the check itself failed) becomes one problem saying so."""
    problems = []
    for line in stderr.splitlines():
        text = line.removeprefix(f"{manifest}: ")
        if text == line or text.startswith("warning: "):
            continue
        field, separator, message = text.partition(": ")
        if separator and field and " " not in field:
            problems.append(Problem(field, message))
        else:
            problems.append(Problem("", text))
    if problems:
        return problems
    # The last line says why (a traceback's is the exception), without this server's paths.
    last = stderr.replace(manifest, "the manifest").strip().splitlines()[-1:] or ["no output"]
    return [
        Problem(
            "spec.trainer.env",
            f"the job could not be checked (`kuberl validate` exited with {exit_code}: {last[0]})",
        )
    ]
