"""The Helm chart, rendered offline by Helm itself (helm-python-sdk) for the default values and the
value sets a platform engineer reaches for, linted strictly, and every object it renders checked
against the schema the API server would check it with: Kubernetes' own (strict) for built-in kinds,
the Prometheus Operator's CRDs for its kinds."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path
from typing import Any

import chart
import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python import Chart, HelmChartInvalidError, HelmValuesError

from kuberl_operator.builders import build_ray_cluster
from kuberl_operator.constants import (
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RAY_HEAD_NODE_TYPE,
    RAY_NODE_TYPE_LABEL,
)
from kuberl_operator.settings import OperatorSettings, env_name
from kuberl_operator.validation import load_rljob
from testkit import ROOT, as_strict_json_schema

DEPLOY = ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana").glob("*.json"))
ALERT_RULES = DEPLOY / "prometheus" / "kuberl-alerts.yaml"
MONITORING_CRDS = Path(__file__).parent / "crds"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
# cert-manager's kinds (the webhook's certificate, operator.webhook.certManager): test_webhook.py
# checks how they fit together; their CRDs are not stored here.
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
MISSING_KUBERAY = "chart directory is missing these dependencies: kuberay-operator"

# The value sets, each rendered once. "prometheus-operator" renders with the Prometheus Operator's
# CRDs listed by the cluster; every other set without them.
GPU_SPOT = {
    "operator": {
        "settings": {
            "trainerImage": "registry.example.com/rl/trainer:2.1.0",
            "trainerGpuImage": "registry.example.com/rl/trainer:2.1.0-cuda12",
            "gpuTypeLabel": "nvidia.com/gpu.product",
            "fallbackPendingSeconds": 300,
            "rolloutWorkerMemory": "4Gi",
            "terminationGracePeriodSeconds": 25,
            "allowedSecrets": ["s3-credentials", "ckpt-*"],
            "allowedImagePrefixes": ["registry.example.com/rl/"],
            "allowedPriorityClasses": ["training-*"],
            "allowedServiceAccounts": ["rl-trainer"],
        }
    }
}
EVERYTHING = {
    "fullnameOverride": "rl",
    "commonLabels": {"team": "rl"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "operator": {
        "verbose": True,
        "settings": {
            "watchNamespace": "training",
            "prometheusNamespace": "monitoring",
            "prometheusPodLabels": {"app.kubernetes.io/name": "prometheus"},
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.com/owner": "rl"},
    },
    "api": {
        "replicas": 3,
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "tls": [{"secretName": "kuberl-tls", "hosts": ["kuberl.example.com"]}],
        },
        "networkPolicy": {
            "ingressFrom": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}
                    }
                }
            ]
        },
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchLabels": {"app.kubernetes.io/component": "api"}
                            },
                        },
                    }
                ]
            }
        },
    },
    "networkPolicy": {
        "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ]
    },
    "monitoring": {
        "forceCreate": True,
        "labels": {"release": "kube-prometheus-stack"},
        "interval": "15s",
        "rules": {"additionalLabels": {"team": "rl"}},
        "dashboards": {"namespace": "grafana", "label": "grafana.example.com/dashboard"},
    },
}
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "defaults": ({}, ()),
    "gpu-spot": (GPU_SPOT, ()),
    "no-kuberay": ({"kuberay-operator": {"enabled": False}}, ()),
    "prometheus-operator": ({}, chart.PROMETHEUS_OPERATOR_API_VERSIONS),
    "api-disabled": ({"api": {"enabled": False}}, chart.PROMETHEUS_OPERATOR_API_VERSIONS),
    "monitoring-off": (
        {"monitoring": {"enabled": False}, "networkPolicy": {"enabled": False}},
        chart.PROMETHEUS_OPERATOR_API_VERSIONS,
    ),
    "everything": (EVERYTHING, ()),
    "cert-manager": (
        {"operator": {"webhook": {"certManager": {"enabled": True}, "failurePolicy": "Ignore"}}},
        (),
    ),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every case's objects, rendered once for the module."""
    return {
        case: chart.render(values, api_versions=api_versions)
        for case, (values, api_versions) in CASES.items()
    }


@pytest.fixture(scope="module")
def defaults(rendered) -> list[dict[str, Any]]:
    return rendered["prometheus-operator"]


