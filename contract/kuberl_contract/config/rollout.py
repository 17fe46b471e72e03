"""RolloutConfig: how many rollout workers sample, how many envs each one steps, and the CPUs and
custom Ray resources each one takes (the operator's `spec.rolloutWorkers` builds on it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from kuberl_contract.capacity import RAY_OWN_RESOURCES
from kuberl_contract.config.base import Spec
from kuberl_contract.hyperparameters.known_as import KnownAs


class RolloutConfig(Spec):
    """How many rollout workers sample and how many envs each one steps."""

    replicas: Annotated[
        int,
        KnownAs(
            "remote rollout workers; 0 samples in the driver",
            rllib=("num_env_runners", "num_workers"),
        ),
    ] = Field(0, ge=0, le=10_000)
    """Remote rollout workers (Ray actors). 0 samples in the driver and never starts Ray. With
    minReplicas and maxReplicas both set, the fleet is elastic and this is its desired size:
    `kubectl scale rljob/NAME --replicas=N` (or an autoscaler, or an edit) within them resizes
    the running job's rollout pods without a new attempt."""

    min_replicas: int | None = Field(None, ge=0, le=10_000)
    """The fewest rollout workers an elastic fleet may be scaled down to while the job runs (at
    least 1). Default: replicas."""

    max_replicas: int | None = Field(None, ge=0, le=10_000)
    """The most rollout workers an elastic fleet may be scaled up to while the job runs; its Ray
    cluster is sized to hold them. Default: replicas."""

    envs_per_worker: Annotated[
        int,
        KnownAs(
            "envs each rollout worker, or the driver, steps together",
            rllib=("num_envs_per_env_runner", "num_envs_per_worker"),
            rl_zoo="n_envs",
        ),
    ] = Field(8, ge=1, le=4096)
    """Envs stepped together by each worker, with one batched forward pass per step. An env id
    with a gymnasium vector entry point (CartPole) is stepped natively vectorized, all copies in
    one numpy computation, so that many envs cost little more per step than a few; other envs
    are stepped one by one."""

    cpus_per_worker: float = Field(1.0, gt=0)
    """CPUs reserved for each remote rollout worker."""

    ray_resources: dict[str, Annotated[float, Field(ge=0.0001)]] = Field(default_factory=dict)
    """Custom Ray resources each remote rollout worker requires, by name: {spot: 1} places the
    workers only on Ray nodes that advertise spot (an RLJob's spot worker pods do, one unit per
    pod, each pod being sized for one worker; its on-demand fallback pods do not). Ray counts
    amounts in steps of 0.0001."""

    @property
    def fewest(self) -> int:
        """minReplicas, or replicas when it is not set."""
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def most(self) -> int:
        """maxReplicas, or replicas when it is not set."""
        return self.replicas if self.max_replicas is None else self.max_replicas

    @model_validator(mode="after")
    def _replicas_within_bounds(self) -> RolloutConfig:
        if self.replicas == 0 and self.most > 0:
            raise ValueError(
                "maxReplicas: replicas is 0, so the driver samples itself and starts no rollout "
                "workers to scale; set replicas >= 1, or remove maxReplicas"
            )
        if self.fewest > self.replicas:
            raise ValueError(
                f"minReplicas: {self.fewest} is more than replicas ({self.replicas}); scale "
                "within [minReplicas, maxReplicas], or lower minReplicas"
            )
        if self.most < self.replicas:
            raise ValueError(
                f"maxReplicas: {self.most} is less than replicas ({self.replicas}); scale within "
                "[minReplicas, maxReplicas], or raise maxReplicas"
            )
        if self.replicas > 0 and self.fewest == 0:
            raise ValueError(
                "minReplicas: 0 would let training start with no rollout worker; set at least 1"
            )
        return self

    @model_validator(mode="after")
    def _custom_ray_resources(self) -> RolloutConfig:
        for name in self.ray_resources:
            if name in RAY_OWN_RESOURCES:
                raise ValueError(
                    f"rayResources: {name!r} is one of Ray's own resources, not a custom one "
                    "(the workers' CPUs are set by cpusPerWorker)"
                )
            # Letters, digits, '_' and '-': names that pass unquoted through `ray start` flags.
            plain = name.replace("_", "").replace("-", "")
            if not (name[:1].isalpha() and name.isascii() and plain.isalnum()):
                raise ValueError(
                    f"rayResources: {name!r} is not a resource name: use letters, digits, '_' "
                    "and '-', starting with a letter"
                )
        return self
