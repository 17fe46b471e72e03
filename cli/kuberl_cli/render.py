"""`kuberl render FILE`: every object the operator would create for an RLJob, as YAML.

The objects come from the operator's own builders, with the operator's settings read from the
same `KUBERL_*` environment variables the operator reads, so a user can see (and diff, or apply
by hand) exactly what a job becomes on the cluster. A job those settings do not allow (a Secret,
image, PriorityClass or ServiceAccount outside their allow-lists: kuberl_operator.reach) is
refused here as the operator would refuse it, one line per problem.

The Secret with the job's Ray auth token is left out (and stderr says so): the operator creates it
with a token of its own (derived with its key from the job's UID, which exists only once the RLJob
does, or drawn at random). A token printed
here would be one everybody can read, and `kuberl render | kubectl apply -f -` would give the
cluster exactly that; without the Secret, a cluster applied by hand does not start until one is
made with a secret token (the message says how).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml

from kuberl_cli.validate import EXIT_INVALID, EXIT_OK, checked_job

FIRST_ATTEMPT = 1


def render_command(file: Path, check_env: bool = True) -> int:
    """Prints the objects of a valid job and returns 0; for an invalid one, prints its problems as
    `kuberl validate` does (making the env unless `check_env` is false) and returns its exit
    code."""
    job, exit_code = checked_job(file, check_env)
    if job is None:
        return exit_code

    from kuberl_operator.builders import (
        build_children,
        child_names,
        driver_entrypoint,
        submission_id,
    )
    from kuberl_operator.builders.driver import ephemeral_checkpoints
    from kuberl_operator.reach import reach_problems
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
    secret = child_names(job).auth_secret
    # The builders need a token to build the Secret, which is then dropped: this one never leaves.
    objects = [
        child
        for child in build_children(job, settings, FIRST_ATTEMPT, secrets.token_urlsafe(32))
        if not (child["kind"] == "Secret" and child["metadata"]["name"] == secret)
    ]
    print(left_out_secret(secret), file=sys.stderr)
    # Said here, where the objects go to a cluster: a run on this machine keeps its directory.
    if warning := ephemeral_checkpoints(job.spec):
        print(f"{file}: warning: {warning}", file=sys.stderr)
    print(
        f"# Objects the kuberl operator creates for RLJob {job.name} (attempt {FIRST_ATTEMPT}),\n"
        f"# less the Secret {secret} with the Ray auth token, which it makes with the job.\n"
        f"# It then submits the driver to the Ray Jobs API as {submission_id(job, FIRST_ATTEMPT)}:"
        f"\n#   {driver_entrypoint(job, settings)}"
    )
    print(yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=100), end="")
    return EXIT_OK


def left_out_secret(secret: str) -> str:
    """What stderr says of the Secret that is not printed, and how to make it by hand."""
    from kuberl_operator.constants import RAY_AUTH_TOKEN_SECRET_KEY

    return (
        f"kuberl render: the Secret {secret} (the Ray cluster's auth token) is not printed: the "
        "operator creates it with a token of its own when it creates the job. To apply these "
        f"objects without the operator, create it first: kubectl create secret generic {secret} "
        f'--from-literal={RAY_AUTH_TOKEN_SECRET_KEY}="$(openssl rand -base64 32)"'
    )


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the job's manifest in the ConfigMap) as readable `|` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # repeated labels are written out, not as &id001 anchors


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)
