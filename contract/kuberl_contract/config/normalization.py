"""`spec.trainer.normalization`: observations and rewards normalized by running statistics, as
Stable-Baselines3's VecNormalize does."""

from __future__ import annotations

from pydantic import Field

from kuberl_contract.config.base import Spec


class NormalizationConfig(Spec):
    """Observation normalization and reward scaling by running statistics of what the rollout
    workers sample (Stable-Baselines3's VecNormalize). The workers normalize with the statistics
    of all the workers' samples, as the driver last sent them with the weights; the learner
    learns on the normalized observations and scaled rewards, the episode returns reported stay
    the env's own, evaluation uses the statistics without updating them, and checkpoints hold
    them."""

    observations: bool = False
    """Standardize observations: (obs - mean) / sqrt(var + epsilon), clipped to
    clipObservations, with the running mean and variance of every observation sampled. Box
    observation spaces only."""

    rewards: bool = False
    """Scale rewards by the running standard deviation of the discounted return: reward /
    sqrt(var + epsilon), clipped to clipRewards, where the return sums each env's rewards
    discounted by the algorithm's gamma (0.99 for an algorithm without one) and starts again
    with each episode. The mean is not subtracted."""

    clip_observations: float = Field(10.0, gt=0)
    """Bound on the absolute value of a normalized observation."""

    clip_rewards: float = Field(10.0, gt=0)
    """Bound on the absolute value of a scaled reward."""

    epsilon: float = Field(1e-8, gt=0, le=1)
    """Added to the variance before its square root, so that a constant feature (variance 0)
    divides by no zero."""

    @property
    def enabled(self) -> bool:
        """Whether anything is normalized: the statistics are kept only then."""
        return self.observations or self.rewards
