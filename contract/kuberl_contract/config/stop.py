"""`spec.trainer.stop`: when training ends."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from kuberl_contract.config.base import Spec
from kuberl_contract.hyperparameters.known_as import KnownAs


class StopConditions(Spec):
    """Training stops at the first condition met; at least one is required."""

    timesteps: Annotated[
        int | None,
        KnownAs("env steps to train for, one of the stop conditions", sb3="total_timesteps"),
    ] = Field(None, ge=1)
    """Stop after this many env steps sampled in total."""

    iterations: int | None = Field(None, ge=1)
    """Stop after this many training iterations."""

    episode_return_mean: float | None = None
    """Stop once the mean return of the recent training episodes reaches this value."""

    evaluation_return_mean: float | None = None
    """Stop once a greedy evaluation (see evaluation) reaches this mean return, confirmed on
    evaluation.confirmEpisodes fresh episodes (100 by default). The mean of a few episodes is
    noisy: without the confirmation, a lucky evaluation stops a policy that scores less on fresh
    episodes."""

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
