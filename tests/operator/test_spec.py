"""The RLJob models and the problems validation reports: paths in manifest terms, fixes in words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberl_contract.config import ALGORITHMS, TRAINER_CONFIGS, RolloutConfig
from kuberl_operator.constants import DEFAULT_RAY_VERSION, KUEUE_QUEUE_LABEL
from kuberl_operator.spec import Phase, PreemptionPolicy, RLJob, RLJobStatus, SpotProvider
from kuberl_operator.validation import (
    InvalidManifest,
    Problem,
    format_path,
    load_rljob,
    parse_rljob_text,
    validate_rljob,
)
from testkit import edited, rljob

MINIMAL: dict[str, Any] = rljob("cartpole", minimal=True)


def manifest(**changes: Any) -> dict[str, Any]:
    """MINIMAL with changes given as dotted paths, e.g. `**{"spec.trainer.seed": 1}`."""
    return edited(MINIMAL, **changes)


def problems_of(document: Any) -> list[str]:
    with pytest.raises(InvalidManifest) as caught:
        validate_rljob(document)
    return [str(problem) for problem in caught.value.problems]


def test_minimal_manifest_gets_the_documented_defaults():
    job = validate_rljob(manifest())

    assert isinstance(job.spec.trainer, TRAINER_CONFIGS["PPO"])
    assert job.spec.trainer.hyperparameters.learning_rate == pytest.approx(3e-4)
    assert job.spec.ray_version == DEFAULT_RAY_VERSION
    assert job.spec.image is None
    assert (job.spec.learner.gpus, job.spec.learner.cpu, job.spec.learner.memory) == (0, "2", "4Gi")
    assert isinstance(job.spec.rollout_workers, RolloutConfig)  # the trainer reads it as is
    assert job.spec.rollout_workers.replicas == 0
    assert job.spec.rollout_workers.spot.enabled is False
    assert job.spec.restart_policy.max_restarts == 3
    assert job.spec.restart_policy.on_preemption is PreemptionPolicy.RESUME
    assert job.spec.suspend is False
    assert job.status == RLJobStatus()
    assert job.status.phase is None
    assert job.status.progress.iteration == 0


def test_metadata_keeps_what_the_api_server_adds_and_exposes_the_kueue_queue():
    job = validate_rljob(
        manifest(
            **{
                "metadata.uid": "0c6f7a4e",
                "metadata.creationTimestamp": "2025-01-31T12:00:00Z",
                "metadata.labels": {KUEUE_QUEUE_LABEL: "gpu-training"},
            }
        )
    )

    assert job.name == "cartpole"
    assert job.metadata.model_extra == {
        "uid": "0c6f7a4e",
        "creationTimestamp": "2025-01-31T12:00:00Z",
    }
    assert job.queue_name == "gpu-training"


def test_status_written_by_the_operator_reads_back():
    status = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "RayClusterReady",
                "message": "",
                "lastTransitionTime": "2025-01-31T12:00:00Z",
            }
        ],
        "progress": {"iteration": 3, "timesteps": 768, "episodeReturnMean": 21.5},
        "restarts": 1,
        "rayCluster": "cartpole",
    }
    job = validate_rljob(manifest(status=status))

    assert job.status.phase is Phase.RUNNING
    assert job.status.conditions[0].last_transition_time.year == 2025
    assert job.status.progress.episode_return_mean == 21.5


def test_quantities_accept_integers_and_suffixed_strings():
    job = validate_rljob(manifest(**{"spec.learner": {"cpu": 4, "memory": "512Mi"}}))

    assert (job.spec.learner.cpu, job.spec.learner.memory) == ("4", "512Mi")


def test_spot_workers_on_a_known_provider():
    job = validate_rljob(
        manifest(
            **{"spec.rolloutWorkers": {"replicas": 2, "spot": {"enabled": True, "provider": "eks"}}}
        )
    )

    assert job.spec.rollout_workers.spot.provider is SpotProvider.EKS


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"spec.trainer.hyperparameters": {"lerning_rate": 0.001}},
            "spec.trainer.hyperparameters.lerning_rate: unknown field; did you mean "
            "'learning_rate'?",
        ),
        (
            {"spec.trainer.hyperparameters": {"learningRate": 0.001}},
            "spec.trainer.hyperparameters.learningRate: unknown field; did you mean "
            "'learning_rate'? (these fields are snake_case)",
        ),
        (
            {"spec.trainer.env_config": {}},
            "spec.trainer.env_config: unknown field; did you mean 'envConfig'? (these fields are "
            "camelCase)",
        ),
        (
            {"spec.trainer.algorithm": "PP0"},
            "spec.trainer.algorithm: 'PP0' is not one of PG, A2C, A3C, PPO, APPO, IMPALA, DQN, "
            "APEX, SAC, ES, PBT; did you mean 'PPO'?",
        ),
        (
            {"spec.trainer.optimizer": "SyncReplay"},
            (
                "spec.trainer.optimizer: SyncReplay cannot drive PPO: it learns on transitions "
                "replayed from a buffer, but PPO takes several epochs of minibatch SGD on fresh "
                "samples of its current policy; compatible: SyncSamples, AsyncSamples, "
                "LocalMultiGPU"
            ),
        ),
        (
            {
                "spec.trainer.stop": {"iterations": 10},
                "spec.trainer.hyperparameters": {"schedule": "linear"},
            },
            "spec.trainer.hyperparameters.schedule: linear decays to zero at stop.timesteps, so "
            "stop.timesteps must be set",
        ),
        (
            {"spec.trainer.hyperparameters": {"learning_rate": -0.1}},
            "spec.trainer.hyperparameters.learning_rate: must be > 0.0, got -0.1",
        ),
        (
            {"spec.trainer.hyperparameters": {"hidden_sizes": [64, 0]}},
            "spec.trainer.hyperparameters.hidden_sizes[1]: must be >= 1, got 0",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": -1}},
            "spec.rolloutWorkers.replicas: must be >= 0, got -1",
        ),
        (
            {"spec.learner": {"memory": "8GB"}},
            "spec.learner.memory: '8GB' is not a Kubernetes quantity: write a number with an "
            "optional suffix, such as 500m, 2, 512Mi or 8Gi",
        ),
        (
            {"spec.learner": {"cpu": 0.5}},
            "spec.learner.cpu: write 0.5 as a quoted string such as '0.5' or '500m': Kubernetes "
            "accepts quantities as integers or strings only",
        ),
        (
            {"spec.learner": {"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]}},
            "spec.learner.tolerations[0].effect: 'NoSchedul' is not one of NoSchedule, "
            "PreferNoSchedule, NoExecute; did you mean 'NoSchedule'?",
        ),
        (
            {"spec.learner": {"tolerations": [{"operator": "Exists", "value": "x"}]}},
            "spec.learner.tolerations[0].value: must be empty when operator is Exists",
        ),
        (
            {"spec.learner": {"tolerations": {"key": "gpu"}}},
            "spec.learner.tolerations: must be a list (lines starting with '- '), got a mapping",
        ),
        (
            {"spec.learner": {"nodeSelector": {"cloud.google.com/gke-spot": True}}},
            "spec.learner.nodeSelector['cloud.google.com/gke-spot']: must be a string, got a "
            "boolean (true); quote it: 'true'",
        ),
        (
            {"spec.learner": {"gpuType": "nvidia-l4"}},
            "spec.learner.gpuType: nvidia-l4 asks for a GPU node but gpus is 0; set gpus >= 1 or "
            "remove gpuType",
        ),
        (
            {"spec.learner": {"device": "gpu"}},
            "spec.learner.device: gpu keeps the learner on a GPU but gpus is 0; set gpus >= 1 or "
            "remove device",
        ),
        (
            {"spec.learner": {"gpus": 1, "device": "cuda"}},
            "spec.learner.device: 'cuda' is not one of auto, gpu",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 2, "spot": {"enabled": True}}},
            "spec.rolloutWorkers.spot.provider: required when spot is enabled; one of gke, eks, "
            "karpenter, aks, custom",
        ),
        (
            {"spec.rolloutWorkers": {"spot": {"enabled": True, "provider": "gke"}}},
            "spec.rolloutWorkers.spot.enabled: replicas is 0, so there are no remote rollout "
            "workers to put on spot nodes; set replicas >= 1 or disable spot",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 1, "spot": {"maxUnavailable": "half"}}},
            "spec.rolloutWorkers.spot.maxUnavailable: 'half' is neither a count nor a percentage: "
            "write 1 or '25%'",
        ),
        (
            {"spec.restartPolicy": {"onPreemption": "resume"}},
            "spec.restartPolicy.onPreemption: 'resume' is not one of Resume, CountAsRestart, Fail; "
            "did you mean 'Resume'?",
        ),
        (
            {"spec.priorityClassName": "High"},
            "spec.priorityClassName: 'High' is not a DNS subdomain: lowercase letters, digits, '-' "
            "and '.', starting and ending with a letter or digit",
        ),
        (
            {"spec.trainer.stop": {}},
            "spec.trainer.stop: no stop condition set: give at least one of timesteps, iterations, "
            "episodeReturnMean, evaluationReturnMean, wallTimeSeconds",
        ),
    ],
    ids=lambda value: None if isinstance(value, dict) else value.split(":")[0],
)
def test_problems_name_the_field_and_the_fix(changes, expected):
    assert problems_of(manifest(**changes)) == [expected]


def test_missing_fields_are_reported_with_their_meaning():
    document = manifest()
    del document["spec"]["trainer"]["stop"]

    assert problems_of(document) == [
        "spec.trainer.stop: missing required field (When training ends)"
    ]


def test_missing_algorithm_lists_the_choices():
    document = manifest()
    del document["spec"]["trainer"]["algorithm"]

    assert problems_of(document) == [
        "spec.trainer.algorithm: missing: set it to one of PG, A2C, A3C, PPO, APPO, IMPALA, "
        "DQN, APEX, SAC, ES, PBT"
    ]


def test_every_problem_is_reported_at_once():
    problems = problems_of(
        manifest(
            **{
                "spec.trainer.hyperparameters": {"gamma": 2, "num_epoch": 3},
                "spec.learner": {"gpus": -1},
            }
        )
    )

    assert [problem.split(":")[0] for problem in problems] == [
        "spec.trainer.hyperparameters.gamma",
        "spec.trainer.hyperparameters.num_epoch",
        "spec.learner.gpus",
    ]


@pytest.mark.parametrize("name", ["My_Job", "-job", "job-", "1job", "job.with.dots", "j" * 64])
def test_bad_names_are_rejected(name):
    (problem,) = problems_of(manifest(**{"metadata.name": name}))

    assert problem.startswith(f"metadata.name: {name!r} is not a valid job name")


def test_bad_label_keys_are_rejected():
    (problem,) = problems_of(manifest(**{"metadata.labels": {"bad key": "x"}}))

    assert problem.startswith("metadata.labels: 'bad key' is not a valid label key")


def test_a_document_that_is_not_a_mapping():
    assert problems_of(["a", "list"]) == [
        "the document is a list, not a mapping: an RLJob manifest starts with apiVersion: "
        "kuberl.io/v1alpha1 and kind: RLJob"
    ]


def test_another_kind_is_reported_alone():
    document = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}

    assert problems_of(document) == [
        "kind: this is a ConfigMap, not an RLJob: kuberl reads manifests with kind: RLJob and "
        "apiVersion: kuberl.io/v1alpha1"
    ]


def test_wrong_api_version():
    assert problems_of(manifest(apiVersion="kuberl.io/v1")) == [
        "apiVersion: 'kuberl.io/v1' is not served; use kuberl.io/v1alpha1"
    ]


def test_problems_are_path_and_message_pairs():
    with pytest.raises(InvalidManifest) as caught:
        validate_rljob(manifest(**{"spec.trainer.seed": -1}))

    assert caught.value.problems == [Problem("spec.trainer.seed", "must be >= 0, got -1")]
    path, message = caught.value.problems[0]
    assert (path, message) == ("spec.trainer.seed", "must be >= 0, got -1")
    assert str(caught.value) == "spec.trainer.seed: must be >= 0, got -1"


def test_format_path():
    assert format_path(["spec", "learner", "tolerations", 0, "effect"]) == (
        "spec.learner.tolerations[0].effect"
    )
    assert format_path(["metadata", "labels", "kueue.x-k8s.io/queue-name"]) == (
        "metadata.labels['kueue.x-k8s.io/queue-name']"
    )


# --- YAML text and files ------------------------------------------------------------------------


def test_parse_yaml_text():
    job = parse_rljob_text(yaml.safe_dump(MINIMAL))

    assert job == validate_rljob(MINIMAL)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spec: [unclosed\n", "line 2, column 1: not valid YAML"),
        ("", "empty: expected one RLJob manifest"),
        ("# only a comment\n", "empty: expected one RLJob manifest"),
        ("a: 1\n---\nb: 2\n", "2 YAML documents: put exactly one RLJob in the file"),
    ],
)
def test_text_that_is_not_one_yaml_document(text, expected):
    with pytest.raises(InvalidManifest) as caught:
        parse_rljob_text(text)

    (problem,) = caught.value.problems
    assert problem.path == ""
    assert problem.message.startswith(expected)


def test_load_rljob_reads_files(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))

    assert load_rljob(path).name == "cartpole"
    with pytest.raises(InvalidManifest, match="no such file"):
        load_rljob(tmp_path / "missing.yaml")


def test_the_model_round_trips_through_its_manifest_form():
    job = validate_rljob(manifest(**{"spec.trainer.hyperparameters": {"max_grad_norm": None}}))
    dumped = job.model_dump(mode="json", by_alias=True)

    assert validate_rljob(dumped) == job
    assert dumped["spec"]["trainer"]["hyperparameters"]["max_grad_norm"] is None
    assert isinstance(job, RLJob)


def test_validation_runs_without_the_training_stack():
    """The operator's image has neither gymnasium, ray nor torch."""
    code = (
        "import sys, kuberl_operator.validation, kuberl_operator.crd; "
        "print(sorted({'gymnasium', 'ray', 'torch'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    assert result.stdout.strip() == "[]", result.stderr


# --- Algorithms and optimizers, optimizerConfig, placement ---------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "optimizer"),
    [(name, optimizer.value) for name, row in ALGORITHMS.items() for optimizer in row.optimizers],
)
def test_every_algorithm_validates_with_each_of_its_optimizers(algorithm, optimizer):
    job = validate_rljob(
        manifest(
            **{
                "spec.trainer.algorithm": algorithm,
                "spec.trainer.optimizer": optimizer,
                "spec.rolloutWorkers.replicas": 2,  # AsyncReplay's shards need remote workers
                "spec.learner.gpus": 2,  # LocalMultiGPU's towers
            }
        )
    )

    assert (job.spec.trainer.algorithm, job.spec.trainer.optimizer_name) == (algorithm, optimizer)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"spec.trainer.algorithm": "APEX", "spec.trainer.optimizer": "AsyncSamples"},
            "spec.trainer.optimizer: AsyncSamples cannot drive APEX: it learns on batches of "
            "slightly older policies, but APEX learns Q-values from replayed transitions; "
            "compatible: AsyncReplay, SyncReplay",
        ),
        (
            {"spec.trainer.algorithm": "IMPALA", "spec.trainer.optimizer": "AsyncGradients"},
            "spec.trainer.optimizer: AsyncGradients cannot drive IMPALA: it applies one gradient "
            "per worker batch, computed on the worker, but IMPALA learns on samples whose policy "
            "lag V-trace corrects; compatible: AsyncSamples, SyncSamples",
        ),
        (
            {"spec.trainer.algorithm": "A3C", "spec.trainer.optimizer": "AsyncReplay"},
            "spec.trainer.optimizer: AsyncReplay cannot drive A3C",
        ),
        (
            {"spec.trainer.optimizerConfig": {"replayShards": 4}},
            "spec.trainer.optimizerConfig.replayShards: used by AsyncReplay only, and this job "
            "runs SyncSamples",
        ),
        (
            {
                "spec.trainer.algorithm": "IMPALA",
                "spec.trainer.optimizerConfig": {"sampleTimeoutSeconds": 5},
            },
            "spec.trainer.optimizerConfig.sampleTimeoutSeconds: used by LocalMultiGPU, SyncReplay, "
            "SyncSamples only, and this job runs AsyncSamples",
        ),
        (
            {"spec.trainer.algorithm": "A3C", "spec.trainer.optimizerConfig": {"maxPolicyLag": 8}},
            "spec.trainer.optimizerConfig.maxPolicyLag: used by AsyncSamples only, and this job "
            "runs AsyncGradients",
        ),
        (
            {
                "spec.trainer.algorithm": "IMPALA",
                "spec.trainer.optimizerConfig": {"maxPolicyLag": 0},
            },
            "spec.trainer.optimizerConfig.maxPolicyLag: must be >= 1, got 0",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 2, "rayResources": {"CPU": 1}}},
            "spec.rolloutWorkers.rayResources: 'CPU' is one of Ray's own resources, not a custom "
            "one (the workers' CPUs are set by cpusPerWorker)",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 2, "rayResources": {"spot": 0}}},
            "spec.rolloutWorkers.rayResources.spot: must be >= 0.0001, got 0",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 2, "rayResources": {"spot node": 1}}},
            "spec.rolloutWorkers.rayResources: 'spot node' is not a resource name",
        ),
        (
            {"spec.trainer.algorithm": "APEX", "spec.trainer.hyperparameters": {}},
            "spec.rolloutWorkers.replicas: AsyncReplay feeds its replay shards from remote "
            "rollout workers, and replicas is 0",
        ),
        (
            {"spec.rolloutWorkers": {"replicas": 2, "rayResources": {"spot": 1}}},
            "spec.rolloutWorkers.rayResources.spot: only the pods of the spot worker group "
            "advertise spot, and spot is not enabled",
        ),
        (
            {"spec.trainer.algorithm": "A2C", "spec.trainer.optimizer": "LocalMultiGPU"},
            "spec.trainer.optimizer: LocalMultiGPU cannot drive A2C: it splits every SGD "
            "minibatch of a fresh batch across the learner's devices, but A2C learns on fresh "
            "samples of its current policy; compatible: SyncSamples, AsyncGradients",
        ),
        (
            {"spec.trainer.optimizer": "LocalMultiGPU", "spec.learner.gpus": 1},
            "spec.learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's "
            "GPUs and needs 2 or more",
        ),
        (
            {
                "spec.trainer.optimizer": "LocalMultiGPU",
                "spec.trainer.hyperparameters": {"minibatch_size": 4},
                "spec.learner.gpus": 8,
            },
            "spec.learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's 8 "
            "GPUs, and a minibatch may hold only 4 samples",
        ),
        (
            {
                "spec.trainer.optimizer": "LocalMultiGPU",
                "spec.trainer.hyperparameters": {"rollout_length": 1},
                "spec.rolloutWorkers.envsPerWorker": 2,
                "spec.learner.gpus": 4,
            },
            "spec.learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's 4 "
            "GPUs, and a minibatch may hold only 2 samples",
        ),
    ],
    ids=[
        "apex-on-async-samples",
        "impala-on-async-gradients",
        "a3c-on-async-replay",
        "replay-shards-without-async-replay",
        "sample-timeout-on-async-samples",
        "max-policy-lag-on-async-gradients",
        "max-policy-lag-below-one",
        "ray-resources-cpu",
        "ray-resources-zero",
        "ray-resources-name",
        "apex-without-workers",
        "spot-resource-without-spot",
        "a2c-on-local-multi-gpu",
        "local-multi-gpu-on-one-gpu",
        "local-multi-gpu-minibatch-below-gpus",
        "local-multi-gpu-batch-below-gpus",
    ],
)
def test_pairings_settings_and_resources_name_the_field(changes, expected):
    [problem] = problems_of(manifest(**changes))

    assert problem.startswith(expected)


