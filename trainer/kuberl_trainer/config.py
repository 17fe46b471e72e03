"""The trainer's typed configuration: algorithm, env, optimizer, stop, checkpoints, and the
table of algorithms (`ALGORITHMS`).

This module is the single source of truth for what `spec.trainer` of an RLJob may hold. It imports
neither ray, torch nor gymnasium, so the operator and the API can validate a job without the
training stack (an import-linter contract holds this).

Manifest fields are camelCase as in every Kubernetes resource; hyperparameters keep the snake_case
names RL practitioners know from RLlib, Stable-Baselines3 and CleanRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kuberl_trainer.hyperparameters import (
    A2CHyperparameters,
    A3CHyperparameters,
    APEXHyperparameters,
    APPOHyperparameters,
    DQNHyperparameters,
    ESHyperparameters,
    Hyperparameters,
    IMPALAHyperparameters,
    PBTHyperparameters,
    PGHyperparameters,
    PPOHyperparameters,
    SACHyperparameters,
)


class Spec(BaseModel):
    """Base of manifest models: camelCase keys, unknown keys rejected, docstrings documenting."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        frozen=True,
        # inf and nan are no JSON numbers: Kubernetes could not store them (nor "1e999" from YAML).
        allow_inf_nan=False,
    )


class OptimizerName(StrEnum):
    """The policy optimizers of the RLlib paper that kuberl implements."""

    SYNC_SAMPLES = "SyncSamples"
    SYNC_REPLAY = "SyncReplay"
    ASYNC_GRADIENTS = "AsyncGradients"
    ASYNC_REPLAY = "AsyncReplay"
    ASYNC_SAMPLES = "AsyncSamples"
    LOCAL_MULTI_GPU = "LocalMultiGPU"
    PERTURBATIONS = "Perturbations"


SYNC_SAMPLES, SYNC_REPLAY = OptimizerName.SYNC_SAMPLES, OptimizerName.SYNC_REPLAY
ASYNC_SAMPLES, ASYNC_REPLAY = OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY
ASYNC_GRADIENTS, LOCAL_MULTI_GPU = OptimizerName.ASYNC_GRADIENTS, OptimizerName.LOCAL_MULTI_GPU
PERTURBATIONS = OptimizerName.PERTURBATIONS

# What each optimizer hands the policy, for the message that rejects a pair that cannot work.
OPTIMIZER_FEEDS: dict[OptimizerName, str] = {
    OptimizerName.SYNC_SAMPLES: "learns on a fresh batch from every worker",
    OptimizerName.ASYNC_SAMPLES: "learns on batches of slightly older policies",
    OptimizerName.ASYNC_GRADIENTS: "applies one gradient per worker batch, computed on the worker",
    OptimizerName.SYNC_REPLAY: "learns on transitions replayed from a buffer",
    OptimizerName.ASYNC_REPLAY: "learns on transitions replayed from sharded buffers",
    OptimizerName.LOCAL_MULTI_GPU: (
        "splits every SGD minibatch of a fresh batch across the learner's devices"
    ),
    OptimizerName.PERTURBATIONS: "steps the parameters by the returns of perturbed copies of them",
}

# Said by the RLJob's validation and, for a driver started without one, by the optimizer.
LEARNER_GPUS_NEEDED = (
    "learner.gpus: LocalMultiGPU splits every SGD minibatch across the learner's GPUs and needs 2 "
    "or more (where no CUDA device is visible, each one becomes a CPU tower); set gpus to 2 or "
    "more, or use SyncSamples"
)


class StopConditions(Spec):
    """Training stops at the first condition met; at least one is required."""

    timesteps: int | None = Field(None, ge=1)
    """Stop after this many env steps sampled in total."""

    iterations: int | None = Field(None, ge=1)
    """Stop after this many training iterations."""

    episode_return_mean: float | None = None
    """Stop once the mean return of the recent training episodes reaches this value."""

    evaluation_return_mean: float | None = None
    """Stop once a greedy evaluation (see evaluation) reaches this mean return."""

    wall_time_seconds: float | None = Field(None, gt=0)
    """Stop after this much wall time spent training in this run."""

    @model_validator(mode="after")
    def _at_least_one(self) -> StopConditions:
        if all(value is None for value in self.model_dump().values()):
            raise ValueError(
                "no stop condition set: give at least one of timesteps, iterations, "
                "episodeReturnMean, evaluationReturnMean, wallTimeSeconds"
            )
        return self


