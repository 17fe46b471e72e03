"""The RLJob custom resource (kuberl.io/v1alpha1) as pydantic models: spec, status and metadata.

These models are the one source of truth for the resource: `crd.py` generates the CRD's
openAPIV3Schema from them, and `validation.py` turns a manifest into an `RLJob` with errors that
name the field.

- `formats`: the Kubernetes formats the fields take (quantities, counts or percentages, names,
  label keys and values, node selectors, tolerations), their patterns and PATTERN_HINTS.
- `learner`: spec.learner, the learner's resources and placement, and its disruption budget.
- `workers`: spec.rolloutWorkers, the rollout workers, their spot placement (Spot, SpotProvider)
  and their nodes.
- `restart`: spec.restartPolicy (RestartPolicy, PreemptionPolicy).
- `storage`: spec.storage, the claim or Secret for checkpoints, and the mount paths refused.
- `budget`: spec.budget, the most the job may cost.
- `pods`: spec.pods, the labels, annotations and ServiceAccount of every pod.
- `status`: status (Phase, Condition, ConditionType, Progress, Cost, RLJobStatus).
- `job`: RLJob, its metadata (ObjectMeta) and RLJobSpec (spec.trainer is kuberl_contract.config's
  TrainerConfig; suspension, deadlines, priority, and the checks across sections).
"""

from kuberl_operator.spec.budget import Budget
from kuberl_operator.spec.formats import (
    DNS_LABEL_PATTERN,
    IMAGE_PATTERN,
    JOB_NAME_PATTERN,
    LABEL_KEY_PATTERN,
    PATTERN_HINTS,
    IntOrPercent,
    LabelMap,
    NodeSelector,
    Quantity,
    Toleration,
)
from kuberl_operator.spec.job import ObjectMeta, RLJob, RLJobSpec
from kuberl_operator.spec.learner import DisruptionBudget, Learner
from kuberl_operator.spec.pods import Pods
from kuberl_operator.spec.restart import PreemptionPolicy, RestartPolicy
from kuberl_operator.spec.status import (
    Autoscaled,
    Condition,
    ConditionType,
    Cost,
    Phase,
    Progress,
    Reason,
    RLJobStatus,
)
from kuberl_operator.spec.storage import PersistentVolumeClaimRef, SecretRef, Storage
from kuberl_operator.spec.workers import Autoscaling, RolloutWorkers, Spot, SpotProvider

__all__ = [
    "DNS_LABEL_PATTERN",
    "IMAGE_PATTERN",
    "JOB_NAME_PATTERN",
    "LABEL_KEY_PATTERN",
    "PATTERN_HINTS",
    "Autoscaled",
    "Autoscaling",
    "Budget",
    "Condition",
    "ConditionType",
    "Cost",
    "DisruptionBudget",
    "IntOrPercent",
    "LabelMap",
    "Learner",
    "NodeSelector",
    "ObjectMeta",
    "PersistentVolumeClaimRef",
    "Phase",
    "Pods",
    "PreemptionPolicy",
    "Progress",
    "Quantity",
    "RLJob",
    "RLJobSpec",
    "RLJobStatus",
    "Reason",
    "RestartPolicy",
    "RolloutWorkers",
    "SecretRef",
    "Spot",
    "SpotProvider",
    "Storage",
    "Toleration",
]