def container(objects: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    """The one container of a rendered Deployment."""
    (only,) = chart.find(objects, "Deployment", deployment)["spec"]["template"]["spec"][
        "containers"
    ]
    return only


def port_number(spec: dict[str, Any], name: str) -> int:
    return next(p["containerPort"] for p in spec["ports"] if p["name"] == name)


# --- Lint and schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_lint_is_clean_in_strict_mode(case):
    """Strict lint (warnings are errors) finds nothing but the KubeRay subchart, which only
    `helm dependency build` can fetch (the chart repository is out of reach here)."""
    values, _ = CASES[case]
    report = helm_python.lint(chart.CHART_DIR, values, strict=True, kube_version=chart.KUBE_VERSION)

    findings = [m["error"] for m in report["messages"] if m["severity"] >= 2]
    assert set(findings) <= {MISSING_KUBERAY}, findings
    dependency = helm_python.dependency_list(chart.CHART_DIR)[0]
    assert (MISSING_KUBERAY in findings) == (dependency["status"] == "missing")


def monitoring_schema(kind: str) -> jsonschema.Draft4Validator:
    """The schema of the Prometheus Operator's CRD of `kind`, stored under tests/charts/crds/."""
    path = MONITORING_CRDS / f"monitoring.coreos.com_{kind.lower()}s.yaml"
    if not path.is_file():
        pytest.skip(f"the {kind} CRD is not stored at {path.relative_to(ROOT)}")
    crd = yaml.safe_load(path.read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(as_strict_json_schema(version["schema"]["openAPIV3Schema"]))


def kubernetes_problems(obj: dict[str, Any]) -> list[str]:
    """What the API server would refuse in a built-in object, strictly (unknown fields too)."""
    try:
        kubernetes_validate.validate(obj, chart.KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{obj['kind']} {obj['metadata']['name']}: {exc.json_path}: {exc.message}"]
    return []


def crd_problems(obj: dict[str, Any], schema: jsonschema.Draft4Validator) -> list[str]:
    name = f"{obj['kind']} {obj['metadata']['name']}"
    return [f"{name}: {error.json_path}: {error.message}" for error in schema.iter_errors(obj)]


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_passes_kubernetes_schema(case, rendered):
    objects = rendered[case]

    assert objects
    problems = [
        line
        for obj in objects
        if obj["kind"] not in MONITORING_KINDS | CERT_MANAGER_KINDS
        for line in kubernetes_problems(obj)
    ]
    assert not problems, "\n".join(problems)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), f"duplicate objects: {names}"


@pytest.mark.parametrize("kind", sorted(MONITORING_KINDS))
def test_monitoring_objects_pass_their_crds_schema(kind, rendered):
    schema = monitoring_schema(kind)
    objects = [o for case in rendered.values() for o in case if o["kind"] == kind]

    assert objects
    problems = [line for obj in objects for line in crd_problems(obj, schema)]
    assert not problems, "\n".join(problems)
    broken = json.loads(json.dumps(objects[0]))
    broken["spec"]["unknownField"] = True
    assert crd_problems(broken, schema)


def test_kubernetes_schema_catches_mistakes(defaults):
    """The strict check refuses a broken copy of what it accepts, so a pass means something."""
    broken = json.loads(json.dumps(chart.find(defaults, "Deployment", "kuberl-operator")))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}

    assert kubernetes_problems(broken)


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"operator": {"replicas": "two"}}, "/operator/replicas"),
        ({"operator": {"replicas": 2}}, "/operator/replicas"),
        ({"operator": {"image": {"repository": "ghcr.io/kuberl/my operator"}}}, "/operator/image"),
        ({"api": {"image": {"tag": "0.1 beta"}}}, "/api/image/tag"),
        ({"operator": {"settings": {"trainerImage": "trainer 1"}}}, "/operator/settings"),
        ({"operator": {"settings": {"pollSeconds": 0}}}, "/operator/settings/pollSeconds"),
        ({"operator": {"settings": {"watchNamespace": "Team_A"}}}, "/operator/settings"),
        ({"api": {"port": 70000}}, "/api/port"),
        ({"api": {"service": {"type": "External"}}}, "/api/service/type"),
        ({"monitoring": {"interval": "often"}}, "/monitoring/interval"),
        ({"operator": {"setings": {}}}, "setings"),
    ],
)
def test_a_bad_value_fails_naming_its_path(values, path):
    with pytest.raises(HelmValuesError) as raised:
        chart.render(values)
    assert path in str(raised.value)
    # `helm lint` reports it too, as an error
    report = helm_python.lint(chart.CHART_DIR, values, strict=True)
    assert any(m["severity"] == 3 and path in m["error"] for m in report["messages"])


# --- The operator --------------------------------------------------------------------------------

