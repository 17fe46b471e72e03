"""The gradient-free and population methods: evolution strategies (ES) and population-based
training (PBT) over an inner trainer, with the Mutation of each hyperparameter it explores."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from kuberl_contract.docstrings import Described
from kuberl_contract.hyperparameters.base import (
    NO_REPLAY_BUFFER,
    NO_TARGET_NETWORK,
    Coefficient,
    Count,
    Fraction,
    HiddenSizes,
    NetworkHyperparameters,
    Positive,
    StepSize,
    explores_otherwise,
)
from kuberl_contract.hyperparameters.known_as import KnownAs, NoEquivalent


class ESHyperparameters(NetworkHyperparameters):
    """Evolution strategies (Salimans et al. 2017, as RLlib's ES): the rollout workers evaluate
    antithetic pairs of perturbed parameters, theta + noise_stdev * eps and theta - noise_stdev *
    eps, one episode each with the deterministic policy, eps read from a noise table that the driver
    makes once and shares through Ray's object store; they return only where eps starts in the table
    and the two returns. The driver ranks the returns and takes an Adam step along the gradient they
    estimate. No discount, no fragments: whole episodes are what is scored.

    Its defaults are tuned on CartPole-v1; bench/README.md has the measurements."""

    learning_rate: StepSize = 0.02
    """Adam step size on the flat parameter vector (RLlib's ES stepsize 0.01; 0.01 and 0.05 were
    no faster on CartPole-v1)."""

    hidden_sizes: HiddenSizes = Field(default_factory=lambda: [16])
    """Widths of the hidden layers of the policy network. ES searches a space as large as the
    network's parameter count, so small networks learn in fewer episodes."""

    noise_stdev: Positive = 0.02
    """Standard deviation of the parameter perturbations (RLlib's ES noise_stdev 0.02)."""

    episodes_per_batch: int = Field(50, ge=2, le=1_000_000)
    """Perturbed episodes per update, in antithetic pairs, so an even number (RLlib's ES 1,000,
    its CartPole example 50). Each call on a worker evaluates one episode per env of the worker
    (envsPerWorker rounded up to a pair), so an update covers whole calls: up to
    envsPerWorker - 1 episodes more than this."""

    noise_size: int = Field(25_000_000, ge=1_000, le=1_000_000_000)
    """Entries (float32) of the shared noise table: 100 MB at the default, drawn once by the driver
    from a fixed seed and put once in Ray's object store, where every worker on a node reads the
    same copy. A perturbation is a slice as long as the network's parameter vector, starting at a
    random entry, so the table must be far longer than that (RLlib's ES 250M, 1 GB, for networks
    of 10^5 parameters; its CartPole example 25M)."""

    l2_coeff: Coefficient = 0.005
    """L2 regularisation: l2_coeff x the parameters join the negated gradient estimate before the
    Adam step (RLlib's ES l2_coeff 0.005)."""

    normalize_observations: Annotated[
        bool,
        KnownAs(
            "standardize observations by the workers' running statistics",
            rllib="observation_filter",
            rl_zoo="normalize",
        ),
    ] = True
    """Standardize observations by the mean and standard deviation of every observation the
    workers have acted on so far (the ES paper's normalization, RLlib's MeanStdFilter). The driver
    adds each batch's statistics after its update; they travel to the workers with the weights."""

    no_equivalent = (
        NoEquivalent(
            "ES scores whole episodes; an update covers episodes_per_batch of them",
            sb3=("n_steps", "batch_size"),
            rllib=("rollout_fragment_length", "train_batch_size", "train_batch_size_per_learner"),
        ),
        NoEquivalent(
            "ES takes no gradient of a loss: it ranks the returns of perturbed parameters",
            sb3=(
                "n_epochs",
                "train_freq",
                "gradient_steps",
                "gae_lambda",
                "ent_coef",
                "vf_coef",
                "max_grad_norm",
            ),
            rllib=(
                "sgd_minibatch_size",
                "minibatch_size",
                "num_sgd_iter",
                "num_epochs",
                "lambda",
                "lambda_",
                "vf_loss_coeff",
                "_lr_vf",
                "grad_clip",
            ),
        ),
        NO_REPLAY_BUFFER,
        NO_TARGET_NETWORK,
        explores_otherwise("ES explores by perturbing its parameters (noise_stdev)"),
        NoEquivalent("ES scores undiscounted episode returns", sb3="gamma", rllib="gamma"),
        NoEquivalent("ES ranks returns as centered ranks", sb3="normalize_advantage"),
    )

    @field_validator("episodes_per_batch")
    @classmethod
    def _whole_pairs(cls, episodes: int) -> int:
        if episodes % 2:
            raise ValueError(
                f"{episodes} is odd: every perturbation is evaluated as a pair of episodes "
                "(theta + noise and theta - noise), so give an even number"
            )
        return episodes


class Mutation(Described):
    """How explore changes one hyperparameter of the inner trainer: between `min` and `max`, or
    among `values`. As Ray Tune's PBT: a resampled value is drawn from that range (log-uniform
    with `log`) or a random one of the values; otherwise a number is multiplied by a random one
    of perturbation_factors and kept within the range, and a listed value moves to a neighbour."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min: float | None = None
    """Smallest value explore may set."""

    max: float | None = None
    """Largest value explore may set."""

    log: bool = False
    """Resample on a log scale (for step sizes and other scale parameters); min must be > 0."""

    values: list[float] | None = Field(None, min_length=2)
    """The values explore chooses among, in order (neighbours are adjacent); instead of a range."""

    @model_validator(mode="after")
    def _range_or_values(self) -> Mutation:
        if self.values is not None:
            if self.min is not None or self.max is not None or self.log:
                raise ValueError("give either values or min and max, not both")
            return self
        if self.min is None or self.max is None:
            raise ValueError("give min and max (or values)")
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        if self.log and self.min <= 0:
            raise ValueError(f"log needs min > 0, got {self.min:g}")
        return self


class PBTHyperparameters(Described):
    """Population-based training (Jaderberg et al. 2017, as Ray Tune's synchronous PBT): a
    population of trials, each a whole inner trainer (`trainer`) with its own rollout workers in a
    Ray actor, trained in rounds of perturbation_interval env steps each. After every round the
    trials in the bottom quantile exploit one of the top quantile (copy its weights and its
    hyperparameters) and explore (change the copied hyperparameters as their mutations say)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    population: Annotated[int, KnownAs("trials trained side by side", ray_tune="num_samples")] = (
        Field(4, ge=2, le=256)
    )
    """Trials trained side by side."""

    perturbation_interval: Count = 20_000
    """Env steps each trial samples in a round, between two exploit-and-explore steps (a trial's
    round ends with the first iteration that reaches it)."""

    quantile_fraction: float = Field(0.25, gt=0.0, le=0.5)
    """Share of the population (rounded up) in the bottom quantile, replaced after every round,
    and in the top quantile they copy (Ray Tune's default 0.25)."""

    resample_probability: Fraction = 0.25
    """Chance that explore draws a hyperparameter anew from its mutation instead of perturbing
    the copied value (Ray Tune's default 0.25)."""

    perturbation_factors: list[Positive] = Field(default_factory=lambda: [0.8, 1.2], min_length=1)
    """Factors explore multiplies a numeric hyperparameter by, one drawn at random (Ray Tune's
    default 0.8 and 1.2)."""

    mutations: Annotated[
        dict[str, Mutation],
        KnownAs("the trials' hyperparameters explore changes", ray_tune="hyperparam_mutations"),
    ] = Field(default_factory=dict)
    """The inner trainer's hyperparameters explore changes, by name (for example learning_rate:
    {min: 1.0e-5, max: 1.0e-2, log: true}). The others are copied unchanged with the weights."""

    trials: list[dict[str, Any]] = Field(default_factory=list)
    """Hyperparameters of the inner trainer that trial i (from 0) starts with instead of the inner
    spec's; trials past the list start from the inner spec's. At most population entries."""

    cpus_per_trial: Positive = 1.0
    """CPUs each trial's Ray actor (its learner, which also samples when rolloutWorkers.replicas
    is 0) asks of Ray; its rollout workers ask for their own."""

    @model_validator(mode="after")
    def _trials_fit(self) -> PBTHyperparameters:
        if len(self.trials) > self.population:
            raise ValueError(
                f"trials: {len(self.trials)} entries for a population of {self.population}"
            )
        return self