# Where checkpoints may live besides a local path; gs:// and az:// need gcsfs and adlfs installed.
CHECKPOINT_SCHEMES = ("file", "s3", "gs", "az")

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name (DNS subdomain, RFC 1123), as Secret names must be. Defined here, where
the trainer's config (a checkpoint's credentials Secret) needs it; the operator's formats take it
from here."""


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


class EvaluationConfig(Spec):
    """Greedy evaluation episodes run by the driver on a separate env."""

    every_iterations: int = Field(0, ge=0)
    """Evaluate every this many iterations; 0 turns evaluation off."""

    episodes: int = Field(10, ge=1, le=1000)
    """Episodes per evaluation, averaged."""


class RolloutConfig(Spec):
    """How many rollout workers sample and how many envs each one steps."""

    replicas: int = Field(0, ge=0, le=10_000)
    """Remote rollout workers (Ray actors). 0 samples in the driver and never starts Ray."""

    envs_per_worker: int = Field(8, ge=1, le=4096)
    """Envs stepped together by each worker, with one batched forward pass per step. An env id
    with a gymnasium vector entry point (CartPole) is stepped natively vectorized, all copies in
    one numpy computation, where a thousand envs sample about 20 times as fast as 8; other envs are
    stepped one by one."""

    cpus_per_worker: float = Field(1.0, gt=0)
    """CPUs reserved for each remote rollout worker."""

    ray_resources: dict[str, Annotated[float, Field(ge=0.0001)]] = Field(default_factory=dict)
    """Custom Ray resources each remote rollout worker requires, by name: {spot: 1} places the
    workers only on Ray nodes that advertise spot (an RLJob's spot worker pods do, one unit per
    pod, each pod being sized for one worker; its on-demand fallback pods do not). Ray counts
    amounts in steps of 0.0001."""

    @model_validator(mode="after")
    def _custom_ray_resources(self) -> RolloutConfig:
        for name in self.ray_resources:
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
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


class OptimizerConfig(Spec):
    """Settings of the execution strategy. Each applies to the optimizers its description names;
    setting one the job's optimizer does not use is rejected."""

    sample_timeout_seconds: float | None = Field(None, gt=0)
    """SyncSamples, SyncReplay, LocalMultiGPU: seconds a step waits for its rollout workers before
    learning on the batches that arrived (at least one). The late workers' batches are dropped and
    counted as stragglers, and a straggler sits out the steps until it is free again. Null waits
    for every worker."""

    requests_in_flight_per_worker: int | None = Field(None, ge=1, le=16)
    """AsyncSamples, AsyncGradients, AsyncReplay, Perturbations: calls kept queued on each rollout
    worker, so a worker never idles while its last result travels (RLlib's
    max_requests_in_flight_per_env_runner, 2). Null takes the optimizer's own: 1 for AsyncSamples
    (each call in flight adds a learner step of lag per worker, and the lag is what bounds how
    many workers IMPALA can take; a CartPole call of 64 envs x 32 steps leaves a worker idle for
    a few milliseconds only), 2 for the others."""

    learner_queue_size: int | None = Field(None, ge=1, le=1024)
    """AsyncSamples, AsyncReplay: batches waiting for the learner thread at most. A full queue
    holds the driver back (backpressure) instead of growing memory (RLlib's learner_queue_size,
    16). Null takes the optimizer's own: 1 for AsyncSamples (every queued batch is one more step
    of lag for the batches behind it, and one waiting batch keeps the learner fed: 2 sampled no
    faster with 2 or 12 workers of 64 envs on CartPole, and learned slower), 16 for AsyncReplay
    (its batches are replayed minibatches, which do not age)."""

    broadcast_interval: int = Field(1, ge=1)
    """AsyncSamples, AsyncReplay: learner steps between fresh weights for a worker that returns a
    result; larger values save object-store traffic at the cost of policy lag (RLlib's IMPALA
    broadcast_interval 1; Ape-X's max_weight_sync_delay plays the same part)."""

    max_policy_lag: int | None = Field(32, ge=1)
    """AsyncSamples: the most learner steps a batch may lag when the learner takes it (steps
    between the weights it was sampled with and the learner's). An older batch is dropped, not
    learned on, and counted in stale_batches_dropped; in a train batch concatenated from several
    sample calls only the stale ones are cut out. With one call in flight per worker, a batch lags
    about workers / (sample calls per learner step) steps, plus the batches queued for the
    learner: 12 workers of 64 envs on CartPole lag 10-16 steps on average, and learn stably. What it
    costs: the dropped env steps, sampled for nothing; dropping is what keeps the lag bounded as
    workers are added beyond what the learner can take (at 64 workers with one sample call per
    learner step, about half the batches). Null never drops (RLlib's IMPALA)."""

    replay_shards: int = Field(2, ge=1, le=256)
    """AsyncReplay: replay-buffer actors, each holding buffer_size / replay_shards transitions and
    sampling its own prioritized minibatches (RLlib's num_replay_buffer_shards, 4)."""

    cpus_per_replay_shard: float = Field(0.0, ge=0.0)
    """AsyncReplay: CPUs reserved for each replay shard. 0 as in RLlib: shards mostly wait on the
    learner, and they are placed beside the driver, off the preemptible rollout nodes."""


