"""`spec.trainer` of algorithm PBT: population-based training over an inner trainer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from kuberl_contract.config.optimizer import OptimizerConfig, OptimizerName
from kuberl_contract.config.trainer import AlgorithmConfig, _TrainerBase
from kuberl_contract.hyperparameters import PBTHyperparameters

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
    """The trainer every trial runs: an ordinary spec.trainer of any other algorithm (env,
    envConfig, wrappers, model and stop default to this spec's)."""

    @model_validator(mode="before")
    @classmethod
    def _inner_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("trainer"), dict):
            return data
        inner = dict(data["trainer"])
        for names in (("env",), ("envConfig", "env_config"), ("wrappers",), ("model",), ("stop",)):
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
        if self.trainer.wrappers != self.wrappers:
            raise ValueError(
                "trainer.wrappers: every trial wraps its envs as the population does; leave the "
                "inner wrappers out or give the same"
            )
        if self.trainer.model != self.model:
            raise ValueError(
                "trainer.model: every trial's networks take the population's model; leave the "
                "inner model out or give the same"
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
