"""`spec.trainer.checkpoint`: where and how often the driver saves its state, and the object stores
it may save to."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kuberl_contract.config.base import Spec

# Where checkpoints may live besides a local path; gs:// and az:// need gcsfs and adlfs installed.
CHECKPOINT_SCHEMES = ("file", "s3", "gs", "az")

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (DNS subdomain, RFC 1123), as Secret names must be. Defined here, where
the trainer's config (a checkpoint's credentials Secret) needs it; the operator's formats take it
from here."""

JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""An RLJob's name: a DNS-1035 label, since it names the job's Ray cluster. Defined here, where
the trainer's config (warmStart.job) needs it; the operator's formats take it from here."""


class CheckpointConfig(Spec):
    """Where and how often the driver saves its state."""

    uri: str | None = None
    """Checkpoint location: a local path, a file:// URI, or an object store: s3://bucket/prefix
    (also S3-compatible servers such as MinIO, through the AWS_ENDPOINT_URL environment variable),
    gs://bucket/prefix or az://container/prefix. Credentials come from the environment (see
    credentialsSecret). Default: checkpoints/ in the run directory."""

    every_iterations: int = Field(10, ge=1)
    """Save every this many iterations (also at the end and on SIGTERM/SIGINT)."""

    keep: int = Field(3, ge=1)
    """Number of newest checkpoints kept; older ones are deleted."""

    replay_buffer: bool = False
    """Also save the replay buffer (DQN, APEX, SAC): exact resumption, at the cost of checkpoints
    as large as the buffer. Without it, a resumed run refills learning_starts transitions first."""

    export_policy: bool = True
    """When a stop condition ends the job, export its greedy policy as policy.onnx beside the
    checkpoints (as `kuberl export` writes it: observation in, action out, runs without kuberl),
    and name it in the final record and status.progress.exportedPolicy. An export that fails is
    logged and leaves the job's outcome as it is: the checkpoint holds the model either way."""

    grace_period_seconds: int = Field(20, ge=1)
    """Seconds the driver has from SIGTERM to checkpoint and exit. The iteration in progress
    does not hold the checkpoint up, however long it is: it is dropped at its next wait for
    samples (its samples discarded) and the last completed iteration is saved; only a learning
    step already running is finished first. A second signal within this time lets a checkpoint
    being written finish. Default 20: inside the 30 s preemption notice of GCP and Azure spot VMs
    (AWS gives 2 minutes). The operator gives the head pod, which runs the driver, this long plus
    a margin to stop (terminationGracePeriodSeconds)."""

    credentials_secret: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of a Secret in the job's namespace whose keys become environment variables of the
    driver: the object store's credentials, e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
    AWS_ENDPOINT_URL for s3://, AZURE_STORAGE_CONNECTION_STRING for az://. Unset: the driver's own
    environment (e.g. a workload identity, as gs:// usually uses). On a cluster the operator's
    allowed_secrets setting (KUBERL_ALLOWED_SECRETS) must allow the name."""

    @field_validator("uri")
    @classmethod
    def _known_location(cls, uri: str | None) -> str | None:
        if uri is None:
            return None
        if not uri.strip():
            raise ValueError("empty: give a path or URI, or leave uri out for the run directory")
        return known_location(uri)


class WarmStartConfig(Spec):
    """A trained policy whose weights start a new run: a checkpoint, or another job's."""

    checkpoint: str | None = Field(None, min_length=1, max_length=4096)
    """A run directory, a checkpoint location, or one checkpoint's folder: a local path (a PVC
    on a cluster), a file:// URI or an object store's URI as checkpoint.uri takes them, read with
    checkpoint.credentialsSecret's credentials. Its newest intact checkpoint's weights (target
    networks included), Adam's moments and observation statistics start the job, which keeps its
    own hyperparameters; counters start at 0, for the stop conditions and schedules. Used for a
    job's first run only: once the job has checkpoints of its own, it resumes from them.
    `kuberl train FILE` reads a relative path from the directory it runs in; a job submitted to
    the kuberl API or a cluster needs an absolute path the server can read, or a URI (or job).
    `kuberl validate` checks that the networks fit when the checkpoint is on a local path."""

    job: str | None = Field(None, min_length=1, max_length=63, pattern=JOB_NAME_PATTERN)
    """Another job of the same namespace, submitted to the same kuberl API or cluster, whose
    newest checkpoint starts this one (as checkpoint does). It must exist and have saved a
    checkpoint when this job is submitted. On a cluster its checkpoints must outlive its pods:
    in an object store (its trainer.checkpoint.uri), or on its storage claim, which this job's
    head mounts read-only. `kuberl train FILE` has no jobs to look in: give it checkpoint."""

    @field_validator("checkpoint")
    @classmethod
    def _known_location(cls, checkpoint: str | None) -> str | None:
        return None if checkpoint is None else known_location(checkpoint)

    @model_validator(mode="after")
    def _one_source(self) -> WarmStartConfig:
        if (self.checkpoint is None) == (self.job is None):
            raise ValueError(
                "set one of checkpoint (a run directory, checkpoint location or URI) or job "
                "(another job of the namespace, whose newest checkpoint starts this one)"
            )
        return self


def known_location(uri: str) -> str:
    """`uri` when it is a local path or an object store kuberl can reach; else a ValueError."""
    if "://" not in uri:
        return uri
    scheme, rest = uri.split("://", 1)
    if scheme not in CHECKPOINT_SCHEMES:
        raise ValueError(
            f"{scheme}:// is not a checkpoint store: use a local path or one of "
            + ", ".join(f"{s}://" for s in CHECKPOINT_SCHEMES)
        )
    if scheme != "file" and not rest.split("/", 1)[0]:
        raise ValueError(f"{uri!r} names no bucket: write {scheme}://BUCKET/PREFIX")
    return uri