# Settings the chart derives instead of taking them as values: where its own pods run and which
# labels they carry (each job's NetworkPolicy admits them), the key of the jobs' Ray tokens (from a
# Secret), the log relay's port and token (operator.logRelay, a Secret), and the admission
# webhook's port and certificate (operator.webhook).
DERIVED_SETTINGS = {
    "operator_namespace",
    "operator_pod_labels",
    "ray_auth_key",
    "log_relay_port",
    "log_relay_token",
    "webhook_port",
    "webhook_cert_dir",
}
# What the emulated kubelet gives a variable read from a Secret.
SECRET_VALUE = "k" * 64


def as_setting(value: Any) -> Any:
    """A value of values.yaml as the operator's setting holds it: lists as tuples."""
    return tuple(value) if isinstance(value, list) else value


def snake_case(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def test_operator_settings_values_are_the_operators_fields_with_their_defaults():
    with chart.load() as loaded:
        values = loaded.values["operator"]["settings"]
    settings = {snake_case(name): value for name, value in values.items()}

    fields = OperatorSettings.model_fields
    assert set(settings) | DERIVED_SETTINGS == set(fields)
    assert not set(settings) & DERIVED_SETTINGS
    defaults = OperatorSettings()
    for name, value in settings.items():
        # An empty string is how a value says "the operator's default" (None)
        assert (as_setting(value) if value != "" else None) == getattr(defaults, name), name


def string_pattern(*nodes: dict[str, Any]) -> str:
    """The pattern a JSON schema node (or one of its anyOf branches) puts on strings."""
    for node in nodes:
        for branch in [node, *node.get("anyOf", [])]:
            if "pattern" in branch:
                return branch["pattern"]
    return ""


def test_values_schema_of_the_settings_matches_the_operators_constraints():
    """Wrong settings fail at install, with the same limits the operator would apply at start."""
    with chart.load() as loaded:
        schema = loaded.schema["properties"]["operator"]["properties"]["settings"]
    model = OperatorSettings.model_json_schema()["properties"]

    assert {snake_case(name) for name in schema["properties"]} | DERIVED_SETTINGS == set(model)
    for name, prop in schema["properties"].items():
        field = model[snake_case(name)]
        constraint = next((c for c in field.get("anyOf", []) if c["type"] != "null"), field)
        for key in ("minimum", "maximum", "exclusiveMinimum", "maxLength"):
            assert prop.get(key) == constraint.get(key), f"{name}.{key}"
        # A value may also be empty where the field is optional ("^$|" + the field's pattern)
        assert string_pattern(prop).removeprefix("^$|") == string_pattern(constraint, field), name


def operator_environ(objects: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    """The operator container's KUBERL_* variables as the pod sees them (its namespace filled in
    where the Downward API gives it)."""
    environ = {}
    for var in container(objects, deployment)["env"]:
        if not var["name"].startswith("KUBERL_"):
            continue
        if var.get("valueFrom") == {"fieldRef": {"fieldPath": "metadata.namespace"}}:
            environ[var["name"]] = chart.NAMESPACE
        elif "secretKeyRef" in var.get("valueFrom", {}):
            environ[var["name"]] = SECRET_VALUE
        else:
            environ[var["name"]] = var["value"]
    return environ


@pytest.mark.parametrize("case", ["defaults", "gpu-spot", "everything"])
def test_operator_environment_sets_exactly_the_settings(case, rendered):
    values, _ = CASES[case]
    environ = operator_environ(rendered[case], f"{chart.fullname_of(values)}-operator")

    assert set(environ) == {env_name(name) for name in OperatorSettings.model_fields}
    settings = OperatorSettings.from_env(environ)
    for name, value in values.get("operator", {}).get("settings", {}).items():
        assert getattr(settings, snake_case(name)) == as_setting(value), name
    assert settings.operator_namespace == chart.NAMESPACE


def test_the_operator_derives_ray_tokens_from_a_key_the_chart_keeps(defaults):
    secret = chart.find(defaults, "Secret", "kuberl-ray-auth-key")
    key = base64.b64decode(secret["data"]["key"]).decode()
    operator = {var["name"]: var for var in container(defaults, "kuberl-operator")["env"]}

    assert OperatorSettings(ray_auth_key=key).ray_auth_key is not None  # long enough
    assert operator["KUBERL_RAY_AUTH_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "kuberl-ray-auth-key", "key": "key"}
    }
    # RLJobs outlive the release (their CRD stays): so does the key their tokens derive from.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert secret["metadata"]["namespace"] == chart.NAMESPACE


def test_an_existing_secret_replaces_the_charts_key():
    objects = chart.render({"operator": {"rayAuthKey": {"existingSecret": "rl-token-key"}}})
    operator = {var["name"]: var for var in container(objects, "kuberl-operator")["env"]}

    assert not [o for o in objects if o["metadata"]["name"].endswith("-ray-auth-key")]
    assert operator["KUBERL_RAY_AUTH_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "rl-token-key"


@pytest.mark.parametrize("case", ["defaults", "everything"])
def test_operator_pod_labels_setting_selects_the_operators_pods(case, rendered):
    name = f"{chart.fullname_of(CASES[case][0])}-operator"
    deployment = chart.find(rendered[case], "Deployment", name)
    settings = OperatorSettings.from_env(operator_environ(rendered[case], name))

    assert settings.operator_pod_labels == deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert settings.operator_pod_labels.items() <= pod_labels.items()


def test_operator_is_one_replica_replaced_by_recreate(defaults):
    deployment = chart.find(defaults, "Deployment", "kuberl-operator")

    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_operator_probes_kopfs_liveness_endpoint_and_serves_metrics(defaults):
    operator = container(defaults, "kuberl-operator")

    liveness = next(a for a in operator["command"] if a.startswith("--liveness="))
    assert liveness == f"--liveness=http://0.0.0.0:{port_number(operator, 'health')}/healthz"
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert port_number(operator, "metrics") == OperatorSettings().metrics_port
    assert "-A" not in operator["command"]  # the scope comes from KUBERL_WATCH_NAMESPACE


def test_metrics_port_zero_leaves_no_metrics_to_scrape():
    objects = chart.render(
        {"operator": {"settings": {"metricsPort": 0}}},
        api_versions=chart.PROMETHEUS_OPERATOR_API_VERSIONS,
    )

    ports = [p["name"] for p in container(objects, "kuberl-operator")["ports"]]
    assert ports == ["health", "webhook", "log-relay"]
    assert not [o for o in objects if o["metadata"]["name"] == "kuberl-operator-metrics"]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceMonitor"] == [
        "kuberl-api"
    ]


# --- Both components -----------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["operator", "api"])
def test_pods_run_unprivileged_on_a_read_only_root(component, defaults):
    pod = chart.find(defaults, "Deployment", f"kuberl-{component}")["spec"]["template"]["spec"]
    (only,) = pod["containers"]
    security = only["securityContext"]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    # The one writable place, a size-limited emptyDir (the operator's webhook certificate is
    # mounted read-only)
    mounts = {mount["mountPath"]: mount for mount in only["volumeMounts"]}
    tmp = mounts.pop("/tmp")
    assert all(mount["readOnly"] for mount in mounts.values())
    (volume,) = [v for v in pod["volumes"] if v["name"] == tmp["name"]]
    assert "sizeLimit" in volume["emptyDir"]
    assert only["resources"]["requests"] and only["resources"]["limits"]


@pytest.mark.parametrize("component", ["operator", "api"])
def test_service_accounts_are_the_ones_rbac_binds(component, defaults):
    name = f"kuberl-{component}"
    pod = chart.find(defaults, "Deployment", name)["spec"]["template"]["spec"]

    assert pod["serviceAccountName"] == name
    chart.find(defaults, "ServiceAccount", name)
    bound = {
        subject["name"]
        for o in defaults
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in o.get("subjects", [])
    }
    assert name in bound


def test_images_default_to_the_charts_app_version(defaults):
    with chart.load() as loaded:
        version = loaded.metadata["appVersion"]

    assert container(defaults, "kuberl-operator")["image"] == f"ghcr.io/kuberl/operator:{version}"
    assert container(defaults, "kuberl-api")["image"] == f"ghcr.io/kuberl/api:{version}"


def test_scheduling_and_pull_secrets_reach_the_pods(rendered):
    objects = rendered["everything"]
    operator = chart.find(objects, "Deployment", "rl-operator")["spec"]["template"]["spec"]
    api = chart.find(objects, "Deployment", "rl-api")["spec"]["template"]["spec"]

    assert operator["nodeSelector"] == EVERYTHING["operator"]["nodeSelector"]
    assert operator["tolerations"] == EVERYTHING["operator"]["tolerations"]
    assert operator["priorityClassName"] == "system-cluster-critical"
    assert api["affinity"] == EVERYTHING["api"]["affinity"]
    assert operator["imagePullSecrets"] == api["imagePullSecrets"] == EVERYTHING["imagePullSecrets"]
    assert all(o["metadata"]["labels"]["team"] == "rl" for o in objects)


# --- The API -------------------------------------------------------------------------------------


def test_api_serves_the_kubernetes_backend_behind_a_service(defaults):
    api = container(defaults, "kuberl-api")
    port = port_number(api, "http")

    assert api["command"][:2] == ["kuberl", "serve"]
    assert "--backend=kubernetes" in api["command"]
    assert "--host=0.0.0.0" in api["command"]
    assert f"--port={port}" in api["command"]
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = chart.find(defaults, "Service", "kuberl-api")
    pod_labels = chart.find(defaults, "Deployment", "kuberl-api")["spec"]["template"]["metadata"]
    assert service["spec"]["selector"].items() <= pod_labels["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_page_keeps_a_client_on_one_replica_and_its_cookie_on_https_behind_tls(rendered):
    def serve_command(objects: list[dict[str, Any]], name: str) -> list[str]:
        return container(objects, name)["command"]

    # Sessions live in the replica that opened them
    assert chart.find(rendered["defaults"], "Service", "kuberl-api")["spec"]["sessionAffinity"] == (
        "ClientIP"
    )
    assert "--secure-cookies" not in serve_command(rendered["defaults"], "kuberl-api")
    assert EVERYTHING["api"]["ingress"]["tls"]  # the Ingress ends TLS: the cookie is Secure
    assert "--secure-cookies" in serve_command(rendered["everything"], "rl-api")
    told = chart.render({"api": {"secureCookies": True}})
    assert "--secure-cookies" in serve_command(told, "kuberl-api")


def test_api_disruption_budget_selects_its_pods(defaults):
    budget = chart.find(defaults, "PodDisruptionBudget", "kuberl-api")
    deployment = chart.find(defaults, "Deployment", "kuberl-api")

    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["replicas"] >= 2


def test_ingress_routes_to_the_api_service(rendered):
    objects = rendered["everything"]
    ingress = chart.find(objects, "Ingress", "rl-api")
    service = chart.find(objects, "Service", "rl-api")

    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "rl-api", "port": {"name": "http"}}
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == EVERYTHING["api"]["ingress"]["tls"]
    assert not [o for o in rendered["defaults"] if o["kind"] == "Ingress"]


def test_api_disabled_leaves_only_the_operator(rendered):
    objects = rendered["api-disabled"]

    component = {o["metadata"]["labels"].get("app.kubernetes.io/component") for o in objects}
    assert "api" not in component
    chart.find(objects, "Deployment", "kuberl-operator")
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceMonitor"] == [
        "kuberl-operator"
    ]


# --- NetworkPolicies -----------------------------------------------------------------------------


def test_operator_accepts_connections_on_its_own_ports_only_and_the_relays_from_the_api(defaults):
    policy = chart.find(defaults, "NetworkPolicy", "kuberl-operator")["spec"]
    operator = container(defaults, "kuberl-operator")
    deployment = chart.find(defaults, "Deployment", "kuberl-operator")
    api = chart.find(defaults, "Deployment", "kuberl-api")

    assert policy["podSelector"] == deployment["spec"]["selector"]
    assert policy["policyTypes"] == ["Ingress"]
    ports = [port["port"] for rule in policy["ingress"] for port in rule["ports"]]
    assert sorted(ports) == sorted(p["name"] for p in operator["ports"])
    assert sorted(ports) == ["health", "log-relay", "metrics", "webhook"]
    (relay,) = [r for r in policy["ingress"] if r["ports"][0]["port"] == "log-relay"]
    assert relay["from"] == [{"podSelector": api["spec"]["selector"]}]


def metrics_from(objects: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    """Who the operator's NetworkPolicy admits to its metrics port."""
    rules = chart.find(objects, "NetworkPolicy", policy)["spec"]["ingress"]
    return next(r for r in rules if r["ports"][0]["port"] == "metrics")["from"]


def test_only_the_prometheus_named_scrapes_the_operator_by_default_the_releases_namespace(
    defaults,
):
    release_namespace = {"matchLabels": {"kubernetes.io/metadata.name": chart.NAMESPACE}}
    assert metrics_from(defaults, "kuberl-operator") == [{"namespaceSelector": release_namespace}]

    prometheus = {"prometheusNamespace": "monitoring", "prometheusPodLabels": {"app": "prom"}}
    told = chart.render({"operator": {"settings": prometheus}})
    assert metrics_from(told, "kuberl-operator") == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app": "prom"}},
        }
    ]
    # The drivers' policies, which the operator builds, admit the same pods
    settings = OperatorSettings.from_env(operator_environ(told, "kuberl-operator"))
    assert (settings.prometheus_namespace, settings.prometheus_pod_labels) == (
        "monitoring",
        {"app": "prom"},
    )


