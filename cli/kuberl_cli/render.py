"""`kuberl render FILE`: every object the operator would create for an RLJob, as YAML.

The objects come from the operator's own builders, with the operator's settings read from the
same `KUBERL_*` environment variables the operator reads, so a user can see (and diff, or apply
by hand) exactly what a job becomes on the cluster. A job those settings do not allow (a Secret,
image, PriorityClass or ServiceAccount outside their allow-lists: kuberl_operator.policy) is
refused here as the operator would refuse it, one line per problem. The Ray auth token is a
placeholder: the operator derives the real one from the job's UID when it creates the Secret.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from kuberl_cli.validate import EXIT_INVALID, EXIT_OK, checked_job

TOKEN_PLACEHOLDER = "<generated at creation>"
FIRST_ATTEMPT = 1


def render_command(file: Path, check_env: bool = True) -> int:
    """Prints the objects of a valid job and returns 0; for an invalid one, prints its problems as
    `kuberl validate` does (making the env unless `check_env` is false) and returns its exit
    code."""
    job, exit_code = checked_job(file, check_env)
    if job is None:
        return exit_code

    from kuberl_operator.builders import build_children, driver_entrypoint, submission_id
    from kuberl_operator.policy import reach_problems
    from kuberl_operator.settings import InvalidSettings, OperatorSettings

    try:
        settings = OperatorSettings.from_env(os.environ)
    except InvalidSettings as exc:
        print(f"operator settings: {exc}", file=sys.stderr)
        return EXIT_INVALID
    problems = reach_problems(job, settings)
    for problem in problems:
        print(f"{file}: {problem}", file=sys.stderr)
    if problems:
        return EXIT_INVALID
    objects = build_children(job, settings, FIRST_ATTEMPT, TOKEN_PLACEHOLDER)
    print(
        f"# Objects the kuberl operator creates for RLJob {job.name} (attempt {FIRST_ATTEMPT}).\n"
        f"# It then submits the driver to the Ray Jobs API as {submission_id(job, FIRST_ATTEMPT)}:"
        f"\n#   {driver_entrypoint(job, settings)}"
    )
    print(yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=100), end="")
    return EXIT_OK


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the job's manifest in the ConfigMap) as readable `|` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # repeated labels are written out, not as &id001 anchors


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)
