"""The chart's admission webhook (templates/webhook.yaml): its ValidatingWebhookConfiguration
reaches the operator's webhook server, and the certificate the chart draws is one the API server
would trust, served for real by the operator's kopf server."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import chart
import kopf
import pytest
import urllib3
from cryptography import x509

from kuberl_operator import admission
from kuberl_operator.settings import OperatorSettings
from testkit import free_port, rljob, wait_until

SERVICE = "kuberl-operator-webhook"
SERVICE_DNS = f"{SERVICE}.{chart.NAMESPACE}.svc"


@pytest.fixture(scope="module")
def defaults() -> list[dict[str, Any]]:
    return chart.render()


def operator_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return chart.find(objects, "Deployment", "kuberl-operator")["spec"]["template"]["spec"]


def webhook_of(objects: list[dict[str, Any]], name: str = "rljobs") -> dict[str, Any]:
    webhooks = chart.find(objects, "ValidatingWebhookConfiguration")["webhooks"]
    assert [w["name"] for w in webhooks] == [
        "rljobs.validate.kuberl.io",
        "rljobs-scale.validate.kuberl.io",
    ]
    return next(w for w in webhooks if w["name"] == f"{name}.validate.kuberl.io")


def test_the_configuration_calls_the_operators_handler_for_rljob_creates_and_updates(defaults):
    webhook = webhook_of(defaults)
    service = chart.find(defaults, "Service", SERVICE)
    pod = operator_pod(defaults)
    (operator,) = pod["containers"]
    environ = {var["name"]: var.get("value") for var in operator["env"]}

    called = webhook["clientConfig"]["service"]
    assert (called["name"], called["namespace"]) == (SERVICE, chart.NAMESPACE)
    assert called["path"] == f"/{admission.WEBHOOK_ID}"
    (port,) = service["spec"]["ports"]
    assert called["port"] == port["port"]
    assert (
        service["spec"]["selector"]
        == (
            chart.find(defaults, "Deployment", "kuberl-operator")["spec"]["selector"]["matchLabels"]
        )
    )
    served = next(p for p in operator["ports"] if p["name"] == port["targetPort"])
    assert str(served["containerPort"]) == environ["KUBERL_WEBHOOK_PORT"] == "9443"
    assert webhook["rules"] == [
        {
            "apiGroups": ["kuberl.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["rljobs"],
            "scope": "Namespaced",
        }
    ]
    assert (webhook["failurePolicy"], webhook["sideEffects"]) == ("Fail", "None")
    assert "namespaceSelector" not in webhook  # the operator watches every namespace
    # `kubectl scale`, an HPA and KEDA write the scale subresource: its own handler checks bounds.
    scale = webhook_of(defaults, "rljobs-scale")
    assert scale["clientConfig"]["service"]["path"] == f"/{admission.SCALE_WEBHOOK_ID}"
    assert scale["rules"] == [
        webhook["rules"][0] | {"operations": ["UPDATE"], "resources": ["rljobs/scale"]}
    ]
    assert scale["clientConfig"]["caBundle"] == webhook["clientConfig"]["caBundle"]
    # The certificate's Secret is what the operator reads its tls.crt and tls.key from.
    mount = next(m for m in operator["volumeMounts"] if m["name"] == "webhook-tls")
    assert mount["mountPath"] == environ["KUBERL_WEBHOOK_CERT_DIR"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    secret = chart.find(defaults, "Secret", volume["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/tls"
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


def test_values_set_the_failure_policy_and_the_watched_namespace():
    objects = chart.render(
        {
            "operator": {
                "webhook": {"failurePolicy": "Ignore", "timeoutSeconds": 5},
                "settings": {"watchNamespace": "training"},
            }
        }
    )
    webhook = webhook_of(objects)

    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 5)
    assert webhook["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "training"}
    }


def test_cert_manager_issues_the_certificate_and_injects_its_ca():
    objects = chart.render({"operator": {"webhook": {"certManager": {"enabled": True}}}})
    certificate = chart.find(objects, "Certificate")
    issuer = chart.find(objects, "Issuer")
    configuration = chart.find(objects, "ValidatingWebhookConfiguration")
    volume = next(v for v in operator_pod(objects)["volumes"] if v["name"] == "webhook-tls")

    assert certificate["spec"]["secretName"] == volume["secret"]["secretName"]
    assert SERVICE_DNS in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    assert "selfSigned" in issuer["spec"]
    injected = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert injected == f"{chart.NAMESPACE}/{certificate['metadata']['name']}"
    assert "caBundle" not in webhook_of(objects)["clientConfig"]
    assert not [o for o in objects if o["kind"] == "Secret" and o["type"] == "kubernetes.io/tls"]


def test_without_the_webhook_the_operator_serves_none():
    objects = chart.render({"operator": {"webhook": {"enabled": False}}})
    pod = operator_pod(objects)
    (operator,) = pod["containers"]
    environ = {var["name"]: var.get("value") for var in operator["env"]}

    assert not [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
    assert not [o for o in objects if "webhook" in o["metadata"]["name"]]
    assert OperatorSettings(webhook_port=environ["KUBERL_WEBHOOK_PORT"]).webhook_port == 0
    assert "webhook" not in [p["name"] for p in operator["ports"]]
    assert "webhook-tls" not in [v["name"] for v in pod["volumes"]]


# --- The chart's certificate, served by the operator ---------------------------------------------


def test_the_charts_certificate_is_for_the_service_and_signed_by_the_ca_bundle(defaults):
    secret = chart.find(defaults, "Secret", "kuberl-operator-webhook-tls")
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca_bundle = base64.b64decode(webhook_of(defaults)["clientConfig"]["caBundle"])
    authority = x509.load_pem_x509_certificate(ca_bundle)

    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert SERVICE_DNS in names.get_values_for_type(x509.DNSName)
    certificate.verify_directly_issued_by(authority)


def write_tls_secret(secret: dict[str, Any], directory: Path) -> Path:
    """The Secret's files as the kubelet mounts them; returns the CA's path."""
    directory.mkdir(parents=True)
    for key, value in secret["data"].items():
        (directory / key).write_bytes(base64.b64decode(value))
    return directory / "ca.crt"


def review(obj: dict[str, Any]) -> dict[str, Any]:
    resource = {"group": "kuberl.io", "version": "v1alpha1", "resource": "rljobs"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "kuberl.io", "version": "v1alpha1", "kind": "RLJob"},
            "resource": resource,
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": obj,
        },
    }


def test_the_operator_serves_the_charts_certificate_to_a_client_that_trusts_the_ca_bundle(
    defaults, kube_api, tmp_path
):
    """As the API server calls it: TLS to the Service's DNS name, trusting only the caBundle."""
    certs = tmp_path / "webhook"
    ca = write_tls_secret(chart.find(defaults, "Secret", "kuberl-operator-webhook-tls"), certs)
    settings = OperatorSettings(webhook_port=free_port(), webhook_cert_dir=str(certs))
    registry = kopf.OperatorRegistry()
    admission.register(registry, settings, address="127.0.0.1")
    kube_api.register_crd()
    # Connect to loopback, but check the certificate against the name the API server dials.
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1",
        settings.webhook_port,
        ca_certs=str(ca),
        server_hostname=SERVICE_DNS,
        assert_hostname=SERVICE_DNS,
        retries=False,
    )
    path = webhook_of(defaults)["clientConfig"]["service"]["path"]
    job = rljob("typo")
    job["spec"]["trainer"]["hyperparameters"]["learning_rat"] = 0.001

    def answer(obj: dict[str, Any]) -> dict[str, Any] | None:
        try:
            sent = pool.request("POST", path, body=json.dumps(review(obj)), timeout=10)
        except urllib3.exceptions.NewConnectionError:
            return None  # not listening yet
        return json.loads(sent.data)["response"] if sent.status == 200 else None

    with kube_api.kopf(registry):
        refused = wait_until(lambda: answer(job), 60, "the webhook's answer")
        assert refused["allowed"] is False
        assert "did you mean 'learning_rate'?" in refused["status"]["message"]
        assert answer(rljob("fine"))["allowed"] is True