# Which optimizers read each OptimizerConfig field.
OPTIMIZER_SETTINGS: dict[str, frozenset[OptimizerName]] = {
    "sample_timeout_seconds": frozenset({SYNC_SAMPLES, SYNC_REPLAY, LOCAL_MULTI_GPU}),
    "requests_in_flight_per_worker": frozenset(
        {ASYNC_SAMPLES, ASYNC_GRADIENTS, ASYNC_REPLAY, PERTURBATIONS}
    ),
    "learner_queue_size": frozenset({OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY}),
    "broadcast_interval": frozenset({OptimizerName.ASYNC_SAMPLES, OptimizerName.ASYNC_REPLAY}),
    "max_policy_lag": frozenset({OptimizerName.ASYNC_SAMPLES}),
    "replay_shards": frozenset({OptimizerName.ASYNC_REPLAY}),
    "cpus_per_replay_shard": frozenset({OptimizerName.ASYNC_REPLAY}),
}


class _TrainerBase(Spec):
    env: str = Field(min_length=1)
    """A gymnasium id such as CartPole-v1, or module:Class naming a gymnasium.Env subclass."""

    env_config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the env's constructor."""

    optimizer: OptimizerName | None = None
    """Override of the algorithm's default policy optimizer (the execution strategy)."""

    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """Settings of the optimizer that runs (queue sizes, calls in flight, timeouts, shards)."""

    stop: StopConditions
    """When training ends."""

    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoint location and cadence."""

    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """Greedy evaluation cadence."""

    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    """Seed for envs, networks and exploration, below 2^32 as numpy's seeds are; null picks one at
    random. Rollout worker i's envs start from seed + 10007 i; a worker started again (replacing a
    lost one, or in a resumed run) gets a seed of its own, so that it does not replay the episodes
    it played before."""

    metrics_window: int = Field(20, ge=1, le=10_000)
    """Number of most recent episodes averaged into episode_return_mean."""

    tensorboard: bool = False
    """Also write every progress row as TensorBoard scalars (event files in tensorboard/ of the
    run directory, step = timesteps_total)."""

    @model_validator(mode="after")
    def _check_pairings(self) -> _TrainerBase:
        row = ALGORITHMS[self.algorithm]
        if self.optimizer is not None and self.optimizer not in row.optimizers:
            names = ", ".join(o.value for o in row.optimizers)
            raise ValueError(
                f"optimizer: {self.optimizer.value} cannot drive {self.algorithm}: it "
                f"{OPTIMIZER_FEEDS[self.optimizer]}, but {self.algorithm} {row.learns}; "
                f"compatible: {names}"
            )
        # A setting the optimizer ignores is a mistake; left at its default, it is no setting.
        for name, field in OptimizerConfig.model_fields.items():
            users = OPTIMIZER_SETTINGS[name]
            if getattr(self.optimizer_config, name) != field.default and (
                self.optimizer_name not in users
            ):
                raise ValueError(
                    f"optimizerConfig.{to_camel(name)}: used by "
                    f"{', '.join(sorted(o.value for o in users))} only, and this job runs "
                    f"{self.optimizer_name.value}"
                )
        schedule = getattr(self.hyperparameters, "schedule", "constant")
        if schedule == "linear" and self.stop.timesteps is None:
            raise ValueError(
                "hyperparameters.schedule: linear decays to zero at stop.timesteps, "
                "so stop.timesteps must be set"
            )
        return self

    @property
    def optimizer_name(self) -> OptimizerName:
        """The optimizer that runs: the override, or the algorithm's default."""
        return self.optimizer or ALGORITHMS[self.algorithm].optimizers[0]


