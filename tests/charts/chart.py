"""The kuberl Helm chart rendered offline, the way `helm template` renders it: one import for every
chart test (templates, RBAC, monitoring).

`render(values)` returns the rendered objects; `api_versions` plays the cluster's discovery (for
`.Capabilities.APIVersions`), so a test can render as if the Prometheus Operator were installed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart, _native

from testkit import ROOT

CHART_DIR = ROOT / "charts" / "kuberl"
RELEASE = "kuberl"
NAMESPACE = "kuberl-system"
# The Kubernetes version the chart is rendered, linted and validated for (kubernetes-validate).
KUBE_VERSION = "1.32.0"
# What the cluster's discovery lists when the Prometheus Operator's CRDs are installed.
PROMETHEUS_OPERATOR_API_VERSIONS = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)


def load() -> Chart:
    """The chart, loaded from its directory (symlinks followed, as `helm package` does)."""
    return Chart.load(CHART_DIR)


def render_templates(
    values: dict[str, Any] | None = None,
    *,
    api_versions: Iterable[str] = (),
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """{template path: rendered text}, as `helm template NAME charts/kuberl --namespace NAMESPACE
    --kube-version KUBE_VERSION --api-versions ...` gives them."""
    options = {
        "name": name,
        "namespace": namespace,
        "is_install": True,
        "kube_version": KUBE_VERSION,
        "api_versions": list(api_versions),
    }
    with load() as chart:
        # Chart.render does not pass kube_version and api_versions on, although the library takes
        # them; without them `.Capabilities.APIVersions` could never list the monitoring CRDs.
        rendered = _native.call_string(
            "helm_render", chart._raw(), json.dumps(values or {}), json.dumps(options)
        )
    return json.loads(rendered)


def render(
    values: dict[str, Any] | None = None,
    *,
    api_versions: Iterable[str] = (),
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """Every object the chart renders for `values` (templates only; the CRD is in `crds/`)."""
    objects = []
    templates = render_templates(values, api_versions=api_versions, name=name, namespace=namespace)
    for path, text in sorted(templates.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def notes(values: dict[str, Any] | None = None) -> str:
    """The NOTES.txt that `helm install` prints for `values`."""
    templates = render_templates(values)
    return next(text for path, text in templates.items() if path.endswith("NOTES.txt"))


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one rendered object of `kind` (and `name`, when several share the kind)."""
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    """The kinds of the rendered objects, sorted."""
    return sorted(o["kind"] for o in objects)


def fullname_of(values: dict[str, Any] | None = None, name: str = RELEASE) -> str:
    """The prefix of object names (`kuberl.fullname`) for `values` and a release named `name`."""
    values = values or {}
    if values.get("fullnameOverride"):
        return values["fullnameOverride"]
    chart_name = values.get("nameOverride") or "kuberl"
    return name if chart_name in name else f"{name}-{chart_name}"


def path(relative: str) -> Path:
    """A file of the chart."""
    return CHART_DIR / relative
