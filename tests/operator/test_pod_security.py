"""Every Ray pod the operator asks for passes Pod Security "restricted", rule by rule
(pod_security.py), for every example job: a namespace that enforces it admits RLJobs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pod_security import BASELINE, RESTRICTED, RESTRICTED_RULES, violations

from kuberl_operator.builders import build_children
from kuberl_operator.settings import OperatorSettings
from kuberl_operator.validation import load_rljob, validate_rljob
from testkit import edited

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
SETTINGS = OperatorSettings()


def pod_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
    spec = cluster["spec"]
    return [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]


def as_kuberay_makes_it(template: dict[str, Any], worker: bool) -> dict[str, Any]:
    """The pod KubeRay v1.7 makes from a template: a worker also runs the init container
    `wait-gcs-ready`, with the Ray container's image and a copy of its securityContext
    (ray-operator/controllers/ray/common/pod.go)."""
    pod = copy.deepcopy(template)
    if worker:
        ray = pod["spec"]["containers"][0]
        init = {"name": "wait-gcs-ready", "image": ray["image"]}
        if "securityContext" in ray:
            init["securityContext"] = copy.deepcopy(ray["securityContext"])
        pod["spec"].setdefault("initContainers", []).append(init)
    return pod


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_pod_of_every_example_passes_the_restricted_profile(example):
    job = load_rljob(example)
    templates = pod_templates(build_children(job, SETTINGS, attempt=1, token="t"))

    assert templates
    for index, template in enumerate(templates):
        pod = as_kuberay_makes_it(template, worker=index > 0)
        assert violations(pod, RESTRICTED) == [], f"{example.name}, pod template {index}"


def test_a_job_with_its_own_service_account_labels_and_storage_passes_too():
    manifest = load_rljob(EXAMPLES[0]).model_dump(mode="json", by_alias=True, exclude_unset=True)
    job = validate_rljob(
        edited(
            manifest,
            **{
                "spec.pods": {
                    "serviceAccountName": "rl-trainer",
                    "labels": {"team": "rl"},
                    "annotations": {"example.com/owner": "rl"},
                },
                "spec.storage": {
                    "persistentVolumeClaim": {"claimName": "checkpoints"},
                    "mountPath": "/data/checkpoints",
                },
                "spec.rolloutWorkers.replicas": 2,
            },
        )
    )
    settings = OperatorSettings(allowed_service_accounts=("rl-trainer",))
    for template in pod_templates(build_children(job, settings, attempt=1, token="t")):
        assert violations(as_kuberay_makes_it(template, worker=True)) == []


# --- The checker catches each rule ---------------------------------------------------------------


def good_pod() -> dict[str, Any]:
    """A pod the restricted profile admits."""
    context = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": [{"name": "init", "image": "i", "securityContext": dict(context)}],
            "containers": [
                {
                    "name": "main",
                    "image": "i",
                    "securityContext": copy.deepcopy(context),
                    "ports": [{"containerPort": 80}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


def main_context(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]["securityContext"]


def init_context(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["initContainers"][0]["securityContext"]


Breakage = Callable[[dict[str, Any]], None]
# One deliberately broken pod per rule: the rule's name, whether baseline already refuses it, and
# the breakage.
BROKEN: dict[str, tuple[bool, Breakage]] = {
    "hostProcess": (
        True,
        lambda p: main_context(p).update(windowsOptions={"hostProcess": True}),
    ),
    "host namespaces": (True, lambda p: p["spec"].update(hostPID=True)),
    "privileged containers": (True, lambda p: init_context(p).update(privileged=True)),
    "capabilities (baseline)": (
        True,
        lambda p: main_context(p)["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    "hostPath volumes": (
        True,
        lambda p: p["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
    ),
    "host ports": (True, lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=80)),
    "AppArmor": (
        True,
        lambda p: p["metadata"].update(
            annotations={"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
        ),
    ),
    "SELinux": (True, lambda p: main_context(p).update(seLinuxOptions={"type": "spc_t"})),
    "/proc mount type": (True, lambda p: main_context(p).update(procMount="Unmasked")),
    "seccomp (baseline)": (
        True,
        lambda p: main_context(p).update(seccompProfile={"type": "Unconfined"}),
    ),
    "sysctls": (
        True,
        lambda p: p["spec"]["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
    ),
    "volume types": (
        False,
        lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
    ),
    "privilege escalation": (False, lambda p: init_context(p).pop("allowPrivilegeEscalation")),
    "running as non-root": (
        False,
        lambda p: (
            p["spec"]["securityContext"].pop("runAsNonRoot"),
            init_context(p).pop("runAsNonRoot"),
        ),
    ),
    "running as non-root user": (False, lambda p: main_context(p).update(runAsUser=0)),
    "seccomp (restricted)": (
        False,
        lambda p: (
            p["spec"]["securityContext"].pop("seccompProfile"),
            init_context(p).pop("seccompProfile"),
        ),
    ),
    "capabilities (restricted)": (
        False,
        lambda p: main_context(p)["capabilities"].update(drop=["NET_RAW"]),
    ),
}


def test_the_good_pod_passes_and_every_rule_has_a_broken_one():
    assert violations(good_pod(), RESTRICTED) == []
    assert set(BROKEN) == set(RESTRICTED_RULES)


@pytest.mark.parametrize("rule", BROKEN)
def test_the_checker_catches_each_rule_on_a_bad_pod(rule):
    baseline_too, breakage = BROKEN[rule]
    pod = good_pod()
    breakage(pod)

    found = violations(pod, RESTRICTED)
    assert any(line.startswith(f"{rule}: ") for line in found), found
    assert bool(violations(pod, BASELINE)) == baseline_too, violations(pod, BASELINE)


def test_a_containers_own_setting_overrides_its_pods():
    pod = good_pod()
    main_context(pod)["runAsNonRoot"] = False
    assert "running as non-root: spec.containers[0].securityContext.runAsNonRoot is false" in (
        violations(pod)
    )
    allowed = good_pod()
    main_context(allowed).pop("runAsNonRoot")  # the pod's true applies
    main_context(allowed)["seccompProfile"] = {"type": "Localhost", "localhostProfile": "p.json"}
    assert violations(allowed) == []
