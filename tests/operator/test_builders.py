"""The builders: what each spec field becomes, and every built object checked against the schema
the API server would check it with (Kubernetes' own for built-in kinds and pod templates,
KubeRay v1.7's CRD for the RayCluster)."""

from __future__ import annotations

import copy
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kuberl_contract.capacity import RAY_CAPACITY_ENV, Capacity
from kuberl_operator.builders import (
    RAY_STOP_MARGIN_SECONDS,
    STOP_DRIVER,
    build_auth_secret,
    build_children,
    build_job_config_map,
    build_pod_disruption_budget,
    build_ray_cluster,
    child_names,
    child_refs,
    driver_entrypoint,
    head_service_name,
    job_claim_name,
    ray_auth_token,
    ray_capacity,
    ray_cluster_name,
    run_dir,
    scale_on_demand,
    submission_id,
)
from kuberl_operator.builders.driver import ephemeral_checkpoints
from kuberl_operator.constants import (
    ATTEMPT_LABEL,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY_LABEL,
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_TOKEN_ENV,
    ROLLOUT_GROUP,
    ROLLOUT_ON_DEMAND_GROUP,
    SPOT_RAY_RESOURCE,
)
from kuberl_operator.settings import InvalidSettings, OperatorSettings
from kuberl_operator.spec import JOB_NAME_PATTERN, Phase, RLJob
from kuberl_operator.status import PendingSpotWorkers
from kuberl_operator.status.fallback import max_unavailable, on_demand_replicas
from kuberl_operator.validation import InvalidManifest, load_rljob, validate_rljob
from testkit import as_strict_json_schema, edited, rljob

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
KUBERAY_CRD = ROOT.parent / "shared" / "kuberay" / "ray.io_rayclusters.yaml"
KUBERNETES_VERSION = "1.37"
SETTINGS = OperatorSettings()
TOKEN = "s3cr3t-token"

MINIMAL: dict[str, Any] = rljob("walker", minimal=True)


def job_with(**changes: Any) -> RLJob:
    """MINIMAL with changes at dotted paths (`**{"spec.learner.gpus": 1}`), validated."""
    return validate_rljob(edited(MINIMAL, **changes))


def spot(provider: str, **workers: Any) -> dict[str, Any]:
    return {
        "spec.rolloutWorkers": {
            "replicas": 4,
            "spot": {"enabled": True, "provider": provider, "maxUnavailable": 1},
            **workers,
        }
    }


CUSTOM_SPOT = spot(
    "custom",
    nodeSelector={"example.com/capacity": "preemptible"},
    tolerations=[{"key": "example.com/preemptible", "operator": "Exists", "effect": "NoSchedule"}],
)

# A population of 3 PPO trials, each with its own rollout workers.
PBT_TRAINER = {
    "algorithm": "PBT",
    "env": "CartPole-v1",
    "stop": {"timesteps": 1000},
    "hyperparameters": {"population": 3, "cpus_per_trial": 1.5},
    "trainer": {"algorithm": "PPO"},
}

CASES: dict[str, dict[str, Any]] = {
    "minimal": {},
    "cpu-workers": {"spec.rolloutWorkers": {"replicas": 3, "cpusPerWorker": 0.5}},
    "gpu-learner": {
        "spec.learner": {"gpus": 2, "gpuType": "nvidia-l4", "cpu": "8", "memory": "32Gi"}
    },
    "spot-gke": spot("gke"),
    "spot-eks": spot("eks"),
    "spot-karpenter": spot("karpenter"),
    "spot-aks": spot("aks"),
    "spot-custom": CUSTOM_SPOT,
    "spot-pinned": spot("gke", rayResources={"spot": 1}, cpusPerWorker=0.5),
    "spot-without-fallback": {
        "spec.rolloutWorkers": {
            "replicas": 2,
            "spot": {"enabled": True, "provider": "gke", "fallbackToOnDemand": False},
        }
    },
    "storage-pvc": {"spec.storage": {"persistentVolumeClaim": {"claimName": "rl-checkpoints"}}},
    "storage-pvc-mount-path": {
        "spec.storage": {
            "persistentVolumeClaim": {"claimName": "rl-checkpoints"},
            "mountPath": "/data/rl/",
        }
    },
    "storage-secret": {"spec.storage": {"secretRef": {"name": "s3-credentials"}}},
    "storage-own-claim": {"spec.storage": {"size": "5Gi", "storageClassName": "standard-rwo"}},
    "storage-own-claim-default-class": {"spec.storage": {"size": 10, "mountPath": "/data/rl"}},
    "kueue": {"metadata.labels": {KUEUE_QUEUE_LABEL: "gpu-training"}, **spot("gke")},
    "user-labels": {
        "metadata.labels": {
            "team": "rl",
            JOB_LABEL: "someone-else",
            MANAGED_BY_LABEL: "helm",
            ATTEMPT_LABEL: "9",
            "ray.io/cluster": "not-this-one",
        }
    },
    "priority-class": {"spec.priorityClassName": "training-high", **spot("aks")},
    "pod-options": {
        "spec.pods": {
            "labels": {"team": "rl"},
            "annotations": {"sidecar.istio.io/inject": "false"},
            "serviceAccountName": "rl-trainer",
        },
        **spot("gke"),
    },
    "namespaced": {"metadata.namespace": "team-rl"},
    "suspended": {"spec.suspend": True},
    # The asynchronous algorithms need nothing of their own from the operator.
    "a3c": {"spec.trainer.algorithm": "A3C", "spec.rolloutWorkers": {"replicas": 2}},
    "impala": {"spec.trainer.algorithm": "IMPALA", "spec.rolloutWorkers": {"replicas": 2}},
    "appo": {
        "spec.trainer.algorithm": "APPO",
        "spec.trainer.optimizerConfig": {"learnerQueueSize": 4, "broadcastInterval": 2},
        "spec.rolloutWorkers": {"replicas": 2},
    },
    "apex": {
        "spec.trainer.algorithm": "APEX",
        "spec.trainer.optimizerConfig": {"replayShards": 4, "cpusPerReplayShard": 0.5},
        "spec.rolloutWorkers": {"replicas": 2},
    },
    "custom-image": {
        "spec.image": "registry.example.com/rl/trainer:2",
        "spec.rayVersion": "2.60.0",
    },
    "pbt": {
        "spec.trainer": PBT_TRAINER,
        "spec.learner": {"cpu": "4"},
        **spot("gke", replicas=2),
    },
}


def case_job(case: str) -> RLJob:
    return job_with(**CASES[case])


