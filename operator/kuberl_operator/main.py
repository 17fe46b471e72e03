"""`kuberl-operator`: runs the operator, for one namespace or for the whole cluster.

Settings come from `KUBERL_*` environment variables, read once here (settings.py); a bad one
stops the operator at once with a message naming it, instead of failing on the first job. With
KUBERL_WEBHOOK_PORT set it also serves the validating admission webhook (admission.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

import kopf

from kuberl_operator.settings import InvalidSettings, OperatorSettings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="kuberl-operator",
        description="Reconcile RLJobs into KubeRay RayClusters and run their drivers.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable; default: KUBERL_WATCH_NAMESPACE, else every one)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8081/healthz",
        help="kopf's liveness endpoint for the pod's probe (default: %(default)s)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log at debug level")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = OperatorSettings.from_env(os.environ)
    except InvalidSettings as exc:
        print(f"kuberl-operator: invalid settings: {exc}", file=sys.stderr)
        return 2
    namespaces = args.namespace or ([settings.watch_namespace] if settings.watch_namespace else [])
    clusterwide = args.all_namespaces or not namespaces
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from kuberl_operator import admission
    from kuberl_operator.handlers import registry

    if settings.webhook_port:
        admission.register(registry, settings)
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=clusterwide,
            namespaces=[] if clusterwide else namespaces,
            standalone=True,  # one replica (the chart's Deployment uses the Recreate strategy)
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(settings=settings),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
