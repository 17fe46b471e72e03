"""`kuberl render` run as users run it: a real subprocess on real files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit import run_kuberl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))


def kuberl(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    # KUBERL_* variables of the calling shell would change the output: start from none.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KUBERL_")}
    return run_kuberl(*args, env=clean | env)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_renders_the_operators_objects(example):
    result = kuberl("render", example)

    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    # No Secret: `render | kubectl apply` must not give the cluster a token anyone can read.
    # The examples' claims are their own (spec.storage.size): rendered first, as created.
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        ("v1", "PersistentVolumeClaim"),
        ("v1", "ConfigMap"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("policy/v1", "PodDisruptionBudget"),
        ("ray.io/v1", "RayCluster"),
    ]
    names = {o["kind"]: o["metadata"]["name"] for o in objects}
    assert names["RayCluster"] == example.stem
    assert names["PersistentVolumeClaim"] == f"{example.stem}-storage"
    _, config_map, _, _, cluster = objects
    secret = cluster["spec"]["authOptions"]["secretName"]
    assert result.stderr.startswith(f"kuberl render: the Secret {secret} (the Ray cluster's")
    assert "the operator creates it" in result.stderr
    assert f"kubectl create secret generic {secret} --from-literal=auth_token=" in result.stderr
    embedded = yaml.safe_load(config_map["data"]["job.yaml"])
    assert embedded["metadata"]["name"] == example.stem and "status" not in embedded


def test_render_says_how_the_driver_starts():
    result = kuberl("render", ROOT / "deploy" / "examples" / "cartpole-ppo.yaml")

    comments = [line for line in result.stdout.splitlines() if line.startswith("#")]
    assert comments[2].endswith("as cartpole-ppo-1:")
    assert comments[3].strip("# ") == (
        "kuberl train /etc/kuberl/job.yaml --run-dir /kuberl/checkpoints/cartpole-ppo "
        "--metrics-port 9464"  # on the example's claim
    )


def test_render_follows_the_operators_settings():
    example = ROOT / "deploy" / "examples" / "pendulum-ppo-gpu-spot.yaml"
    result = kuberl("render", example, KUBERL_GPU_TYPE_LABEL="nvidia.com/gpu.product")

    [cluster] = [o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "RayCluster"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"]["nvidia.com/gpu.product"] == "nvidia-l4"
    groups = [group["groupName"] for group in cluster["spec"]["workerGroupSpecs"]]
    assert groups == ["rollout", "rollout-on-demand"]


def test_bad_settings_are_reported(tmp_path):
    example = ROOT / "deploy" / "examples" / "cartpole-ppo.yaml"
    result = kuberl("render", example, KUBERL_TERMINATION_GRACE_PERIOD_SECONDS="soon")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("operator settings: KUBERL_TERMINATION_GRACE_PERIOD_SECONDS=")


def test_broken_manifest_is_reported_by_field(tmp_path):
    path = tmp_path / "job.yaml"
    document = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text())
    document["spec"]["learner"] = {"memory": "8GB"}
    document["spec"]["storage"] = {"persistentVolumeClaim": {"claimName": "c"}, "mountPath": "x"}
    path.write_text(yaml.safe_dump(document))

    result = kuberl("render", path)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), result.stderr
    assert "spec.learner.memory: '8GB' is not a Kubernetes quantity" in result.stderr
    assert "spec.storage.mountPath: 'x' is not an absolute directory path" in result.stderr


def test_missing_file(tmp_path):
    result = kuberl("render", tmp_path / "nope.yaml")

    assert result.returncode == 2
    assert result.stderr == f"{tmp_path / 'nope.yaml'}: no such file\n"


def test_a_job_beyond_the_operators_settings_is_refused_as_the_operator_would(tmp_path):
    path = tmp_path / "job.yaml"
    document = yaml.safe_load((ROOT / "deploy" / "examples" / "cartpole-ppo.yaml").read_text())
    document["spec"]["storage"] = {"secretRef": {"name": "s3-credentials"}}
    document["spec"]["priorityClassName"] = "system-node-critical"
    path.write_text(yaml.safe_dump(document))

    refused = kuberl("render", path)

    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"{path}: spec.storage.secretRef.name: the Secret s3-credentials is not one jobs may "
        "reference; ask the cluster's administrator to add it to the operator's allowed_secrets "
        "setting (KUBERL_ALLOWED_SECRETS), now empty",
        f"{path}: spec.priorityClassName: the PriorityClass system-node-critical is not one jobs "
        "may use; remove it, or ask the cluster's administrator to add it to the operator's "
        "allowed_priority_classes setting (KUBERL_ALLOWED_PRIORITY_CLASSES), now empty",
    ]
    allowed = kuberl(
        "render",
        path,
        KUBERL_ALLOWED_SECRETS="s3-*",
        KUBERL_ALLOWED_PRIORITY_CLASSES="system-node-critical",
    )
    assert allowed.returncode == 0, allowed.stderr
    [cluster] = [o for o in yaml.safe_load_all(allowed.stdout) if o["kind"] == "RayCluster"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
