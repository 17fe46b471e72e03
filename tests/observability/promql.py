"""What the dashboards and the alert rules query: their PromQL, the metric names it reads, Grafana's
variables substituted as Grafana would, and the metric names kuberl's processes export. (A module
of its own: `conftest` names clash between test directories.)"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import yaml

from kuberl_api.metrics import ApiMetrics
from testkit import ROOT

GRAFANA = ROOT / "deploy" / "grafana"
RULES = ROOT / "deploy" / "prometheus" / "kuberl-alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "kuberl-alerts.test.yaml"

# Series the dashboards and rules read that no kuberl process exports, and who does.
EXTERNAL_METRICS = {
    "up": "Prometheus itself, one per scrape target",
    "DCGM_FI_DEV_GPU_UTIL": "NVIDIA's DCGM exporter, on GPU nodes",
    "kube_pod_status_phase": "kube-state-metrics",
}
_METRIC = re.compile(r"\b(?:kuberl_|kube_|DCGM_)\w+|\bup\b")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LABEL_VALUES = re.compile(r"label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)")


def generator() -> ModuleType:
    """deploy/grafana/generate.py, imported from its path (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("kuberl_dashboards", GRAFANA / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    """The committed dashboards by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(GRAFANA.glob("*.json"))}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    """The dashboard's uid."""
    panel: str
    """The panel's title."""
    expr: str


def panel_queries() -> list[PanelQuery]:
    return [
        PanelQuery(board["uid"], panel["title"], query["expr"])
        for board in dashboards().values()
        for panel in board["panels"]
        for query in panel.get("targets", [])
    ]


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (kuberl_*, kube-state-metrics', DCGM's and `up`);
    quoted label values are not names."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))


def substitute(expr: str, variables: dict[str, str]) -> str:
    """`expr` as Grafana sends it: `$name` and `${name}` replaced by the variables' values."""
    for name in sorted(variables, key=len, reverse=True):  # $__range_s before $__range
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    assert "$" not in expr, f"a variable is left in {expr!r}"
    return expr


def label_values(definition: str) -> tuple[str | None, str]:
    """(series selector or None, label) of a Grafana `label_values(...)` variable query."""
    found = _LABEL_VALUES.fullmatch(definition)
    assert found, f"not a label_values() query: {definition!r}"
    return found["selector"], found["label"]


COMPONENTS = ("trainer", "operator", "api")


def exported_metric_names(*components: str) -> set[str]:
    """Every series name the trainer, the operator and the API (or the `components` named) export,
    as Prometheus stores them (counters with _total, histograms with _bucket/_count/_sum, infos
    with _info). The API's are those it exports on the local backend, the count of jobs included."""
    from kuberl_operator.metrics import OperatorMetrics
    from kuberl_trainer.job.metrics import TrainerMetrics

    registries = {
        "trainer": lambda: TrainerMetrics("ns", "job", "PPO").registry,
        "operator": lambda: OperatorMetrics().registry,
        "api": lambda: ApiMetrics(counts_jobs=True).registry,
    }
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "info": ("_info",),
        "gauge": ("",),
    }
    names: set[str] = set()
    for component in components or COMPONENTS:
        for family in registries[component]().collect():
            names.update(family.name + suffix for suffix in suffixes[family.type])
    return names


def rule_test_series() -> list[str]:
    """The input series of the alert rules' unit tests, as written (`name{labels}`)."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    return [series["series"] for case in tests for series in case["input_series"]]


def variables(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from board["templating"]["list"]
