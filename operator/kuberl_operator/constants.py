"""Names of the RLJob resource and the labels around it, defined once and imported everywhere."""

from __future__ import annotations

GROUP = "kuberl.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RLJob"
PLURAL = "rljobs"
SINGULAR = "rljob"
SHORT_NAMES = ("rlj",)
CATEGORIES = ("kuberl",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# Kueue admits a job whose metadata carries this label into the named LocalQueue.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# GKE's node label naming the GPU model; spec.learner.gpuType selects nodes by it.
GPU_TYPE_LABEL = "cloud.google.com/gke-accelerator"

# The Ray version the trainer image is built with (pinned in pyproject.toml).
DEFAULT_RAY_VERSION = "2.60.0"

# Job names become Ray cluster, Service and Pod names, which KubeRay requires to be DNS-1035 labels.
MAX_JOB_NAME_LENGTH = 63