def test_the_api_reads_logs_through_the_operators_relay_and_holds_no_ray_key(defaults):
    api = {var["name"]: var for var in container(defaults, "kuberl-api")["env"]}
    operator = {var["name"]: var for var in container(defaults, "kuberl-operator")["env"]}
    service = chart.find(defaults, "Service", "kuberl-operator-relay")
    secret = chart.find(defaults, "Secret", "kuberl-log-relay")
    (port,) = service["spec"]["ports"]
    relay_port = next(
        p for p in container(defaults, "kuberl-operator")["ports"] if p["name"] == "log-relay"
    )

    assert not [name for name in api if "RAY" in name]  # no key, no token, no head's address
    assert api["KUBERL_LOG_RELAY_URL"]["value"] == (
        f"http://kuberl-operator-relay.{chart.NAMESPACE}.svc:{port['port']}"
    )
    assert port["targetPort"] == "log-relay"
    assert operator["KUBERL_LOG_RELAY_PORT"]["value"] == str(relay_port["containerPort"])
    reference = {"secretKeyRef": {"name": "kuberl-log-relay", "key": "token"}}
    assert api["KUBERL_LOG_RELAY_TOKEN"]["valueFrom"] == reference
    assert operator["KUBERL_LOG_RELAY_TOKEN"]["valueFrom"] == reference
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert OperatorSettings(log_relay_token=token).log_relay_token is not None  # long enough
    assert (
        service["spec"]["selector"]
        == chart.find(defaults, "Deployment", "kuberl-operator")["spec"]["selector"]["matchLabels"]
    )


