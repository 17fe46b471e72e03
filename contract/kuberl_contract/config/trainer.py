"""The fields every `spec.trainer` has (env, envConfig, wrappers, model, optimizer, stop,
checkpoint, evaluation, normalization, seed, metricsWindow, tensorboard) and the pairings they are
checked for, and each algorithm's config class (`TRAINER_CONFIGS`), made from its row of the
table."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kuberl_contract.config.algorithms import ALGORITHMS, AlgorithmRow
from kuberl_contract.config.base import Spec
from kuberl_contract.config.checkpoint import CheckpointConfig, WarmStartConfig
from kuberl_contract.config.evaluation import EvaluationConfig
from kuberl_contract.config.model import ModelConfig
from kuberl_contract.config.multi_agent import JOB_WIDE_HYPERPARAMETERS, MultiAgentConfig
from kuberl_contract.config.normalization import NormalizationConfig
from kuberl_contract.config.optimizer import (
    OPTIMIZERS,
    PERTURBATIONS,
    OptimizerConfig,
    OptimizerName,
    optimizers_using,
)
from kuberl_contract.config.stop import StopConditions
from kuberl_contract.config.wrappers import WrapperConfig
from kuberl_contract.hyperparameters import Hyperparameters
from kuberl_contract.hyperparameters.known_as import KnownAs


class _TrainerBase(Spec):
    env: str = Field(min_length=1)
    """A gymnasium id such as CartPole-v1, or module:Class naming a gymnasium.Env subclass."""

    env_config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the env's constructor."""

    wrappers: list[WrapperConfig] = Field(default_factory=list, max_length=64)
    """gymnasium wrappers put around every env in this order (the first wraps the env itself), the
    same on every rollout worker and in evaluation: [{name: TimeLimit, kwargs: {max_episode_steps:
    200}}]. (Dict, Tuple, MultiDiscrete and MultiBinary observations need none: they are encoded
    flat, Discrete parts one-hot, and a Dict's action_mask masks the actions.) An env with a
    native vector entry point (CartPole) is then made one by one, as the wrappers wrap single
    envs."""

    model: Annotated[
        ModelConfig,
        KnownAs(
            "the encoder of observations: encoder, convFilters, features, vfShareLayers; the "
            "MLP's layers are the hyperparameters hidden_sizes and activation",
            rllib="model",
        ),
    ] = Field(default_factory=ModelConfig)
    """The networks' encoder of observations: the Nature CNN for images (uint8 frames), the MLP
    of hyperparameters.hidden_sizes for everything else, unless set here."""

    multi_agent: MultiAgentConfig | None = None
    """For a multi-agent env (pettingzoo:MODULE): its policies and which agents act with which.
    Without it, every agent of such an env acts with one shared policy."""

    optimizer: OptimizerName | None = None
    """Override of the algorithm's default policy optimizer (the execution strategy)."""

    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """Settings of the optimizer that runs (queue sizes, calls in flight, timeouts, shards)."""

    stop: StopConditions
    """When training ends."""

    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoint location and cadence."""

    warm_start: WarmStartConfig | None = None
    """A trained policy to start from instead of fresh networks (see WarmStartConfig)."""

    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """Greedy evaluation cadence."""

    normalization: Annotated[
        NormalizationConfig,
        KnownAs(
            "observation normalization and reward scaling by running statistics, as VecNormalize",
            rllib="observation_filter",
            rl_zoo="normalize",
        ),
    ] = Field(default_factory=NormalizationConfig)
    """Observation normalization and reward scaling by running statistics of the samples (as
    Stable-Baselines3's VecNormalize); off by default."""

    seed: Annotated[
        int | None,
        KnownAs("seed of envs, networks and exploration", sb3="seed", rllib="seed"),
    ] = Field(None, ge=0, le=2**32 - 1)
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
                f"{OPTIMIZERS[self.optimizer].feeds}, but {self.algorithm} {row.learns}; "
                f"compatible: {names}"
            )
        # A setting the optimizer ignores is a mistake; left at its default, it is no setting.
        for name, field in OptimizerConfig.model_fields.items():
            users = optimizers_using(name)
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

    @model_validator(mode="after")
    def _check_normalization(self) -> _TrainerBase:
        """Normalization is for the algorithms that learn from sampled env steps, set on the
        trainer that samples."""
        if not self.normalization.enabled:
            return self
        if self.algorithm not in ALGORITHMS:  # a population: each trial keeps its statistics
            raise ValueError(
                f"normalization: {self.algorithm} normalizes nothing itself; set normalization "
                "in trainer, and each trial keeps statistics of its own samples"
            )
        if self.optimizer_name == PERTURBATIONS:
            raise ValueError(
                f"normalization: {self.algorithm} learns from the returns of whole episodes, not "
                "from samples; it standardizes observations itself "
                "(hyperparameters.normalize_observations)"
            )
        return self

    @model_validator(mode="after")
    def _check_multi_agent(self) -> _TrainerBase:
        if self.multi_agent is None:
            return self
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"multiAgent: {self.algorithm} runs trials of an inner trainer; set multiAgent "
                "in trainer"
            )
        if self.optimizer_name == PERTURBATIONS:
            raise ValueError(
                f"multiAgent: {self.algorithm} perturbs one network for whole episodes; train "
                "several agents with PPO, A2C, IMPALA, APPO, DQN, APEX or SAC"
            )
        for name, policy in self.multi_agent.policies.items():
            field = f"multiAgent.policies.{name}.hyperparameters"
            for key in sorted(JOB_WIDE_HYPERPARAMETERS & policy.hyperparameters.keys()):
                raise ValueError(
                    f"{field}.{key}: the job's policies share it; set it in hyperparameters"
                )
            try:
                type(self.hyperparameters).model_validate(
                    self.hyperparameters.model_dump() | policy.hyperparameters
                )
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"])
                raise ValueError(f"{field}.{where}: {error['msg']}") from None
        return self

    @model_validator(mode="after")
    def _check_memory(self) -> _TrainerBase:
        """A memory (model.recurrent) is learned by the algorithms that unroll it over whole
        sequences, so far PPO and A2C (A3C)."""
        if self.model.recurrent is not None and self.algorithm not in ("PPO", "A2C", "A3C"):
            raise ValueError(
                f"model.recurrent: {self.algorithm} does not take a memory yet; PPO, A2C and A3C "
                "do. Remove model.recurrent or choose one of those"
            )
        return self

    @model_validator(mode="after")
    def _check_warm_start(self) -> _TrainerBase:
        if self.warm_start is not None and self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"warmStart: {self.algorithm} starts a population of trials from their own "
                "networks; set warmStart in trainer, and every trial starts from it"
            )
        return self

    @property
    def optimizer_name(self) -> OptimizerName:
        """The optimizer that runs: the override, or the algorithm's default."""
        return self.optimizer or ALGORITHMS[self.algorithm].optimizers[0]

    @property
    def image_observations(self) -> bool:
        """Whether the algorithm's networks take images (its row's image_observations)."""
        return ALGORITHMS[self.algorithm].image_observations


class AlgorithmTrainerConfig(_TrainerBase):
    """`spec.trainer` of one algorithm of the table (ALGORITHMS): each algorithm's config class
    is made from its row, with its name as the algorithm and its hyperparameters class. Its fields
    and those of the classes made from it are described in Field(description=...)."""

    algorithm: str
    hyperparameters: Hyperparameters


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


def with_hyperparameters(config: AnyTrainerConfig, changes: dict[str, Any]) -> AnyTrainerConfig:
    """`config` with some hyperparameters changed, validated."""
    hyperparameters = type(config.hyperparameters).model_validate(
        config.hyperparameters.model_dump() | changes
    )
    return config.model_copy(update={"hyperparameters": hyperparameters})


def policy_config(config: AnyTrainerConfig, name: str) -> AnyTrainerConfig:
    """The config policy `name` of a multi-agent job learns with: the job's, with the
    hyperparameters and the model of multiAgent.policies[name] where it sets them."""
    spec = config.multi_agent.policies.get(name) if config.multi_agent else None
    if spec is None:
        return config
    changed = with_hyperparameters(config, spec.hyperparameters)
    if spec.model is not None:
        changed = changed.model_copy(update={"model": spec.model})
    return changed