class AlgorithmTrainerConfig(_TrainerBase):
    """`spec.trainer` of one algorithm of the table (ALGORITHMS): each algorithm's config class
    is made from its row, with its name as the algorithm and its hyperparameters class."""

    algorithm: str
    hyperparameters: Hyperparameters


@dataclass(frozen=True)
class AlgorithmRow:
    """Everything kuberl knows about an algorithm, in one place: adding one is a hyperparameters
    class, a row here and a policy file."""

    hyperparameters: type[Hyperparameters]
    """Its hyperparameters: a class of kuberl_trainer.hyperparameters, one docstring per field."""
    policy: str
    """The policy class as module:Class, imported only by the trainer (this module stays light)."""
    optimizers: tuple[OptimizerName, ...]
    """The default optimizer first, then the swaps its numerics allow."""
    learns: str
    """How it learns, for the message that rejects an optimizer that cannot feed it."""
    discrete_actions_only: bool = False
    """Its policy handles Discrete action spaces only (checked when a job is validated)."""
    continuous_actions_only: bool = False
    """Its policy handles Box action spaces only (checked when a job is validated)."""


_ON_POLICY = "learns on fresh samples of its current policy"
_SGD_EPOCHS = "takes several epochs of minibatch SGD on fresh samples of its current policy"
_VTRACE = "learns on samples whose policy lag V-trace corrects"
_REPLAY = "learns Q-values from replayed transitions"
_SOFT_REPLAY = "learns its critics and its actor from replayed transitions"
_PERTURBED = "learns from the returns of perturbed copies of its parameters"

ALGORITHMS: dict[str, AlgorithmRow] = {
    "PG": AlgorithmRow(
        PGHyperparameters,
        "kuberl_trainer.policy.pg:PGPolicy",
        (SYNC_SAMPLES, ASYNC_GRADIENTS),
        _ON_POLICY,
    ),
    "A2C": AlgorithmRow(
        A2CHyperparameters,
        "kuberl_trainer.policy.a2c:A2CPolicy",
        (SYNC_SAMPLES, ASYNC_GRADIENTS),
        _ON_POLICY,
    ),
    "A3C": AlgorithmRow(
        A3CHyperparameters,
        "kuberl_trainer.policy.a2c:A2CPolicy",
        (ASYNC_GRADIENTS, SYNC_SAMPLES),
        _ON_POLICY,
    ),
    "PPO": AlgorithmRow(
        PPOHyperparameters,
        "kuberl_trainer.policy.ppo:PPOPolicy",
        (SYNC_SAMPLES, ASYNC_SAMPLES, LOCAL_MULTI_GPU),
        _SGD_EPOCHS,
    ),
    "APPO": AlgorithmRow(
        APPOHyperparameters,
        "kuberl_trainer.policy.appo:APPOPolicy",
        (ASYNC_SAMPLES, SYNC_SAMPLES),
        _VTRACE,
    ),
    "IMPALA": AlgorithmRow(
        IMPALAHyperparameters,
        "kuberl_trainer.policy.impala:IMPALAPolicy",
        (ASYNC_SAMPLES, SYNC_SAMPLES),
        _VTRACE,
    ),
    "DQN": AlgorithmRow(
        DQNHyperparameters,
        "kuberl_trainer.policy.dqn:DQNPolicy",
        (SYNC_REPLAY, ASYNC_REPLAY),
        _REPLAY,
        discrete_actions_only=True,
    ),
    "APEX": AlgorithmRow(
        APEXHyperparameters,
        "kuberl_trainer.policy.apex:APEXPolicy",
        (ASYNC_REPLAY, SYNC_REPLAY),
        _REPLAY,
        discrete_actions_only=True,
    ),
    "SAC": AlgorithmRow(
        SACHyperparameters,
        "kuberl_trainer.policy.sac:SACPolicy",
        (SYNC_REPLAY,),
        _SOFT_REPLAY,
        continuous_actions_only=True,
    ),
    "ES": AlgorithmRow(
        ESHyperparameters, "kuberl_trainer.policy.es:ESPolicy", (PERTURBATIONS,), _PERTURBED
    ),
}


def _trainer_config(name: str, row: AlgorithmRow) -> type[AlgorithmTrainerConfig]:
    return create_model(
        f"{name}Config",
        __base__=AlgorithmTrainerConfig,
        __module__=__name__,
        algorithm=(Literal[name], Field(description="The RL algorithm.")),
        hyperparameters=(
            row.hyperparameters,
            Field(default_factory=row.hyperparameters, description=f"{name} hyperparameters."),
        ),
    )


