"""The building blocks of kuberl's dashboards: queries, panels, their layout on Grafana's grid,
the variables and the dashboard around them. Each dashboard's module (fleet.py, training.py,
spot.py) builds its panels from these, so every dashboard shares one look, one data source variable
and one set of links."""

from __future__ import annotations

from typing import Any

from kuberl_operator.spec import Phase

# Grafana 11/12 dashboards; older ones migrate a dashboard of a newer schema as far as they can.
SCHEMA_VERSION = 41
PLUGIN_VERSION = "12.0.0"
"""The version of Grafana's built-in panel plugins the panels' options are written for (the
Grafana of SCHEMA_VERSION). Grafana runs a panel plugin's migration on a panel whose pluginVersion
is missing, taking its options for the oldest format: the XY chart's would rewrite our series."""
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["kuberl"]


def phases(*names: Phase) -> str:
    """A regex of the operator's phases, for `phase=~"..."`: the names come from its Phase enum,
    so a renamed phase changes the queries with it."""
    return "|".join(names)


# The operator's phases whose time goes to preemption: lost rollout workers, and the restart from
# the newest checkpoint.
LOST_PHASES = phases(Phase.PREEMPTED, Phase.RESUMING)

Panel = dict[str, Any]


def target(expr: str, legend: str = "", instant: bool = False) -> dict[str, Any]:
    query: dict[str, Any] = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
    if instant:
        query |= {"instant": True, "range": False, "format": "table"}
    return query


def panel(
    kind: str,
    title: str,
    targets: list[dict[str, Any]],
    unit: str,
    description: str,
    width: int = 12,
    height: int = 8,
    options: dict[str, Any] | None = None,
    custom: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Panel:
    """One panel; `layout` gives it an id and a place."""
    defaults: dict[str, Any] = {"unit": unit}
    if custom:
        defaults["custom"] = custom
    return {
        "type": kind,
        "pluginVersion": PLUGIN_VERSION,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"w": width, "h": height},
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
        "targets": [
            {**query, "refId": chr(ord("A") + index)} for index, query in enumerate(targets)
        ],
        **extra,
    }


def timeseries(title: str, targets: list, unit: str, description: str, **kwargs: Any) -> Panel:
    kwargs.setdefault("options", {"legend": {"displayMode": "list", "placement": "bottom"}})
    return panel("timeseries", title, targets, unit, description, **kwargs)


def bars(title: str, targets: list, unit: str, description: str, **kwargs: Any) -> Panel:
    """Counts per interval (preemptions, restarts), stacked."""
    custom = {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}}
    return timeseries(title, targets, unit, description, custom=custom, **kwargs)


def stat(title: str, expr: str, unit: str, description: str, **kwargs: Any) -> Panel:
    options = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    kwargs.setdefault("width", 4)
    kwargs.setdefault("height", 4)
    return panel("stat", title, [target(expr)], unit, description, options=options, **kwargs)


def right_axis(name: str, unit: str) -> dict[str, Any]:
    """An override putting the series named `name` on a right-hand axis with its own unit."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def layout(panels: list[Panel]) -> list[Panel]:
    """Ids in order, and places left to right in Grafana's 24 columns, wrapping to a new row."""
    x = y = row_height = 0
    for number, item in enumerate(panels, start=1):
        grid = item["gridPos"]
        if x + grid["w"] > 24:
            x, y, row_height = 0, y + row_height, 0
        grid.update(x=x, y=y)
        item["id"] = number
        x += grid["w"]
        row_height = max(row_height, grid["h"])
    return panels


def datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
    }


def query_variable(
    name: str, definition: str, multi: bool = False, label: str | None = None
) -> dict[str, Any]:
    """A variable filled from `label_values(...)`, shown as `label` (its capitalized name by
    default); a multi-valued one selects everything by default (used as `label=~"$name"`)."""
    variable: dict[str, Any] = {
        "name": name,
        "label": label or name.capitalize(),
        "type": "query",
        "datasource": DATASOURCE,
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time-range change: jobs come and go
        "sort": 1,
        "hide": 0,
        "multi": multi,
        "includeAll": multi,
        "current": {},
    }
    if multi:
        variable |= {"allValue": ".*", "current": {"text": "All", "value": "$__all"}}
    return variable


def dashboard(uid: str, title: str, description: str, variables: list, panels: list) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,  # a shared crosshair: one moment across every panel
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "links": [
            {
                "title": "kuberl",
                "type": "dashboards",
                "tags": TAGS,
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(panels),
    }
