"""The committed Grafana dashboards are the generator's output and hold together: stable uids, the
data source as a variable, units on every panel, variables defined where used, and only metric
names that kuberl exports (or that a named exporter provides). Whether every query runs against a
real Prometheus is test_prometheus.py's part."""

from __future__ import annotations

import ast
import importlib
import re

import pytest
from promql import (
    EXTERNAL_METRICS,
    GRAFANA,
    alert_rules,
    dashboards,
    exported_metric_names,
    generator,
    metric_names,
    panel_queries,
    variables,
)

UIDS = {
    "kuberl-fleet.json": "kuberl-fleet",
    "kuberl-training.json": "kuberl-training",
    "kuberl-spot.json": "kuberl-spot",
}
# Grafana's own variables a query may use.
BUILT_IN_VARIABLES = {"__rate_interval", "__range", "__interval", "__range_s"}
# The panel plugins Grafana ships that the dashboards use.
BUILT_IN_PANELS = {
    "stat",
    "timeseries",
    "xychart",
    "table",
    "state-timeline",
    "bargauge",
    "piechart",
}


def test_committed_dashboards_are_generated():
    module = generator()
    assert sorted(module.DASHBOARDS) == sorted(UIDS)
    for name, build in module.DASHBOARDS.items():
        path = GRAFANA / name
        assert path.exists() and path.read_text() == module.render(build), (
            f"deploy/grafana/{name} is out of date with deploy/grafana/generate.py: run "
            "`python deploy/grafana/generate.py` and commit the result"
        )


@pytest.mark.parametrize("name", sorted(UIDS))
def test_dashboard_identity_and_data_source(name):
    board = dashboards()[name]
    assert board["uid"] == UIDS[name]
    assert board["schemaVersion"] >= 39  # Grafana 11 and later
    [datasource] = [v for v in variables(board) if v["type"] == "datasource"]
    assert (datasource["name"], datasource["query"]) == ("datasource", "prometheus")
    panel_ids = [panel["id"] for panel in board["panels"]]
    assert len(set(panel_ids)) == len(panel_ids)
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        assert panel["description"], f"{panel['title']}: no description"
        assert panel["targets"], f"{panel['title']}: no query"
        for query in panel["targets"]:
            assert query["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_has_what_grafanas_dashboard_model_requires(name):
    """Grafana's dashboard model, as far as it can be checked without a Grafana: each panel a
    built-in type with the plugin version its options are written for (without one, Grafana runs
    the plugin's migration from its oldest format over them: the XY chart's rewrites its series),
    a data source, an integer place on the 24-column grid, and queries with distinct refIds."""
    board = dashboards()[name]
    generator()  # puts the generator's folder on the path, where panels.py is
    plugin_version = importlib.import_module("panels").PLUGIN_VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+", plugin_version)
    assert int(plugin_version.split(".")[0]) >= 11  # the XY chart's current options: 11.1 on
    for panel in board["panels"]:
        title = panel["title"]
        assert panel["type"] in BUILT_IN_PANELS, title
        assert panel["pluginVersion"] == plugin_version, title
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"}, title
        assert all(isinstance(value, int) and value >= 0 for value in grid.values()), title
        assert 1 <= grid["w"] <= 24 and grid["h"] >= 1, title
        assert isinstance(panel["id"], int), title
        ref_ids = [query["refId"] for query in panel["targets"]]
        assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), title
        assert all(query["expr"].strip() for query in panel["targets"]), title
        assert isinstance(panel["fieldConfig"]["overrides"], list), title
        assert isinstance(panel["options"], dict), title


@pytest.mark.parametrize("name", sorted(UIDS))
def test_panels_fit_the_grid_without_overlapping(name):
    taken: set[tuple[int, int]] = set()
    for panel in dashboards()[name]["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_variable_a_query_uses_is_defined(name):
    board = dashboards()[name]
    defined = {v["name"] for v in variables(board)} | BUILT_IN_VARIABLES
    texts = [q.expr for q in panel_queries() if q.dashboard == board["uid"]]
    texts += [v["definition"] for v in variables(board) if v["type"] == "query"]
    for text in texts:
        used = set(re.findall(r"\$\{?(\w+)", text))
        assert used <= defined, f"{text}: undefined {used - defined}"


def test_the_training_dashboard_selects_one_job_of_one_namespace():
    board = dashboards()["kuberl-training.json"]
    by_name = {v["name"]: v for v in variables(board)}
    assert by_name["rljob"]["definition"] == (
        'label_values(kuberl_training_iteration{namespace="$namespace"}, rljob)'
    )
    for query in panel_queries():
        if query.dashboard == "kuberl-training":
            assert 'namespace="$namespace"' in query.expr and 'rljob="$rljob"' in query.expr, query


def test_the_learning_curve_is_also_drawn_against_timesteps():
    board = dashboards()["kuberl-training.json"]
    [xy] = [panel for panel in board["panels"] if panel["type"] == "xychart"]
    legends = {query["legendFormat"] for query in xy["targets"]}
    for series in xy["options"]["series"]:
        assert series["x"]["matcher"]["options"] == "timesteps"
        assert {series["x"]["matcher"]["options"], series["y"]["matcher"]["options"]} <= legends


def test_dashboards_and_rules_read_only_metrics_that_exist():
    exported = exported_metric_names()
    assert exported & EXTERNAL_METRICS.keys() == set()
    known = exported | EXTERNAL_METRICS.keys()
    for query in panel_queries():
        unknown = metric_names(query.expr) - known
        assert not unknown, f"{query.dashboard} / {query.panel}: no such metric {unknown}"
    for rule in alert_rules():
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, f"alert {rule['alert']}: no such metric {unknown}"


def test_the_generator_imports_the_metric_names_it_reads():
    """The trainer's, the operator's and the API's metric names are defined once
    (kuberl_contract.progress_row, kuberl_operator.constants, kuberl_api.metrics): the generator
    imports them rather than spelling them out, so a renamed metric cannot leave a panel reading
    nothing. Every module of the generator is read: generate.py, and the dashboards' and panels'
    modules beside it."""
    names = exported_metric_names()
    modules = sorted(GRAFANA.glob("*.py"))
    assert GRAFANA / "generate.py" in modules
    for path in modules:
        literals = [
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        spelled = {name for text in literals for name in metric_names(text) if name in names}
        assert not spelled, f"deploy/grafana/{path.name} spells out {spelled}: import them"
