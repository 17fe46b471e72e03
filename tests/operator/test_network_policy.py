"""The NetworkPolicy around each job's Ray pods: schema-valid, selecting exactly the job's pods,
and, read the way a network plugin reads it, admitting only the job's own pods, the operator and
Prometheus, each to its ports."""

from __future__ import annotations

from typing import Any

import pytest
from test_builders import SETTINGS, TOKEN, check_kubernetes_schema, job_with, pod_templates

from kuberl_operator.builders import build_children, build_network_policy, build_ray_cluster
from kuberl_operator.constants import RAY_CLUSTER_LABEL, RAY_DASHBOARD_PORT, RAY_GCS_PORT
from kuberl_operator.settings import InvalidSettings, OperatorSettings

METRICS = SETTINGS.trainer_metrics_port
OPERATOR_NS = {"kubernetes.io/metadata.name": SETTINGS.operator_namespace}
MONITORING_NS = {"kubernetes.io/metadata.name": "monitoring"}
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
SCRAPERS = {  # column: settings
    "default": OperatorSettings(),
    "namespace": OperatorSettings(prometheus_namespace="monitoring"),
    "namespace and pods": OperatorSettings(
        prometheus_namespace="monitoring", prometheus_pod_labels=PROMETHEUS_LABELS
    ),
}


def pod_labels(job: Any, settings: OperatorSettings = SETTINGS) -> list[dict[str, str]]:
    """The labels of the job's Ray pods: their templates' plus the one KubeRay adds."""
    cluster = build_ray_cluster(job, settings, attempt=1)
    name = cluster["metadata"]["name"]
    return [t["metadata"]["labels"] | {RAY_CLUSTER_LABEL: name} for t in pod_templates(cluster)]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector of matchLabels only ({} selects everything)."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admits(policy: dict[str, Any], source: tuple[dict, dict], port: int, same_ns: bool) -> bool:
    """Whether the policy lets a TCP connection to `port` in from a pod with `source` (namespace
    labels, pod labels), in the policy's namespace or not: a peer with only a podSelector is in
    the policy's namespace; with a namespaceSelector, in the namespaces it selects."""
    namespace_labels, labels = source
    for rule in policy["spec"]["ingress"]:
        ports = rule.get("ports")
        if ports is not None and not any(
            p["port"] == port and p["protocol"] == "TCP" for p in ports
        ):
            continue
        for peer in rule["from"]:
            in_namespace = (
                selects(peer["namespaceSelector"], namespace_labels)
                if "namespaceSelector" in peer
                else same_ns
            )
            if in_namespace and selects(peer.get("podSelector", {}), labels):
                return True
    return False


@pytest.mark.parametrize("settings", SCRAPERS.values(), ids=list(SCRAPERS))
def test_the_policy_passes_the_schema(settings):
    check_kubernetes_schema(build_network_policy(job_with(), settings))


def test_the_policy_is_a_child_of_the_job_made_before_its_pods():
    job = job_with(**{"metadata.namespace": "team-rl"})
    kinds = [o["kind"] for o in build_children(job, SETTINGS, attempt=1, token=TOKEN)]
    policy = build_network_policy(job, SETTINGS)

    assert kinds.index("NetworkPolicy") < kinds.index("RayCluster")
    assert policy["metadata"]["name"] == "walker-ray"
    assert policy["metadata"]["namespace"] == "team-rl"
    assert policy["metadata"]["labels"]["kuberl.io/job"] == "walker"
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: pip, object stores


def test_it_selects_every_ray_pod_of_the_job_and_no_other_jobs():
    spot = {"spec.rolloutWorkers": {"replicas": 2, "spot": {"enabled": True, "provider": "gke"}}}
    job, other = job_with(**spot), job_with(**{"metadata.name": "runner", **spot})
    selector = build_network_policy(job, SETTINGS)["spec"]["podSelector"]

    assert len(pod_labels(job)) == 3  # head, spot group, on-demand group
    assert all(selects(selector, labels) for labels in pod_labels(job))
    assert not any(selects(selector, labels) for labels in pod_labels(other))
    # A pod that only claims the job's label, without being in its Ray cluster, is not one of them.
    assert not selects(selector, {"kuberl.io/job": "walker"})


