"""kuberl's series name their RLJob in `rljob`, never in `job`: `job` is Prometheus's own label, the
scrape job's name (`up{job="kuberl-operator"}`), and a series that carried it would overwrite it
(or, without honor_labels, be renamed to `exported_job`). What the dashboards and the alert rules
read follows: `job` only ever selects a scrape job."""

from __future__ import annotations

import re

import yaml
from promql import RULE_TESTS, alert_rules, dashboards, panel_queries

from kuberl_api.backend import JobSummary
from kuberl_api.metrics import ApiMetrics
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.spec import Phase, RLJobStatus
from kuberl_trainer.job.metrics import RLJOB_LABEL, TrainerMetrics

SCRAPE_JOBS = {"kuberl-trainer", "kuberl-operator", "kuberl-api"}
"""The scrape jobs the chart's monitors name (charts/kuberl/templates/monitoring.yaml)."""
_JOB_MATCHER = re.compile(r'\bjob\s*(=~|!=|!~|=)\s*"([^"]*)"')
_GROUPING = re.compile(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def exported_label_names() -> dict[str, set[str]]:
    """Each series the trainer, the operator and the API export for one job, with its labels."""
    trainer = TrainerMetrics("team", "cartpole", "PPO")
    operator = OperatorMetrics()
    operator.observed("team", "cartpole", RLJobStatus(), RLJobStatus(phase=Phase.RUNNING))
    api = ApiMetrics(counts_jobs=True)
    api.render([JobSummary("team", "cartpole", "PPO", "Running", episode_return_mean=1.0)])
    labels: dict[str, set[str]] = {}
    for registry in (trainer.registry, operator.registry, api.registry):
        for family in registry.collect():
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def test_no_series_carries_a_job_label_and_per_job_series_carry_rljob():
    labels = exported_label_names()
    assert labels, "no series exported"
    assert not [name for name, keys in labels.items() if "job" in keys]
    per_job = {name for name, keys in labels.items() if RLJOB_LABEL in keys}
    assert {"kuberl_training_iteration", "kuberl_operator_job_phase"} <= per_job
    assert "kuberl_api_job_timesteps" in per_job


def job_label_uses(expr: str) -> list[str]:
    """Where a PromQL expression reads the `job` label: its matchers' values that are not a scrape
    job, and any grouping by it."""
    uses = [
        f"job{op}{value!r}"
        for op, value in _JOB_MATCHER.findall(expr)
        if not set(value.split("|")) <= SCRAPE_JOBS
    ]
    groupings = _GROUPING.findall(expr)
    uses += [f"({group})" for group in groupings if "job" in re.findall(r"\w+", group)]
    return uses


def test_dashboards_and_rules_read_the_rljob_label():
    for query in panel_queries():
        assert not job_label_uses(query.expr), (query.dashboard, query.panel, query.expr)
    for board in dashboards().values():
        for panel in board["panels"]:
            for target in panel["targets"]:
                assert "{{job}}" not in target.get("legendFormat", ""), panel["title"]
        for variable in board["templating"]["list"]:
            assert variable["name"] != "job" and ", job)" not in variable.get("definition", "")
    for rule in alert_rules():
        assert not job_label_uses(rule["expr"]), (rule["alert"], rule["expr"])
        assert "$labels.job " not in str(rule["annotations"]), rule["alert"]
    # The unit tests feed the rules series labelled as the code labels them.
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for series in case["input_series"]:
            assert not job_label_uses(series["series"]), series["series"]