def ray_groups(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {group["groupName"]: group for group in cluster["spec"]["workerGroupSpecs"]}


def pod_templates(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    return [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]


def head_spec(cluster: dict[str, Any]) -> dict[str, Any]:
    return cluster["spec"]["headGroupSpec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container["env"]}


# --- Schemas ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster_schema() -> jsonschema.Draft4Validator:
    if not KUBERAY_CRD.is_file():
        pytest.skip(
            f"KubeRay's RayCluster CRD is not at {KUBERAY_CRD} (../shared/kuberay/ beside the "
            "checkout): the RayCluster cannot be checked against it"
        )
    crd = yaml.safe_load(KUBERAY_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(as_strict_json_schema(version["schema"]["openAPIV3Schema"]))


def check_kubernetes_schema(obj: dict[str, Any]) -> None:
    """Kubernetes' own OpenAPI schema, strict: unknown fields are errors."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{obj['kind']} {obj['metadata'].get('name')}: {exc.json_path}: {exc.message}")


def check_pod_template(template: dict[str, Any]) -> None:
    """Each pod template again as a PodTemplate of Kubernetes itself: KubeRay's CRD carries a copy
    of the pod schema from the Kubernetes release KubeRay was built with; this is the API server's
    own, for the Kubernetes version kuberl targets."""
    check_kubernetes_schema(
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    )


def kuberay_problems(cluster: dict[str, Any]) -> list[str]:
    """Rules KubeRay's controller enforces that its CRD schema cannot express
    (ray-operator/controllers/ray/utils/validation.go), plus what the builders rely on."""
    spec, problems = cluster["spec"], []
    name = cluster["metadata"]["name"]
    # KubeRay (since v1.4) reconciles no RayCluster whose name is longer (MaxRayClusterNameLength)
    # or not a DNS-1035 label.
    if len(name) > 53 or not re.fullmatch(JOB_NAME_PATTERN, name):
        problems.append(f"RayCluster name {name!r} is not a DNS-1035 label of at most 53")
    head_service = ((spec["headGroupSpec"].get("headService") or {}).get("metadata") or {}).get(
        "name", f"{name}-head-svc"
    )
    if len(head_service) > 63 or not re.fullmatch(JOB_NAME_PATTERN, head_service):
        problems.append(f"head Service name {head_service!r} is not a Service name")
    if "managedBy" in spec:  # CEL: only KubeRay or MultiKueue may manage a RayCluster
        problems.append("managedBy is set")
    groups = [group["groupName"] for group in spec["workerGroupSpecs"]]
    if len(set(groups)) != len(groups):
        problems.append(f"worker group names repeat: {groups}")
    for group in spec["workerGroupSpecs"]:
        if not group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]:
            problems.append(f"{group['groupName']}: replicas outside [minReplicas, maxReplicas]")
    for template in pod_templates(cluster):
        ray_container = template["spec"]["containers"][0]  # KubeRay's RayContainerIndex
        if not ray_container["name"].startswith("ray-"):
            problems.append(f"the first container is {ray_container['name']}, not Ray's")
        if "command" in ray_container or "args" in ray_container:
            problems.append("a command would stop KubeRay from generating `ray start`")
    return problems


def check_every_object(
    job: RLJob, ray_cluster_schema: jsonschema.Draft4Validator, settings: OperatorSettings
) -> None:
    for obj in build_children(job, settings, attempt=1, token=TOKEN):
        if obj["kind"] == "RayCluster":
            errors = [
                f"{error.json_path}: {error.message}"
                for error in ray_cluster_schema.iter_errors(obj)
            ]
            assert not errors, errors
            assert not kuberay_problems(obj)
            for template in pod_templates(obj):
                check_pod_template(template)
        else:
            check_kubernetes_schema(obj)


@pytest.mark.parametrize("case", CASES)
def test_every_object_of_every_case_passes_its_schema(case, ray_cluster_schema):
    check_every_object(case_job(case), ray_cluster_schema, SETTINGS)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_object_of_every_example_passes_its_schema(example, ray_cluster_schema):
    check_every_object(load_rljob(example), ray_cluster_schema, SETTINGS)


def test_the_fallback_group_in_use_passes_the_schema(ray_cluster_schema):
    cluster = build_ray_cluster(case_job("spot-gke"), SETTINGS, 3, on_demand_replicas=4)

    assert not list(ray_cluster_schema.iter_errors(cluster))
    assert not kuberay_problems(cluster)


def test_the_schemas_catch_mistakes(ray_cluster_schema):
    """The checks above would fail on what the API server or KubeRay would refuse."""
    cluster = build_ray_cluster(case_job("spot-gke"), SETTINGS, 1)
    misspelt = copy.deepcopy(cluster)
    misspelt["spec"]["headGroupSpec"]["servicetype"] = "ClusterIP"
    bad_enum = copy.deepcopy(cluster)
    bad_enum["spec"]["authOptions"]["mode"] = "Token"
    replicas_as_string = copy.deepcopy(cluster)
    replicas_as_string["spec"]["workerGroupSpecs"][0]["replicas"] = "4"
    for broken in (misspelt, bad_enum, replicas_as_string):
        assert not ray_cluster_schema.is_valid(broken)

    scaled_past_max = copy.deepcopy(cluster)
    scaled_past_max["spec"]["workerGroupSpecs"][1]["replicas"] = 5
    assert kuberay_problems(scaled_past_max)

    template = copy.deepcopy(cluster["spec"]["headGroupSpec"]["template"])
    template["spec"]["containers"][0]["resources"]["limit"] = {}
    with pytest.raises(pytest.fail.Exception):
        check_pod_template(template)


# --- Names, labels, attempts --------------------------------------------------------------------


def test_child_names_are_fixed_and_distinct():
    names = child_names(job_with())

    assert names == (
        "walker",
        "walker-head-svc",
        "walker-ray-auth",
        "walker-job",
        "walker-head",
        "walker-ray",
        "walker-storage",
    )
    objects = build_children(job_with(), SETTINGS, attempt=1, token=TOKEN)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Secret", "walker-ray-auth"),
        ("ConfigMap", "walker-job"),
        ("NetworkPolicy", "walker-ray"),
        ("PodDisruptionBudget", "walker-head"),
        ("RayCluster", "walker"),
    ]


def test_the_longest_job_name_still_names_every_child(ray_cluster_schema):
    job = job_with(**{"metadata.name": "j" * 63})
    cluster = build_ray_cluster(job, SETTINGS, 1)

    assert cluster["metadata"]["name"] == child_names(job).ray_cluster
    assert not kuberay_problems(cluster)
    assert not list(ray_cluster_schema.iter_errors(cluster))
    assert all(len(name) <= 253 for name in child_names(job))


@pytest.mark.parametrize("length", [1, 41, 42, 53])
def test_a_job_name_kuberay_accepts_names_the_cluster(length):
    name = "j" * length

    assert ray_cluster_name(name) == name
    assert child_names(job_with(**{"metadata.name": name})).head_service == f"{name}-head-svc"


@pytest.mark.parametrize("length", [54, 55, 62, 63])
def test_a_longer_job_name_gets_a_shortened_cluster_name_of_its_own(length):
    name = "a" + "-b" * ((length - 1) // 2) + "c" * ((length - 1) % 2)
    sibling = name[:-1] + "z"

    shortened = ray_cluster_name(name)
    assert len(name) == length and len(shortened) <= 53
    assert re.fullmatch(JOB_NAME_PATTERN, shortened)
    assert shortened.startswith(name[:40])
    assert ray_cluster_name(name) == shortened  # the same on every call: restart-safe
    assert ray_cluster_name(sibling) != shortened


def test_the_cluster_names_its_head_service_and_the_pdb_selects_its_pods():
    job = job_with(**{"metadata.name": "x" * 63})
    cluster = build_ray_cluster(job, SETTINGS, 1)
    names = child_names(job)

    head_service = cluster["spec"]["headGroupSpec"]["headService"]
    assert head_service == {"metadata": {"name": names.head_service}}
    assert names.head_service == head_service_name(names.ray_cluster)
    assert len(names.head_service) <= 63
    selector = build_pod_disruption_budget(job)["spec"]["selector"]["matchLabels"]
    assert selector["ray.io/cluster"] == cluster["metadata"]["name"]


def test_the_operator_dials_the_service_the_cluster_names():
    job = job_with(**{"metadata.name": "y" * 63, "metadata.namespace": "team-a"})
    names = child_names(job)

    assert SETTINGS.dashboard_url(names.head_service, names.ray_cluster, "team-a") == (
        f"http://{names.head_service}.team-a.svc:8265"
    )
    assert SETTINGS.metrics_url(names.head_service, names.ray_cluster, "team-a") == (
        f"http://{names.head_service}.team-a.svc:{SETTINGS.trainer_metrics_port}/metrics"
    )
    custom = OperatorSettings(ray_dashboard_url="http://{cluster}.{namespace}.example:8265")
    assert custom.dashboard_url(names.head_service, names.ray_cluster, "team-a") == (
        f"http://{names.ray_cluster}.team-a.example:8265"
    )


def test_every_child_and_pod_carries_the_operators_labels():
    job = case_job("spot-gke")
    cluster = build_ray_cluster(job, SETTINGS, attempt=2)
    labelled = [
        o["metadata"]["labels"] for o in build_children(job, SETTINGS, attempt=2, token=TOKEN)
    ] + [template["metadata"]["labels"] for template in pod_templates(cluster)]

    for labels in labelled:
        assert labels[MANAGED_BY_LABEL] == "kuberl"
        assert labels[JOB_LABEL] == "walker"
    assert cluster["metadata"]["labels"][ATTEMPT_LABEL] == "2"
    assert {t["metadata"]["labels"][ATTEMPT_LABEL] for t in pod_templates(cluster)} == {"2"}


def test_user_labels_propagate_but_never_override_the_operators():
    job = case_job("user-labels")
    cluster = build_ray_cluster(job, SETTINGS, attempt=1)
    objects = build_children(job, SETTINGS, attempt=1, token=TOKEN)

    for labels in [o["metadata"]["labels"] for o in objects] + [
        t["metadata"]["labels"] for t in pod_templates(cluster)
    ]:
        assert labels["team"] == "rl"
        assert labels[JOB_LABEL] == "walker"
        assert labels[MANAGED_BY_LABEL] == "kuberl"
        assert "ray.io/cluster" not in labels  # KubeRay's to set, on the pods it creates
    assert cluster["metadata"]["labels"][ATTEMPT_LABEL] == "1"


def test_attempts_start_at_one():
    with pytest.raises(ValueError, match="attempt must be >= 1"):
        build_ray_cluster(job_with(), SETTINGS, attempt=0)


def test_namespace_is_the_jobs():
    objects = build_children(case_job("namespaced"), SETTINGS, attempt=1, token=TOKEN)

    assert {o["metadata"]["namespace"] for o in objects} == {"team-rl"}
    assert all(
        "namespace" not in o["metadata"] for o in build_children(job_with(), SETTINGS, 1, "t")
    )


# --- The head -----------------------------------------------------------------------------------


def test_head_serves_ray_inside_the_cluster_only():
    head = build_ray_cluster(job_with(), SETTINGS, 1)["spec"]["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]

    assert head["serviceType"] == "ClusterIP"
    assert head["enableIngress"] is False and "ingressOptions" not in head
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["dashboard"] == 8265
    assert ports["kuberl-metrics"] == SETTINGS.trainer_metrics_port
    assert all("hostPort" not in port for port in container["ports"])


def test_head_stops_the_driver_before_ray():
    settings = OperatorSettings(termination_grace_period_seconds=90)
    spec = head_spec(build_ray_cluster(job_with(), settings, 1))
    (container,) = spec["containers"]

    assert spec["terminationGracePeriodSeconds"] == 90
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sh", "-c", STOP_DRIVER]
    assert 'pkill -TERM -f "[k]uberl train"' in STOP_DRIVER
    assert 'while pgrep -f "[k]uberl train"' in STOP_DRIVER


def test_the_stop_pattern_matches_the_driver_but_not_the_hook():
    import re

    driver = "/usr/bin/python3 /usr/local/bin/kuberl train /etc/kuberl/job.yaml --run-dir /r"
    hook = f"sh -c {STOP_DRIVER}"

    assert re.search("[k]uberl train", driver)
    assert not re.search("[k]uberl train", hook)
    assert re.search("[k]uberl train", driver_entrypoint(job_with(), SETTINGS))


def test_cpu_learner_in_the_head():
    cluster = build_ray_cluster(
        job_with(**{"spec.learner": {"cpu": "3", "memory": "6Gi"}}), SETTINGS, 1
    )
    spec = head_spec(cluster)
    resources = spec["containers"][0]["resources"]

    assert resources == {
        "requests": {"cpu": "3", "memory": "6Gi"},
        "limits": {"cpu": "3", "memory": "6Gi"},
    }
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert "nodeSelector" not in spec and "tolerations" not in spec and "affinity" not in spec


def test_gpu_learner_in_the_head():
    cluster = build_ray_cluster(case_job("gpu-learner"), SETTINGS, 1)
    spec = head_spec(cluster)

    assert spec["containers"][0]["resources"]["limits"] == {
        "cpu": "8",
        "memory": "32Gi",
        "nvidia.com/gpu": "2",
    }
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["requests"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "2"


def test_gpu_model_label_is_a_setting():
    settings = OperatorSettings(gpu_type_label="nvidia.com/gpu.product")
    spec = head_spec(build_ray_cluster(case_job("gpu-learner"), settings, 1))

    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-l4"}


def test_learner_placement_of_the_user_is_kept_without_repeating_the_gpu_toleration():
    example = load_rljob(ROOT / "deploy" / "examples" / "pendulum-ppo-gpu-spot.yaml")
    spec = head_spec(build_ray_cluster(example, SETTINGS, 1))

    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "cloud.google.com/gke-nodepool": "gpu-pool",
    }
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


# --- Rollout workers and spot -------------------------------------------------------------------

GKE_TAINT = {
    "key": "cloud.google.com/gke-spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
AKS_TAINT = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}
SPOT_PLACEMENT = {
    # case: (nodeSelector, tolerations) of the spot group
    "spot-gke": ({"cloud.google.com/gke-spot": "true"}, [GKE_TAINT]),
    "spot-eks": ({"eks.amazonaws.com/capacityType": "SPOT"}, []),
    "spot-karpenter": ({"karpenter.sh/capacity-type": "spot"}, []),
    "spot-aks": ({"kubernetes.azure.com/scalesetpriority": "spot"}, [AKS_TAINT]),
    "spot-custom": (
        {"example.com/capacity": "preemptible"},
        [{"key": "example.com/preemptible", "operator": "Exists", "effect": "NoSchedule"}],
    ),
}


def not_on_spot(template_spec: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = template_spec.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {})
    return [e for term in terms.get("nodeSelectorTerms", []) for e in term["matchExpressions"]]


@pytest.mark.parametrize("case", SPOT_PLACEMENT)
def test_spot_preset_per_provider(case):
    selector, tolerations = SPOT_PLACEMENT[case]
    cluster = build_ray_cluster(case_job(case), SETTINGS, 1)
    spot_spec = ray_groups(cluster)[ROLLOUT_GROUP]["template"]["spec"]

    assert spot_spec.get("nodeSelector", {}) == selector
    assert spot_spec.get("tolerations", []) == tolerations
    assert not_on_spot(spot_spec) == []


@pytest.mark.parametrize("case", SPOT_PLACEMENT)
def test_head_and_fallback_group_stay_off_spot_nodes(case):
    selector, _ = SPOT_PLACEMENT[case]
    cluster = build_ray_cluster(case_job(case), SETTINGS, 1)
    (key, value), custom = next(iter(selector.items())), case == "spot-custom"

    for template_spec in (
        head_spec(cluster),
        ray_groups(cluster)[ROLLOUT_ON_DEMAND_GROUP]["template"]["spec"],
    ):
        assert key not in template_spec.get("nodeSelector", {})
        assert "tolerations" not in template_spec
        # A preset is known for every provider but custom: keep off that provider's spot nodes.
        expected = [] if custom else [{"key": key, "operator": "NotIn", "values": [value]}]
        assert not_on_spot(template_spec) == expected


def test_user_placement_of_workers_merges_with_the_preset():
    extra_toleration = {
        "key": "dedicated",
        "operator": "Equal",
        "value": "rl",
        "effect": "NoExecute",
    }
    job = job_with(
        **spot(
            "gke",
            nodeSelector={"cloud.google.com/gke-nodepool": "spot-pool"},
            tolerations=[{**extra_toleration, "tolerationSeconds": 30}],
        )
    )
    groups = ray_groups(build_ray_cluster(job, SETTINGS, 1))
    spot_spec = groups[ROLLOUT_GROUP]["template"]["spec"]
    on_demand_spec = groups[ROLLOUT_ON_DEMAND_GROUP]["template"]["spec"]

    assert spot_spec["nodeSelector"] == {
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-nodepool": "spot-pool",
    }
    assert spot_spec["tolerations"] == [GKE_TAINT, {**extra_toleration, "tolerationSeconds": 30}]
    assert on_demand_spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "spot-pool"}
    assert on_demand_spec["tolerations"] == [{**extra_toleration, "tolerationSeconds": 30}]


def test_fallback_group():
    cluster = build_ray_cluster(case_job("spot-gke"), SETTINGS, 1)
    groups = ray_groups(cluster)
    spot_group, on_demand = groups[ROLLOUT_GROUP], groups[ROLLOUT_ON_DEMAND_GROUP]

    assert list(groups) == [ROLLOUT_GROUP, ROLLOUT_ON_DEMAND_GROUP]
    assert (spot_group["replicas"], spot_group["minReplicas"], spot_group["maxReplicas"]) == (
        4,
        0,
        4,
    )
    assert (on_demand["replicas"], on_demand["minReplicas"], on_demand["maxReplicas"]) == (0, 0, 4)
    assert cluster["spec"]["enableInTreeAutoscaling"] is False
    assert all("priority" not in group for group in groups.values())


def test_fallback_group_size_comes_from_the_caller():
    job = case_job("spot-gke")
    cluster = build_ray_cluster(job, SETTINGS, 1, on_demand_replicas=3)

    assert ray_groups(cluster)[ROLLOUT_ON_DEMAND_GROUP]["replicas"] == 3
    assert ray_groups(cluster)[ROLLOUT_GROUP]["replicas"] == 4  # spot pods keep waiting
    with pytest.raises(ValueError, match=r"within 0\.\.4"):
        build_ray_cluster(job, SETTINGS, 1, on_demand_replicas=5)


@pytest.mark.parametrize(
    ("case", "groups"),
    [
        ("minimal", []),
        ("cpu-workers", [ROLLOUT_GROUP]),
        ("spot-without-fallback", [ROLLOUT_GROUP]),
        ("spot-eks", [ROLLOUT_GROUP, ROLLOUT_ON_DEMAND_GROUP]),
    ],
)
def test_worker_groups_present(case, groups):
    assert list(ray_groups(build_ray_cluster(case_job(case), SETTINGS, 1))) == groups


@pytest.mark.parametrize(
    ("cpus", "cpu_request", "cpu_limit"),
    [(1, "1", "1"), (2.0, "2", "2"), (0.5, "500m", "1"), (1.5, "1500m", "2"), (0.3, "300m", "1")],
)
def test_rollout_worker_cpus(cpus, cpu_request, cpu_limit):
    job = job_with(**{"spec.rolloutWorkers": {"replicas": 2, "cpusPerWorker": cpus}})
    group = ray_groups(build_ray_cluster(job, SETTINGS, 1))[ROLLOUT_GROUP]
    resources = group["template"]["spec"]["containers"][0]["resources"]

    assert resources["requests"]["cpu"] == cpu_request
    assert resources["limits"]["cpu"] == cpu_limit
    assert group["rayStartParams"]["num-cpus"] == cpu_limit
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "2Gi"


@pytest.mark.parametrize("case", ["spot-gke", "spot-pinned", "spot-without-fallback"])
def test_spot_pods_advertise_the_spot_ray_resource_and_no_others_do(case):
    cluster = build_ray_cluster(case_job(case), SETTINGS, 1, on_demand_replicas=1)
    groups = ray_groups(cluster)

    param = groups[ROLLOUT_GROUP]["rayStartParams"]["resources"]
    assert param == '"{\\"spot\\": 1}"'  # KubeRay's documented form
    # KubeRay pastes `--resources=<value>` into the `ray start` command line that bash runs.
    [flag] = shlex.split(f"--resources={param}")
    assert json.loads(flag.removeprefix("--resources=")) == {SPOT_RAY_RESOURCE: 1}
    if ROLLOUT_ON_DEMAND_GROUP in groups:
        assert "resources" not in groups[ROLLOUT_ON_DEMAND_GROUP]["rayStartParams"]
    assert "resources" not in cluster["spec"]["headGroupSpec"]["rayStartParams"]


def test_workers_off_spot_advertise_no_custom_resource():
    group = ray_groups(build_ray_cluster(case_job("cpu-workers"), SETTINGS, 1))[ROLLOUT_GROUP]

    assert group["rayStartParams"] == {"num-cpus": "1"}


@pytest.mark.parametrize("case", ["a3c", "impala", "appo", "apex"])
def test_asynchronous_algorithms_get_the_same_cluster_as_the_others(case):
    job = case_job(case)
    cluster = build_ray_cluster(job, SETTINGS, 1)

    assert list(ray_groups(cluster)) == [ROLLOUT_GROUP]
    assert ray_groups(cluster)[ROLLOUT_GROUP]["replicas"] == 2
    assert job.spec.trainer.algorithm == case.upper()


def test_workers_on_demand_have_only_the_users_placement():
    job = job_with(
        **{"spec.rolloutWorkers": {"replicas": 2, "nodeSelector": {"pool": "cpu"}}},
    )
    spec = ray_groups(build_ray_cluster(job, SETTINGS, 1))[ROLLOUT_GROUP]["template"]["spec"]

    assert spec["nodeSelector"] == {"pool": "cpu"}
    assert "tolerations" not in spec and "affinity" not in spec


def test_priority_class_on_every_pod():
    cluster = build_ray_cluster(case_job("priority-class"), SETTINGS, 1)

    assert len(pod_templates(cluster)) == 3
    assert {t["spec"]["priorityClassName"] for t in pod_templates(cluster)} == {"training-high"}
    assert all(
        "priorityClassName" not in t["spec"]
        for t in pod_templates(build_ray_cluster(case_job("spot-aks"), SETTINGS, 1))
    )


def test_image_and_ray_version():
    cluster = build_ray_cluster(case_job("custom-image"), SETTINGS, 1)

    assert cluster["spec"]["rayVersion"] == "2.60.0"
    assert {t["spec"]["containers"][0]["image"] for t in pod_templates(cluster)} == {
        "registry.example.com/rl/trainer:2"
    }
    default = build_ray_cluster(job_with(), OperatorSettings(trainer_image="example.com/t:1"), 1)
    assert default["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == (
        "example.com/t:1"
    )


def test_a_gpu_learner_gets_the_cuda_image_and_rollout_workers_the_cpu_one():
    settings = OperatorSettings(
        trainer_image="example.com/t:1", trainer_gpu_image="example.com/t:1-cuda"
    )
    job = job_with(**{"spec.learner.gpus": 1, "spec.rolloutWorkers.replicas": 2})
    cluster = build_ray_cluster(job, settings, 1)
    head, *workers = pod_templates(cluster)
    assert head["spec"]["containers"][0]["image"] == "example.com/t:1-cuda"
    assert workers and {w["spec"]["containers"][0]["image"] for w in workers} == {"example.com/t:1"}
    # spec.image, when given, is every pod's image: the user chose it
    custom = build_ray_cluster(
        job_with(**{"spec.learner.gpus": 1, "spec.image": "example.com/mine:2"}), settings, 1
    )
    assert {t["spec"]["containers"][0]["image"] for t in pod_templates(custom)} == {
        "example.com/mine:2"
    }


# --- Authentication -----------------------------------------------------------------------------


def test_token_authentication_on_every_container():
    job = case_job("spot-gke")
    cluster = build_ray_cluster(job, SETTINGS, 1)
    reference = {"secretKeyRef": {"name": "walker-ray-auth", "key": "auth_token"}}

    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": "walker-ray-auth"}
    containers = [c for t in pod_templates(cluster) for c in t["spec"]["containers"]]
    assert len(containers) == 3
    for container in containers:
        env = env_of(container)
        assert env[RAY_AUTH_MODE_ENV] == "token"
        assert env[RAY_AUTH_TOKEN_ENV] == reference


def test_auth_secret_holds_the_callers_token():
    secret = build_auth_secret(job_with(), SETTINGS, TOKEN)

    assert secret["stringData"] == {"auth_token": TOKEN}
    assert secret["type"] == "Opaque" and secret["immutable"] is True
    with pytest.raises(ValueError, match="empty"):
        build_auth_secret(job_with(), SETTINGS, "")


# --- Storage and the driver ---------------------------------------------------------------------


def volumes_and_mounts(cluster: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    spec = head_spec(cluster)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in spec["containers"][0]["volumeMounts"]}
    return volumes, mounts


STORAGE = {
    # case: (volume source of the run directory, its mount path, the driver's run directory)
    "minimal": ({"emptyDir": {}}, "/kuberl/runs", "/kuberl/runs/walker"),
    "storage-secret": ({"emptyDir": {}}, "/kuberl/runs", "/kuberl/runs/walker"),
    "storage-pvc": (
        {"persistentVolumeClaim": {"claimName": "rl-checkpoints"}},
        "/kuberl/checkpoints",
        "/kuberl/checkpoints/walker",
    ),
    "storage-pvc-mount-path": (
        {"persistentVolumeClaim": {"claimName": "rl-checkpoints"}},
        "/data/rl/",
        "/data/rl/walker",
    ),
    "storage-own-claim": (
        {"persistentVolumeClaim": {"claimName": "walker-storage"}},
        "/kuberl/checkpoints",
        "/kuberl/checkpoints/walker",
    ),
    "storage-own-claim-default-class": (
        {"persistentVolumeClaim": {"claimName": "walker-storage"}},
        "/data/rl",
        "/data/rl/walker",
    ),
}


@pytest.mark.parametrize("case", STORAGE)
def test_storage_variants(case):
    source, mount_path, expected_run_dir = STORAGE[case]
    job = case_job(case)
    volumes, mounts = volumes_and_mounts(build_ray_cluster(job, SETTINGS, 1))
    (name,) = set(volumes) - {"job-config", "shared-mem"}

    assert {k: v for k, v in volumes[name].items() if k != "name"} == source
    assert mounts[name] == mount_path
    assert run_dir(job, SETTINGS) == expected_run_dir
    assert f"--run-dir {expected_run_dir} " in driver_entrypoint(job, SETTINGS)


def test_a_job_with_a_storage_size_gets_a_claim_of_its_own_first():
    job = case_job("storage-own-claim")
    objects = build_children(job, SETTINGS, attempt=1, token=TOKEN)
    claim = objects[0]

    assert (claim["kind"], claim["metadata"]["name"]) == ("PersistentVolumeClaim", "walker-storage")
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "standard-rwo",
    }
    assert claim["metadata"]["labels"][JOB_LABEL] == "walker"
    assert [ref.kind for ref in child_refs(job, SETTINGS)] == [o["kind"] for o in objects]
    default_class = build_children(case_job("storage-own-claim-default-class"), SETTINGS, 1, TOKEN)
    assert "storageClassName" not in default_class[0]["spec"]
    assert default_class[0]["spec"]["resources"]["requests"]["storage"] == "10"
    assert ephemeral_checkpoints(job.spec) is None


def test_jobs_with_a_storage_size_never_share_a_claim():
    first, second = (
        job_with(**{"metadata.name": name, **CASES["storage-own-claim"]})
        for name in ("walker", "runner")
    )

    claims = {job_claim_name(job) for job in (first, second)}

    assert claims == {"walker-storage", "runner-storage"}


def test_object_store_credentials_reach_the_driver_only():
    cluster = build_ray_cluster(job_with(**CASES["storage-secret"], **spot("eks")), SETTINGS, 1)
    head, *workers = [t["spec"]["containers"][0] for t in pod_templates(cluster)]

    assert head["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    assert workers and all("envFrom" not in worker for worker in workers)


def test_the_checkpoint_credentials_secret_reaches_the_driver_only():
    job = job_with(
        **CASES["storage-secret"],
        **spot("eks"),
        **{"spec.trainer.checkpoint": {"uri": "s3://rl/walker", "credentialsSecret": "minio"}},
    )
    head, *workers = [
        t["spec"]["containers"][0] for t in pod_templates(build_ray_cluster(job, SETTINGS, 1))
    ]

    assert head["envFrom"] == [
        {"secretRef": {"name": "s3-credentials"}},
        {"secretRef": {"name": "minio"}},
    ]
    assert workers and all("envFrom" not in worker for worker in workers)
    same = job_with(
        **CASES["storage-secret"],
        **{"spec.trainer.checkpoint": {"credentialsSecret": "s3-credentials"}},
    )
    assert head_spec(build_ray_cluster(same, SETTINGS, 1))["containers"][0]["envFrom"] == [
        {"secretRef": {"name": "s3-credentials"}}
    ]


@pytest.mark.parametrize(
    ("grace", "floor", "expected"),
    [(None, 60, 60), (20, 60, 60), (90, 60, 90 + RAY_STOP_MARGIN_SECONDS), (20, 5, 35)],
)
def test_the_head_leaves_the_driver_its_checkpoint_grace(grace, floor, expected):
    changes = {"spec.trainer.checkpoint": {"gracePeriodSeconds": grace}} if grace else {}
    job = job_with(**changes, **spot("gke"))
    settings = OperatorSettings(termination_grace_period_seconds=floor)
    cluster = build_ray_cluster(job, settings, 1)

    assert head_spec(cluster)["terminationGracePeriodSeconds"] == expected
    if grace:  # the driver's share, then Ray's
        assert expected >= grace + RAY_STOP_MARGIN_SECONDS
    for group in cluster["spec"]["workerGroupSpecs"]:  # rollout workers checkpoint nothing
        assert "terminationGracePeriodSeconds" not in group["template"]["spec"]
    # A driver stopped through the Jobs API (an earlier attempt's) gets its grace before SIGKILL.
    environment = {e["name"]: e.get("value") for e in head_spec(cluster)["containers"][0]["env"]}
    assert environment["RAY_JOB_STOP_WAIT_TIME_S"] == str(grace or 20)


def advertised(group: dict[str, Any]) -> dict[str, float]:
    """The Ray resources a group's `ray start` advertises, read back from its rayStartParams."""
    params = group["rayStartParams"]
    resources = {"CPU": float(params["num-cpus"])}
    if "num-gpus" in params:
        resources["GPU"] = float(params["num-gpus"])
    if "resources" in params:
        [flag] = shlex.split(f"--resources={params['resources']}")
        resources |= json.loads(flag.removeprefix("--resources="))
    return resources


@pytest.mark.parametrize(
    "case", ["minimal", "gpu-learner", "spot-pinned", "spot-without-fallback", "apex"]
)
def test_the_driver_is_told_what_the_cluster_offers_at_most(case):
    cluster = build_ray_cluster(
        case_job(case), OperatorSettings(workers_join_timeout_seconds=300), 1
    )
    head = head_spec(cluster)["containers"][0]
    capacity = Capacity.from_json(env_of(head)[RAY_CAPACITY_ENV])

    assert capacity.wait_seconds == 300
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    assert [(g.resources, g.max_replicas) for g in capacity.groups] == [
        (advertised(group), group.get("maxReplicas", 1)) for group in groups
    ]
    for worker in cluster["spec"]["workerGroupSpecs"]:
        assert RAY_CAPACITY_ENV not in env_of(worker["template"]["spec"]["containers"][0])


def test_job_manifest_is_mounted_for_the_driver():
    volumes, mounts = volumes_and_mounts(build_ray_cluster(job_with(), SETTINGS, 1))

    assert volumes["job-config"]["configMap"] == {"name": "walker-job"}
    assert mounts["job-config"] == "/etc/kuberl"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_config_map_holds_the_job_the_driver_reads(example):
    job = load_rljob(example)
    text = build_job_config_map(job)["data"]["job.yaml"]
    document = yaml.safe_load(text)

    assert "status" not in document
    assert document["metadata"] == {"name": job.name}
    assert validate_rljob(document).spec == job.spec


def test_config_map_keeps_only_name_and_namespace_of_the_metadata():
    job = job_with(
        **{
            "metadata.namespace": "team-rl",
            "metadata.labels": {"team": "rl"},
            "metadata.resourceVersion": "12345",
            "status": {"phase": "Running", "restarts": 2},
        }
    )
    document = yaml.safe_load(build_job_config_map(job)["data"]["job.yaml"])

    assert document["metadata"] == {"name": "walker", "namespace": "team-rl"}
    assert "status" not in document


def test_driver_entrypoint_and_submission_id():
    job = job_with()

    assert driver_entrypoint(job, SETTINGS) == (
        "kuberl train /etc/kuberl/job.yaml --run-dir /kuberl/runs/walker --metrics-port 9464"
    )
    assert submission_id(job, 3) == "walker-3"


@pytest.mark.parametrize(
    ("storage", "fragment"),
    [
        ({}, "set one of size"),
        (
            {"persistentVolumeClaim": {"claimName": "c"}, "secretRef": {"name": "s"}},
            "set one of size",
        ),
        ({"size": "5Gi", "persistentVolumeClaim": {"claimName": "c"}}, "set one of size"),
        ({"size": "5 GB"}, "not a Kubernetes quantity"),
        ({"size": "5Gi", "storageClassName": "Fast_SSD"}, "DNS subdomain"),
        ({"persistentVolumeClaim": {"claimName": "c"}, "storageClassName": "ssd"}, "set size"),
        ({"secretRef": {"name": "s"}, "mountPath": "/data"}, "mountPath: only applies"),
        (
            {"persistentVolumeClaim": {"claimName": "c"}, "mountPath": "/etc/kuberl/x"},
            "/etc/kuberl",
        ),
        ({"persistentVolumeClaim": {"claimName": "c"}, "mountPath": "data"}, "absolute"),
        ({"persistentVolumeClaim": {"claimName": "Bad_Name"}}, "DNS subdomain"),
        ({"persistentVolumeClaim": {"claimName": "c", "readOnly": True}}, "unknown field"),
    ],
)
def test_storage_mistakes_are_reported_by_field(storage, fragment):
    with pytest.raises(InvalidManifest) as caught:
        job_with(**{"spec.storage": storage})

    problems = [str(problem) for problem in caught.value.problems]
    assert any(p.startswith("spec.storage") and fragment in p for p in problems), problems


# --- Kueue, suspension, the PDB -----------------------------------------------------------------


def test_kueue_queues_the_ray_cluster():
    job = case_job("kueue")
    cluster = build_ray_cluster(job, SETTINGS, 1)
    others = [o for o in build_children(job, SETTINGS, 1, TOKEN) if o["kind"] != "RayCluster"]

    assert cluster["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-training"
    assert cluster["spec"]["suspend"] is True  # Kueue admits clusters created suspended
    for labels in [t["metadata"]["labels"] for t in pod_templates(cluster)] + [
        o["metadata"]["labels"] for o in others
    ]:
        assert KUEUE_QUEUE_LABEL not in labels


@pytest.mark.parametrize(("case", "suspended"), [("minimal", False), ("suspended", True)])
def test_suspend(case, suspended):
    assert build_ray_cluster(case_job(case), SETTINGS, 1)["spec"]["suspend"] is suspended


def test_pod_disruption_budget_keeps_the_head():
    pdb = build_pod_disruption_budget(job_with())

    assert pdb["spec"] == {
        "maxUnavailable": 0,
        "selector": {"matchLabels": {"ray.io/cluster": "walker", "ray.io/node-type": "head"}},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


def test_a_job_may_let_drains_evict_its_head():
    job = job_with(**{"spec.learner.disruptionBudget": {"maxUnavailable": 1}})
    pdb = build_pod_disruption_budget(job)

    assert pdb["spec"]["maxUnavailable"] == 1
    check_kubernetes_schema(pdb)


@pytest.mark.parametrize("value", [2, -1, "1", "50%"])
def test_the_disruption_budget_takes_zero_or_one(value):
    with pytest.raises(InvalidManifest) as raised:
        job_with(**{"spec.learner.disruptionBudget.maxUnavailable": value})

    (problem,) = raised.value.problems
    assert problem.path == "spec.learner.disruptionBudget.maxUnavailable"
    assert "is not one of 0, 1" in problem.message


def test_the_pdb_selects_the_pods_of_the_cluster_built():
    job = job_with()
    selector = build_pod_disruption_budget(job)["spec"]["selector"]["matchLabels"]

    assert selector["ray.io/cluster"] == build_ray_cluster(job, SETTINGS, 1)["metadata"]["name"]


# --- Falling back to on-demand workers ----------------------------------------------------------

GRACE_SECONDS = 120  # the operator's fallback_pending_seconds


def fallback_replicas(job: RLJob, pending: int, seconds: float) -> int | None:
    """The on-demand group's size a running job's status asks for (status.fallback)."""
    queued = job.queue_name is not None
    spot = PendingSpotWorkers(pending, seconds, GRACE_SECONDS, queued=queued)
    return on_demand_replicas(job.spec, Phase.RUNNING, spot)


def fallback_job(replicas: int = 8, max_unavailable: int | str = 1, **spot_fields: Any) -> RLJob:
    spot_spec = {"enabled": True, "provider": "gke", "maxUnavailable": max_unavailable}
    return job_with(
        **{"spec.rolloutWorkers": {"replicas": replicas, "spot": spot_spec | spot_fields}}
    )


FALLBACK = {
    # case: (job, pending spot pods, seconds pending, on-demand replicas)
    "all-running": (fallback_job(), 0, 0, 0),
    "pending-not-long-enough": (fallback_job(), 5, 119, 0),
    "tolerated-missing": (fallback_job(max_unavailable=2), 2, 600, 0),
    "beyond-tolerance": (fallback_job(max_unavailable=2), 5, 600, 3),
    "at-the-threshold": (fallback_job(max_unavailable=0), 1, 120, 1),
    "no-spot-at-all": (fallback_job(max_unavailable=0), 8, 600, 8),
    "more-pending-than-replicas": (fallback_job(max_unavailable=0), 12, 600, 8),
    "percent-rounds-down": (fallback_job(max_unavailable="25%", replicas=7), 4, 600, 3),
    "percent-of-few": (fallback_job(max_unavailable="25%", replicas=2), 1, 600, 1),
    "hundred-percent": (fallback_job(max_unavailable="100%"), 8, 600, 0),
    "count-above-replicas": (fallback_job(max_unavailable=20), 8, 600, 0),
    "fallback-off": (fallback_job(max_unavailable=0, fallbackToOnDemand=False), 8, 600, 0),
    "spot-off": (
        job_with(**{"spec.rolloutWorkers": {"replicas": 4, "spot": {"enabled": False}}}),
        4,
        600,
        0,
    ),
    "queued-in-kueue": (case_job("kueue"), 4, 600, 0),
    "negative-count": (fallback_job(), -1, 600, 0),
}


@pytest.mark.parametrize(("job", "pending", "seconds", "expected"), FALLBACK.values(), ids=FALLBACK)
def test_fallback_replicas(job, pending, seconds, expected):
    assert fallback_replicas(job, pending, seconds) == expected


def tolerated(value: int | str, pods: int) -> int:
    """spot.maxUnavailable as a count, by its definition: a count up to the pods, or a
    percentage of the pods rounded down."""
    if isinstance(value, str):
        return math.floor(pods * float(value.removesuffix("%")) / 100)
    return min(value, pods)


# On-demand replicas for 0, 1, 2, ... pending spot pods, past the grace period, worked out by hand.
BY_HAND = {
    "8-replicas-2-unavailable": [0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 6, 6],
    "7-replicas-25%-unavailable": [0, 0, 1, 2, 3, 4, 5, 6, 6, 6, 6],  # 1.75 tolerated: 1
    "3-replicas-50%-unavailable": [0, 0, 1, 2, 2, 2, 2],  # 1.5 tolerated: 1
    "2-replicas-20-unavailable": [0, 0, 0, 0, 0, 0],  # tolerates losing them all
    "1-replicas-0-unavailable": [0, 1, 1, 1, 1],
    "pbt-3-trials-of-2-replicas": [0, 0, 1, 2, 3, 4, 5, 5, 5, 5],
}

# case: (job, rollout pods, workers missing that training tolerates)
FIT = {
    f"{replicas}-replicas-{value}-unavailable": (
        fallback_job(replicas=replicas, max_unavailable=value),
        replicas,
        tolerated(value, replicas),
    )
    for replicas in (1, 2, 3, 7, 8)
    for value in (0, 1, 2, 20, "25%", "50%", "100%")
} | {"pbt-3-trials-of-2-replicas": (case_job("pbt"), 6, 1)}  # the group holds every trial's pods


@pytest.mark.parametrize(
    ("job", "pods", "tolerance", "by_hand"),
    [(*case, BY_HAND.get(name)) for name, case in FIT.items()],
    ids=FIT,
)
def test_fallback_replicas_fit_the_group(job, pods, tolerance, by_hand):
    grace = GRACE_SECONDS
    built = build_ray_cluster(job, SETTINGS, 1)
    group = ray_groups(built)[ROLLOUT_ON_DEMAND_GROUP]
    assert (group["minReplicas"], group["maxReplicas"]) == (0, pods)
    names = [g["groupName"] for g in built["spec"]["workerGroupSpecs"]]
    path = f"/spec/workerGroupSpecs/{names.index(ROLLOUT_ON_DEMAND_GROUP)}"

    past_grace = []
    for pending in range(-1, pods + 4):
        missing = max(0, min(pending, pods))  # pending pods beyond the group are not workers
        for seconds in (0, grace - 1, grace, 10 * grace):
            replicas = fallback_replicas(job, pending, seconds)
            assert group["minReplicas"] <= replicas <= group["maxReplicas"]
            # Never pays for more on-demand workers than spot workers are missing.
            assert replicas <= missing
            if seconds < grace:
                assert replicas == 0  # spot capacity may still come
                continue
            # Training never runs with more workers missing than tolerated, and on-demand
            # workers beyond what that takes are not asked for.
            assert missing - replicas <= tolerance
            assert replicas == 0 or missing - replicas == tolerance
            if seconds == grace and pending >= 0:
                past_grace.append(replicas)

            # Built, and patched onto a running cluster, the group gets exactly that size.
            resized = build_ray_cluster(job, SETTINGS, 1, on_demand_replicas=replicas)
            assert ray_groups(resized)[ROLLOUT_ON_DEMAND_GROUP]["replicas"] == replicas
            assert scale_on_demand(built, replicas) == (
                []  # built with 0 replicas already
                if replicas == 0
                else [
                    {"op": "test", "path": f"{path}/groupName", "value": ROLLOUT_ON_DEMAND_GROUP},
                    {"op": "replace", "path": f"{path}/replicas", "value": replicas},
                ]
            )

    if by_hand is not None:
        assert past_grace == by_hand


@pytest.mark.parametrize(
    ("value", "replicas", "expected"),
    [(1, 4, 1), (9, 4, 4), (0, 4, 0), ("25%", 4, 1), ("25%", 3, 0), ("50%", 5, 2), ("100%", 6, 6)],
)
def test_max_unavailable(value, replicas, expected):
    assert max_unavailable(value, replicas) == expected


# --- Settings -----------------------------------------------------------------------------------


def test_settings_from_the_environment():
    settings = OperatorSettings.from_env(
        {
            "KUBERL_TRAINER_IMAGE": "example.com/trainer:3",
            "KUBERL_TERMINATION_GRACE_PERIOD_SECONDS": "120",
            "KUBERL_GPU_TYPE_LABEL": "nvidia.com/gpu.product",
            "KUBERL_WATCH_NAMESPACE": "",
            "KUBERL_ROLLOUT_WORKER_MEMORY": "3Gi",
            "HOME": "/root",
        }
    )

    assert settings.trainer_image == "example.com/trainer:3"
    assert settings.termination_grace_period_seconds == 120
    assert settings.gpu_type_label == "nvidia.com/gpu.product"
    assert settings.watch_namespace is None
    assert settings.rollout_worker_memory == "3Gi"
    assert settings.fallback_pending_seconds == OperatorSettings().fallback_pending_seconds
    assert OperatorSettings.from_env({}) == OperatorSettings()


def test_bad_settings_name_the_variable():
    with pytest.raises(InvalidSettings) as caught:
        OperatorSettings.from_env(
            {
                "KUBERL_FALLBACK_PENDING_SECONDS": "two minutes",
                "KUBERL_ROLLOUT_WORKER_MEMORY": "2GB",
            }
        )

    assert "KUBERL_FALLBACK_PENDING_SECONDS='two minutes'" in str(caught.value)
    assert "KUBERL_ROLLOUT_WORKER_MEMORY='2GB'" in str(caught.value)


def test_every_setting_is_documented():
    for name, field in OperatorSettings.model_fields.items():
        assert field.description, name
        assert f"KUBERL_{name.upper()}" in field.description, name


def test_a_population_gets_rollout_pods_for_every_trial_and_head_cpus_for_the_trials():
    job = case_job("pbt")
    cluster = build_ray_cluster(job, SETTINGS, 1, on_demand_replicas=6)
    groups = ray_groups(cluster)
    assert groups[ROLLOUT_GROUP]["replicas"] == groups[ROLLOUT_GROUP]["maxReplicas"] == 6
    assert groups[ROLLOUT_ON_DEMAND_GROUP]["maxReplicas"] == 6
    head = cluster["spec"]["headGroupSpec"]["rayStartParams"]
    assert head["num-cpus"] == "5"  # 3 trials x 1.5 CPUs, rounded up
    capacity = ray_capacity(job, SETTINGS)
    assert [(group.resources["CPU"], group.max_replicas) for group in capacity.groups][:2] == [
        (5.0, 1),
        (1.0, 6),
    ]


# --- What the pods may do -----------------------------------------------------------------------


def every_container(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for t in pod_templates(cluster) for c in t["spec"]["containers"]]


def test_every_ray_pod_runs_as_the_trainer_images_non_root_user():
    cluster = build_ray_cluster(case_job("spot-gke"), SETTINGS, 1)

    for template in pod_templates(cluster):
        pod = template["spec"]["securityContext"]
        assert (pod["runAsNonRoot"], pod["runAsUser"], pod["fsGroup"]) == (True, 10001, 10001)
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in every_container(cluster):
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    other = build_ray_cluster(job_with(), OperatorSettings(run_as_user=2000, run_as_group=3000), 1)
    assert head_spec(other)["securityContext"]["runAsUser"] == 2000
    assert head_spec(other)["securityContext"]["fsGroup"] == 3000


def test_ray_pods_mount_no_api_token_unless_an_allowed_service_account_is_named():
    plain = build_ray_cluster(case_job("spot-gke"), SETTINGS, 1)
    for template in pod_templates(plain):
        assert template["spec"]["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in template["spec"]

    named = job_with(**{"spec.pods": {"serviceAccountName": "rl-trainer"}}, **spot("gke"))
    for template in pod_templates(build_ray_cluster(named, SETTINGS, 1)):
        assert template["spec"]["serviceAccountName"] == "rl-trainer"
        # The ServiceAccount's own automountServiceAccountToken decides.
        assert "automountServiceAccountToken" not in template["spec"]


def test_rays_object_store_gets_memory_backed_shared_memory_sized_by_the_pod():
    cluster = build_ray_cluster(case_job("gpu-learner"), SETTINGS, 1)
    head = head_spec(cluster)

    assert {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in (
        head["volumes"]
    )
    assert {"name": "shared-mem", "mountPath": "/dev/shm"} in head["containers"][0]["volumeMounts"]
    workers = build_ray_cluster(case_job("cpu-workers"), SETTINGS, 1)["spec"]["workerGroupSpecs"]
    (worker,) = [group["template"]["spec"] for group in workers]
    assert worker["volumes"] == [
        {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    ]


def test_pod_labels_and_annotations_reach_every_pod_beside_the_operators():
    job = job_with(
        **{"spec.pods": {"labels": {"team": "rl"}, "annotations": {"example.com/owner": "rl"}}},
        **spot("gke"),
    )
    cluster = build_ray_cluster(job, SETTINGS, 1)

    for template in pod_templates(cluster):
        assert template["metadata"]["labels"]["team"] == "rl"
        assert template["metadata"]["labels"][JOB_LABEL] == "walker"
        assert template["metadata"]["annotations"] == {"example.com/owner": "rl"}
    assert "team" not in cluster["metadata"]["labels"]  # the pods', not the cluster's


def test_ray_auth_tokens_are_derived_from_the_key_and_the_jobs_identity():
    keyed = OperatorSettings(ray_auth_key="k" * 40)
    token = ray_auth_token(keyed, "team-rl", "walker", "uid-1")

    assert token and len(token) == 43  # 256 bits, URL-safe base64
    assert token == ray_auth_token(
        OperatorSettings(ray_auth_key="k" * 40), "team-rl", "walker", "uid-1"
    )
    others = {
        ray_auth_token(keyed, "team-ml", "walker", "uid-1"),
        ray_auth_token(keyed, "team-rl", "runner", "uid-1"),
        ray_auth_token(keyed, "team-rl", "walker", "uid-2"),  # recreated under the same name
        ray_auth_token(OperatorSettings(ray_auth_key="j" * 40), "team-rl", "walker", "uid-1"),
    }
    assert token not in others and len(others) == 4
    assert ray_auth_token(SETTINGS, "team-rl", "walker", "uid-1") is None  # no key: no derivation