def test_the_relay_can_be_turned_off_or_take_an_existing_secret():
    off = chart.render({"operator": {"logRelay": {"port": 0}}})
    api = {var["name"] for var in container(off, "kuberl-api")["env"]}
    operator = {var["name"] for var in container(off, "kuberl-operator")["env"]}
    assert not [o for o in off if "relay" in o["metadata"]["name"]]
    assert not {name for name in api | operator if "LOG_RELAY" in name}

    own = chart.render({"operator": {"logRelay": {"existingSecret": "relay-token"}}})
    api_env = {var["name"]: var for var in container(own, "kuberl-api")["env"]}
    assert not [o for o in own if o["metadata"]["name"].endswith("-log-relay")]
    assert api_env["KUBERL_LOG_RELAY_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "relay-token"


def test_api_accepts_its_port_from_anyone_unless_told(rendered):
    open_policy = chart.find(rendered["defaults"], "NetworkPolicy", "kuberl-api")["spec"]
    (rule,) = open_policy["ingress"]
    assert rule == {"ports": [{"port": "http", "protocol": "TCP"}]}

    narrowed = chart.find(rendered["everything"], "NetworkPolicy", "rl-api")["spec"]
    (rule,) = narrowed["ingress"]
    assert rule["from"] == EVERYTHING["api"]["networkPolicy"]["ingressFrom"]
    metrics_rule = metrics_from(rendered["everything"], "rl-operator")
    assert metrics_rule == EVERYTHING["networkPolicy"]["metricsFrom"]
    assert not [o for o in rendered["monitoring-off"] if o["kind"] == "NetworkPolicy"]


# --- Monitoring ----------------------------------------------------------------------------------


def monitoring_objects(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects if o["apiVersion"].startswith("monitoring.coreos"))


def test_monitors_and_rules_exist_where_the_prometheus_operator_does(rendered):
    assert monitoring_objects(rendered["defaults"]) == []
    assert monitoring_objects(rendered["prometheus-operator"]) == [
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
        "ServiceMonitor",
    ]
    # forced for `helm template`, without the CRDs
    assert monitoring_objects(rendered["everything"]) == monitoring_objects(
        rendered["prometheus-operator"]
    )
    # monitoring off wins over the CRDs being there
    assert monitoring_objects(rendered["monitoring-off"]) == []
    assert not [o for o in rendered["monitoring-off"] if o["kind"] == "ConfigMap"]


def scrape_endpoints(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    spec = monitor["spec"]
    return spec.get("endpoints", spec.get("podMetricsEndpoints"))


@pytest.mark.parametrize(
    ("kind", "name", "job"),
    [
        ("ServiceMonitor", "kuberl-operator", "kuberl-operator"),
        ("ServiceMonitor", "kuberl-api", "kuberl-api"),
        ("PodMonitor", "kuberl-trainer", "kuberl-trainer"),
    ],
)
def test_each_scrape_job_is_named_and_keeps_kuberls_own_job_label(kind, name, job, defaults):
    (endpoint,) = scrape_endpoints(chart.find(defaults, kind, name))

    assert endpoint["honorLabels"] is True
    assert {"action": "replace", "targetLabel": "job", "replacement": job} in endpoint[
        "relabelings"
    ]


@pytest.mark.parametrize("component", ["operator", "api"])
def test_service_monitors_select_services_with_the_named_port(component, defaults):
    monitor = chart.find(defaults, "ServiceMonitor", f"kuberl-{component}")
    (endpoint,) = monitor["spec"]["endpoints"]
    selector = monitor["spec"]["selector"]["matchLabels"]

    services = [
        o
        for o in defaults
        if o["kind"] == "Service" and selector.items() <= o["metadata"]["labels"].items()
    ]
    assert len(services) == 1
    assert endpoint["port"] in [p["name"] for p in services[0]["spec"]["ports"]]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [chart.NAMESPACE]}


def test_pod_monitor_selects_every_jobs_head_on_the_drivers_metrics_port(defaults):
    """The PodMonitor and the operator's builders agree: the head pod of a built RayCluster
    carries the selected labels (KubeRay adds the node type) and names the driver's port."""
    monitor = chart.find(defaults, "PodMonitor", "kuberl-trainer")["spec"]
    settings = OperatorSettings()
    job = load_rljob(DEPLOY / "examples" / "cartpole-ppo.yaml")
    head = build_ray_cluster(job, settings, attempt=1)["spec"]["headGroupSpec"]["template"]

    assert monitor["selector"]["matchLabels"] == {
        MANAGED_BY_LABEL: MANAGED_BY,
        RAY_NODE_TYPE_LABEL: RAY_HEAD_NODE_TYPE,
    }
    assert monitor["selector"]["matchExpressions"] == [{"key": JOB_LABEL, "operator": "Exists"}]
    assert head["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
    assert JOB_LABEL in head["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for c in head["spec"]["containers"] for p in c["ports"]}
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert ports[endpoint["port"]] == settings.trainer_metrics_port
    assert monitor["namespaceSelector"] == {"any": True}


def test_pod_monitor_watches_the_operators_one_namespace(rendered):
    monitor = chart.find(rendered["everything"], "PodMonitor", "rl-trainer")

    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["training"]}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheus_rule_holds_the_alert_rules_file(rendered):
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]

    rule = chart.find(rendered["prometheus-operator"], "PrometheusRule", "kuberl-alerts")
    assert rule["spec"]["groups"] == groups
    labelled = chart.find(rendered["everything"], "PrometheusRule", "rl-alerts")["spec"]["groups"]
    for group, original in zip(labelled, groups, strict=True):
        for rule, plain in zip(group["rules"], original["rules"], strict=True):
            if "alert" in plain:
                assert rule["labels"] == {"team": "rl", **plain.get("labels", {})}
            else:
                assert rule == plain


@pytest.mark.parametrize("case", ["defaults", "everything"])
def test_one_dashboard_config_map_per_grafana_dashboard(case, rendered):
    values, _ = CASES[case]
    dashboards = values.get("monitoring", {}).get("dashboards", {})
    label = dashboards.get("label", "grafana_dashboard")
    maps = [o for o in rendered[case] if o["kind"] == "ConfigMap"]

    assert len(maps) == len(DASHBOARDS)
    by_file = {key: (m, text) for m in maps for key, text in m["data"].items()}
    assert set(by_file) == {path.name for path in DASHBOARDS}
    for path in DASHBOARDS:
        config_map, text = by_file[path.name]
        assert json.loads(text) == json.loads(path.read_text())
        assert config_map["metadata"]["labels"][label] == "1"
        assert config_map["metadata"]["namespace"] == dashboards.get("namespace", chart.NAMESPACE)
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "kuberl"}