def test_ray_resources_reach_the_trainer():
    job = validate_rljob(
        manifest(
            **{
                "spec.rolloutWorkers": {
                    "replicas": 2,
                    "rayResources": {"spot": 1},
                    "spot": {"enabled": True, "provider": "gke"},
                }
            }
        )
    )

    assert job.spec.rollout_workers.ray_resources == {"spot": 1.0}


# --- What no job may have, whatever the operator's settings --------------------------------------

PVC = {"persistentVolumeClaim": {"claimName": "checkpoints"}}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"spec.learner": {"tolerations": [{"operator": "Exists"}]}},
            "spec.learner.tolerations[0].key: a toleration without a key tolerates every taint",
        ),
        (
            {
                "spec.rolloutWorkers": {
                    "replicas": 1,
                    "tolerations": [
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                    ],
                }
            },
            "spec.rolloutWorkers.tolerations[0].key: node-role.kubernetes.io/control-plane is the "
            "taint of control-plane nodes",
        ),
        (
            {"spec.learner": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}},
            "spec.learner.nodeSelector: 'node-role.kubernetes.io/control-plane' selects "
            "control-plane nodes",
        ),
        (
            {"spec.rolloutWorkers": {"nodeSelector": {"node-role.kubernetes.io/master": "true"}}},
            "spec.rolloutWorkers.nodeSelector: 'node-role.kubernetes.io/master' selects "
            "control-plane nodes",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/.."}},
            "spec.storage.mountPath: '/..' has '.' or '..' segments",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/data/../etc"}},
            "spec.storage.mountPath: '/data/../etc' has '.' or '..' segments",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/"}},
            "spec.storage.mountPath: '/' is not an absolute directory path other than /",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/data//rl"}},
            "spec.storage.mountPath: '/data//rl' is not an absolute directory path",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/usr/local/bin"}},
            "spec.storage.mountPath: /usr/local/bin is under /usr, which holds the image's own",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/var/"}},
            "spec.storage.mountPath: /var/ holds the image's own files",
        ),
        (
            {"spec.storage": {**PVC, "mountPath": "/tmp/ray"}},
            "spec.storage.mountPath: /tmp/ray holds Ray's session directory",
        ),
        (
            {"spec.pods": {"labels": {"kuberl.io/job": "someone-else"}}},
            "spec.pods.labels: 'kuberl.io/job' is a label the operator or KubeRay sets",
        ),
        (
            {"spec.pods": {"labels": {"ray.io/cluster": "other"}}},
            "spec.pods.labels: 'ray.io/cluster' is a label the operator or KubeRay sets",
        ),
        (
            {"spec.pods": {"labels": {"app.kubernetes.io/managed-by": "helm"}}},
            "spec.pods.labels: 'app.kubernetes.io/managed-by' is a label the operator or KubeRay",
        ),
        (
            {"spec.pods": {"labels": {KUEUE_QUEUE_LABEL: "gpu"}}},
            f"spec.pods.labels: '{KUEUE_QUEUE_LABEL}' queues the job in Kueue only as a label of "
            "the RLJob itself: move it to metadata.labels",
        ),
        (
            {"spec.pods": {"annotations": {"ray.io/overwrite-container-cmd": "true"}}},
            "spec.pods.annotations: 'ray.io/overwrite-container-cmd' is reserved",
        ),
        (
            {
                "spec.pods": {
                    "annotations": {
                        "container.apparmor.security.beta.kubernetes.io/ray-head": "unconfined"
                    }
                }
            },
            "spec.pods.annotations: 'container.apparmor.security.beta.kubernetes.io/ray-head' is "
            "reserved",
        ),
    ],
    ids=lambda value: None if isinstance(value, dict) else value.split(": ")[1][:40],
)
def test_what_no_job_may_reach_is_refused_naming_the_field(changes, expected):
    [problem] = problems_of(manifest(**changes))

    assert problem.startswith(expected), problem


def test_a_refused_mount_path_suggests_the_default():
    [problem] = problems_of(manifest(**{"spec.storage": {**PVC, "mountPath": "/etc/ssl"}}))

    assert problem.endswith("such as /kuberl/checkpoints (the default)")


@pytest.mark.parametrize(
    "mount_path", ["/kuberl/checkpoints", "/data/rl/", "/var/lib/kuberl", "/tmp/checkpoints"]
)
def test_mount_paths_of_their_own_are_fine(mount_path):
    job = validate_rljob(manifest(**{"spec.storage": {**PVC, "mountPath": mount_path}}))

    assert job.spec.storage.mount_path == mount_path


def test_keyed_tolerations_and_worker_selectors_are_fine():
    job = validate_rljob(
        manifest(
            **{
                "spec.learner": {
                    "nodeSelector": {"node-role.kubernetes.io/gpu": ""},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                },
                "spec.pods": {
                    "labels": {"team": "rl"},
                    "annotations": {"sidecar.istio.io/inject": "false"},
                    "serviceAccountName": "rl-trainer",
                },
            }
        )
    )

    assert job.spec.learner.tolerations[0].key == "nvidia.com/gpu"
    assert job.spec.pods.service_account_name == "rl-trainer"