TRAINER_CONFIGS: dict[str, type[AlgorithmTrainerConfig]] = {
    name: _trainer_config(name, row) for name, row in ALGORITHMS.items()
}
"""Each algorithm's `spec.trainer` class (PPOConfig, ...), made from its row."""

AlgorithmConfig = Annotated[
    Union[tuple(Annotated[config, Tag(name)] for name, config in TRAINER_CONFIGS.items())],  # noqa: UP007
    Discriminator("algorithm"),
]
"""A trainer of one algorithm of the table: the algorithm field picks which hyperparameters are
valid."""

AnyTrainerConfig = AlgorithmTrainerConfig
"""A validated trainer of one algorithm (an instance of its TRAINER_CONFIGS class)."""


PBT = "PBT"


class PBTConfig(_TrainerBase):
    """Population-based training over an inner trainer (see PBTHyperparameters). The population's
    progress row reports the best trial's return and the env steps of all trials together, so
    `stop` counts those; the inner trainer's own stop only feeds its schedules, and checkpoints are
    the population's (this spec's `checkpoint`)."""

    algorithm: Literal["PBT"]
    """Population-based training."""
    hyperparameters: PBTHyperparameters = Field(default_factory=PBTHyperparameters)
    """The population and how it exploits and explores."""
    trainer: AlgorithmConfig
    """The trainer every trial runs: an ordinary spec.trainer of any other algorithm (env, envConfig
    and stop default to this spec's)."""

    @model_validator(mode="before")
    @classmethod
    def _inner_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("trainer"), dict):
            return data
        inner = dict(data["trainer"])
        for names in (("env",), ("envConfig", "env_config"), ("stop",)):
            given = [name for name in names if name in data]
            if given and not any(name in inner for name in names):
                inner[names[0]] = data[given[0]]
        return {**data, "trainer": inner}

    @model_validator(mode="after")
    def _check_pairings(self) -> PBTConfig:
        """The outer spec names no optimizer: each trial runs its inner trainer's."""
        if self.optimizer is not None or self.optimizer_config != OptimizerConfig():
            raise ValueError(
                "optimizer: PBT runs whole trainers, each with its own optimizer; set optimizer "
                "and optimizerConfig in trainer"
            )
        if (self.trainer.env, self.trainer.env_config) != (self.env, self.env_config):
            raise ValueError(
                f"trainer.env: every trial trains on the population's env ({self.env}, its "
                "envConfig alike); leave the inner env out or give the same"
            )
        inner = self.trainer.hyperparameters
        for name, mutation in self.hyperparameters.mutations.items():
            where = f"hyperparameters.mutations.{name}"
            if name not in type(inner).model_fields:
                raise ValueError(
                    f"{where}: {self.trainer.algorithm} has no hyperparameter {name}; it has "
                    + ", ".join(type(inner).model_fields)
                )
            if mutation.values is None and not isinstance(getattr(inner, name), int | float):
                raise ValueError(f"{where}: {name} is not a number; give values instead")
            for value in mutation.values or (mutation.min, mutation.max):
                _check_hyperparameters(inner, {name: value}, where)
        for index, overrides in enumerate(self.hyperparameters.trials):
            _check_hyperparameters(inner, overrides, f"hyperparameters.trials[{index}]")
        return self

    @property
    def optimizer_name(self) -> OptimizerName:
        """The optimizer each trial runs: its inner trainer's."""
        return self.trainer.optimizer_name


def _check_hyperparameters(inner: BaseModel, changes: dict[str, Any], where: str) -> None:
    """The inner hyperparameters with `changes` must be valid; the error names `where`."""
    try:
        type(inner).model_validate(inner.model_dump() | changes)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(f"{where}: {problems}") from None


def with_hyperparameters(config: AnyTrainerConfig, changes: dict[str, Any]) -> AnyTrainerConfig:
    """`config` with some hyperparameters changed, validated."""
    hyperparameters = type(config.hyperparameters).model_validate(
        config.hyperparameters.model_dump() | changes
    )
    return config.model_copy(update={"hyperparameters": hyperparameters})


TrainerConfig = Annotated[
    Union[
        (
            *(Annotated[config, Tag(name)] for name, config in TRAINER_CONFIGS.items()),
            Annotated[PBTConfig, Tag(PBT)],
        )
    ],
    Discriminator("algorithm"),
]
"""`spec.trainer`: the algorithm field picks which hyperparameters are valid."""

JobTrainerConfig = AnyTrainerConfig | PBTConfig
"""What a job trains: one algorithm's trainer, or a population of them."""