# --- What the chart is made of -------------------------------------------------------------------


def test_the_charts_crd_is_the_generated_one():
    crd = chart.path("crds/kuberl.io_rljobs.yaml")
    with chart.load() as loaded:
        (loaded_crd,) = loaded.crds

    assert crd.is_symlink() and crd.resolve() == (DEPLOY / "crds" / "kuberl.io_rljobs.yaml")
    assert loaded_crd["data"] == crd.resolve().read_text()


def test_the_archive_holds_the_linked_files_themselves(tmp_path):
    """The CRD, dashboards and alert rules are links into deploy/; an archive of the chart (what
    `helm package` writes) holds their contents, and leaves the promtool tests out."""
    with chart.load() as loaded:
        archive = loaded.save(tmp_path)
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        contents = {name: tar.extractfile(m).read().decode() for name, m in members.items()}

    assert all(m.isfile() for m in members.values())
    assert (
        contents["kuberl/crds/kuberl.io_rljobs.yaml"]
        == (DEPLOY / "crds" / "kuberl.io_rljobs.yaml").read_text()
    )
    assert contents["kuberl/prometheus/kuberl-alerts.yaml"] == ALERT_RULES.read_text()
    for path in DASHBOARDS:
        assert contents[f"kuberl/dashboards/{path.name}"] == path.read_text()
    packaged = {name.removeprefix("kuberl/") for name in members}
    assert {n for n in packaged if n.startswith(("dashboards/", "prometheus/"))} == {
        "prometheus/kuberl-alerts.yaml",
        *(f"dashboards/{path.name}" for path in DASHBOARDS),
    }


