"""The alert rules pass `promtool check rules` and their unit tests (each alert firing, with the
labels and annotations an on-call engineer reads, and not firing), and say what they need to."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from promql import (
    EXTERNAL_METRICS,
    RULE_TESTS,
    RULES,
    alert_rules,
    exported_metric_names,
    rule_test_series,
)

# The alerts the rules must hold (DESIGN.md §6): what an RL platform's on-call needs to know.
ALERTS = {
    "KuberlJobFailed",
    "KuberlTrainingNoProgress",
    "KuberlReturnStalled",
    "KuberlPreemptionStorm",
    "KuberlCheckpointTooOld",
    "KuberlCheckpointFailing",
    "KuberlWaitingForWorkers",
    "KuberlRolloutWorkersDown",
    "KuberlJobBudgetNearlySpent",
    "KuberlOperatorDown",
    "KuberlApiErrors",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("needs promtool (Debian package prometheus): not installed")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=60, cwd=RULES.parent
    )


def test_rules_are_valid():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(ALERTS)} rules found" in checked.stdout


def test_rule_unit_tests_pass():
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
            # an alert expected for one series and not for the others of the same case
            if check["exp_alerts"] and len(case["input_series"]) > len(check["exp_alerts"]):
                quiet.add(check["alertname"])
    assert fired == ALERTS
    assert quiet == ALERTS


def test_every_alert_has_a_severity_a_for_and_names_what_it_is_about():
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} == ALERTS
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        assert rule.get("for"), f"{name}: no `for:`"
        summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
        if name.startswith(("KuberlOperator", "KuberlApi")):
            assert "$labels.instance" in description, name
        else:  # about one RLJob: say which, and where
            for text in (summary, description):
                assert "$labels.rljob" in text and "$labels.namespace" in text, name


def test_the_unit_tests_feed_the_rules_series_the_code_exports():
    """A misspelt input series would leave an alert quiet for the wrong reason."""
    known = exported_metric_names() | EXTERNAL_METRICS.keys()
    for series in rule_test_series():
        name = series.split("{")[0].strip()
        assert name in known, f"{series}: no kuberl process exports {name}"
