"""`spec.trainer.evaluation`: greedy evaluation episodes and their cadence."""

from __future__ import annotations

from pydantic import Field

from kuberl_contract.config.base import Spec

# Fewer episodes than this make a stop on their mean a matter of luck: a CartPole policy that
# averaged 480 on 10 scored 441 on 100 fresh ones, a Pendulum one -184 on 5 and -318 on 20.
FEW_EPISODES = 30


class EvaluationConfig(Spec):
    """Greedy evaluation episodes run by the driver on a separate env."""

    every_iterations: int = Field(0, ge=0)
    """Evaluate every this many iterations; 0 turns evaluation off."""

    episodes: int = Field(10, ge=1, le=1000)
    """Episodes per evaluation, averaged."""

    confirm_episodes: int = Field(100, ge=0, le=1000)
    """When an evaluation reaches stop.evaluationReturnMean, this many more greedy episodes, on
    start states no evaluation has used, must reach it too before training stops: their mean less
    its standard error, so that a policy just below the target does not pass on a lucky draw.
    Their mean is the iteration's evaluation return. A mean of a few episodes is noisy: a lucky
    draw of 10 passes a policy that scores less on fresh ones. 0 stops on the evaluation alone."""


def noisy_evaluation_stop(target: float | None, evaluation: EvaluationConfig) -> str | None:
    """Why a stop on evaluation return (`target`) would rest on luck, or None: the episodes its
    mean is taken over, confirmation included, are few."""
    if target is None or evaluation.confirm_episodes >= FEW_EPISODES:
        return None
    episodes = max(evaluation.episodes, evaluation.confirm_episodes)
    if episodes >= FEW_EPISODES:
        return None
    return (
        f"stop.evaluationReturnMean: the stop rests on the mean of {episodes} episodes, which a "
        f"lucky draw passes; set evaluation.confirmEpisodes to {FEW_EPISODES} or more (100 by "
        "default) so that a passing evaluation is confirmed on fresh episodes"
    )