def test_kuberay_operator_is_an_optional_dependency():
    with chart.load() as loaded:
        (dependency,) = loaded.metadata["dependencies"]
        values = loaded.values

    assert dependency == {
        "name": "kuberay-operator",
        "version": "1.7.0",
        "repository": "https://ray-project.github.io/kuberay-helm/",
        "condition": "kuberay-operator.enabled",
    }
    # On by default: one install takes a cluster from nothing to training jobs.
    assert values["kuberay-operator"]["enabled"] is True


def without_drawn_key(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects less what a render without a cluster draws anew: the Ray auth key, the log
    relay's token, and the webhook's certificate with the configuration that carries its CA."""
    drawn = ("-ray-auth-key", "-log-relay", "-operator-webhook-tls")
    return [
        o
        for o in objects
        if not o["metadata"]["name"].endswith(drawn)
        and o["kind"] != "ValidatingWebhookConfiguration"
    ]


def test_without_the_fetched_subchart_only_packaging_refuses():
    """Rendering (what `helm template` does) skips a declared subchart that is not fetched, so the
    render tests cover kuberl's own objects; `helm package` and `helm install` need
    `helm dependency build` first."""
    (dependency,) = helm_python.dependency_list(chart.CHART_DIR)
    if dependency["status"] != "missing":
        pytest.skip(f"the kuberay-operator subchart is {dependency['status']} in charts/")

    assert without_drawn_key(chart.render({"kuberay-operator": {"enabled": True}})) == (
        without_drawn_key(chart.render({"kuberay-operator": {"enabled": False}}))
    )
    with pytest.raises(HelmChartInvalidError, match="missing in charts/ directory: kuberay"):
        helm_python.package(chart.CHART_DIR)


def test_notes_say_what_to_do_next(rendered):
    notes = chart.notes()

    assert "deploy/storage" not in notes  # each example asks for a claim of its own
    assert "spec.storage.size" in notes
    assert "kubectl apply -f deploy/examples/cartpole-ppo.yaml" in notes
    assert "kubectl get rlj" in notes
    assert "grafana_dashboard=1" in notes
    assert "kuberay-operator.enabled=false" not in notes
    assert "kuberay-operator.enabled=false" in chart.notes({"kuberay-operator": {"enabled": False}})


# Values that are maps of the user's own keys (or whole Kubernetes structures): one row each.
FREE_FORM_VALUES = {"annotations", "resources", "affinity", "pools", "instanceTypes"}


def leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of the values a user sets one by one."""
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in FREE_FORM_VALUES:
            paths.extend(leaf_paths(value, f"{path}."))
        else:
            paths.append(path)
    return paths


def test_readme_lists_every_value():
    with chart.load() as loaded:
        values = {k: v for k, v in loaded.values.items() if k != "kuberay-operator"}
    readme = chart.path("README.md").read_text()

    missing = [path for path in leaf_paths(values) if f"`{path}`" not in readme]
    assert not missing, f"values missing from charts/kuberl/README.md: {missing}"
    assert "`kuberay-operator.enabled`" in readme


def test_chart_loads_as_an_archive_too(tmp_path):
    with chart.load() as loaded:
        archive = Path(loaded.save(tmp_path))
    with Chart.load_archive(archive.read_bytes()) as again:
        assert again.metadata["name"] == "kuberl"
        assert again.crds