def sources(job: Any, other: Any) -> dict[str, tuple[tuple[dict, dict], bool]]:
    operator_labels = dict(SETTINGS.operator_pod_labels)
    return {
        "same job": (({}, pod_labels(job)[0]), True),
        "other job": (({}, pod_labels(other)[0]), True),
        "operator": ((OPERATOR_NS, operator_labels), False),
        "operator's namespace, other pod": ((OPERATOR_NS, {"app": "shell"}), False),
        "operator's labels, other namespace": ((MONITORING_NS, operator_labels), False),
        "prometheus": ((MONITORING_NS, PROMETHEUS_LABELS), False),
        "any pod of the namespace": (({}, {"app": "notebook"}), True),
    }


# Who may connect to which port: with the default settings, where Prometheus may scrape from the
# operator's namespace only; with prometheus_namespace "monitoring"; and with Prometheus's pod
# labels too. The dashboard (the Ray Jobs API) and Ray's other ports: the job's pods and the
# operator only, always. No pod of another namespace, nor another pod of the job's, reads the
# drivers' figures unless it is the Prometheus named.
PORTS = {"gcs": RAY_GCS_PORT, "dashboard": RAY_DASHBOARD_PORT, "metrics": METRICS, "other": 10001}
EVERY_PORT = set(PORTS)
ADMITTED = {  # who: what it reaches, column by column of SCRAPERS
    "same job": (EVERY_PORT, EVERY_PORT, EVERY_PORT),
    "other job": (set(), set(), set()),
    "operator": ({"dashboard", "metrics"}, {"dashboard", "metrics"}, {"dashboard", "metrics"}),
    "operator's namespace, other pod": ({"metrics"}, set(), set()),
    "operator's labels, other namespace": (set(), {"metrics"}, set()),  # it is in monitoring
    "prometheus": (set(), {"metrics"}, {"metrics"}),
    "any pod of the namespace": (set(), set(), set()),
}


@pytest.mark.parametrize("column", range(len(SCRAPERS)), ids=list(SCRAPERS))
def test_only_the_job_the_operator_and_prometheus_get_in(column):
    settings = list(SCRAPERS.values())[column]
    job, other = job_with(), job_with(**{"metadata.name": "runner"})
    policy = build_network_policy(job, settings)

    for who, (source, same_ns) in sources(job, other).items():
        got = {port for port, number in PORTS.items() if admits(policy, source, number, same_ns)}
        assert got == ADMITTED[who][column], who


def test_the_ports_are_the_ones_the_head_serves():
    settings = OperatorSettings(trainer_metrics_port=9999)
    cluster = build_ray_cluster(job_with(), settings, attempt=1)
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    served = {p["name"]: p["containerPort"] for p in head["ports"]}
    opened = {
        p["port"]
        for rule in build_network_policy(job_with(), settings)["spec"]["ingress"]
        for p in rule.get("ports", [])
    }

    assert opened == {served["dashboard"], served["kuberl-metrics"]} == {RAY_DASHBOARD_PORT, 9999}


def test_the_operators_pods_come_from_the_settings():
    settings = OperatorSettings.from_env(
        {
            "KUBERL_OPERATOR_NAMESPACE": "platform",
            "KUBERL_OPERATOR_POD_LABELS": "app.kubernetes.io/name=kuberl, team=ml",
            "KUBERL_PROMETHEUS_NAMESPACE": "monitoring",
            "KUBERL_PROMETHEUS_POD_LABELS": "app.kubernetes.io/name=prometheus",
        }
    )
    operator_rule, prometheus_rule = build_network_policy(job_with(), settings)["spec"]["ingress"][
        1:
    ]

    assert operator_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberl", "team": "ml"}},
        }
    ]
    assert prometheus_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": PROMETHEUS_LABELS},
        }
    ]


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("KUBERL_OPERATOR_POD_LABELS", "kuberl", "'kuberl' is not key=value"),
        ("KUBERL_OPERATOR_POD_LABELS", "a b=c", "'a b' is not a valid label key"),
        ("KUBERL_OPERATOR_POD_LABELS", ",", "at least 1 item"),
        ("KUBERL_OPERATOR_NAMESPACE", "Kuberl_System", "should match pattern"),
        ("KUBERL_PROMETHEUS_NAMESPACE", "-monitoring", "should match pattern"),
        ("KUBERL_PROMETHEUS_POD_LABELS", "prometheus", "'prometheus' is not key=value"),
    ],
)
def test_bad_network_settings_name_the_variable(variable, value, reason):
    with pytest.raises(InvalidSettings) as caught:
        OperatorSettings.from_env({variable: value})

    assert str(caught.value).startswith(f"{variable}={value!r}: ")
    assert reason in str(caught.value)
