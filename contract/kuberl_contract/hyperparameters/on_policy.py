"""The on-policy algorithms: policy gradient, the actor-critics (A2C, A3C), PPO, and IMPALA and
APPO, which learn on the workers' recent samples with V-trace correcting for their policy lag."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kuberl_contract.hyperparameters.base import (
    EXPLORES_BY_SAMPLING,
    NO_REPLAY_BUFFER,
    NO_TARGET_NETWORK,
    AdamEpsilon,
    BatchSize,
    Coefficient,
    Count,
    Epochs,
    Fraction,
    GradClip,
    Hyperparameters,
    Positive,
    PositiveFraction,
    StepSize,
    StepsPerIteration,
)
from kuberl_contract.hyperparameters.known_as import KnownAs, NoEquivalent

# Other libraries' names for fields that several of these algorithms declare.
_ENTROPY = KnownAs("weight of the entropy bonus in the loss", sb3="ent_coef")
_VALUE_WEIGHT = KnownAs("weight of the value-function loss", sb3="vf_coef", rllib="vf_loss_coeff")
_GAE = KnownAs("GAE lambda", sb3="gae_lambda", rllib=("lambda", "lambda_"))
_ADVANTAGES = KnownAs("standardize advantages", sb3="normalize_advantage")
_EPOCHS = KnownAs("passes of SGD over each batch", sb3="n_epochs", rllib="num_sgd_iter")
_CLIP = KnownAs("clip parameter of the surrogate objective", rllib="clip_param")

# What these algorithms have no setting for, by the way they learn.
_FRESH_SAMPLES = (
    NoEquivalent("it learns on every batch of rollout_length env steps", sb3="train_freq"),
    NO_REPLAY_BUFFER,
    NO_TARGET_NETWORK,
    EXPLORES_BY_SAMPLING,
)
_ONE_STEP = NoEquivalent(
    "it takes one gradient step on each whole batch",
    sb3=("n_epochs", "gradient_steps"),
    rllib=("sgd_minibatch_size", "minibatch_size", "num_sgd_iter", "num_epochs"),
)
_CLIPPED_EPOCHS = (
    NoEquivalent("it takes num_epochs passes of minibatches", sb3="gradient_steps"),
    NoEquivalent(
        "there is no KL penalty, only the clipped surrogate; PPO's target_kl stops an "
        "iteration's epochs once the approximate KL exceeds it",
        rllib=("kl_coeff", "kl_target"),
    ),
)


class PGHyperparameters(Hyperparameters):
    """Vanilla policy gradient (REINFORCE on discounted returns-to-go)."""

    learning_rate: StepSize = 4e-3
    """Adam step size."""

    rollout_length: StepsPerIteration = 200
    """Env steps taken by every env of every rollout worker per iteration."""

    entropy_coeff: Annotated[Coefficient, _ENTROPY] = 0.0
    """Weight of the entropy bonus in the loss."""

    normalize_returns: Annotated[
        bool,
        KnownAs("standardize returns: PG has no advantages", sb3="normalize_advantage"),
    ] = True
    """Standardize returns within the batch before the gradient step (a variance-reducing
    baseline)."""

    no_equivalent = (
        *_FRESH_SAMPLES,
        _ONE_STEP,
        _VALUE_WEIGHT.absent("PG learns no value function; normalize_returns is its baseline"),
        _GAE.absent("PG learns on discounted returns-to-go, without GAE"),
    )


class CriticHyperparameters(Hyperparameters):
    """Base of the actor-critics' hyperparameters: a value network beside the policy."""

    vf_learning_rate_ratio: Annotated[
        Positive,
        KnownAs(
            "the value network's Adam step size as a multiple of learning_rate: _lr_vf / lr",
            rllib="_lr_vf",
        ),
    ] = 1.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate (the
    value head's alone where a CNN encoder is shared; RLlib's IMPALA had `_lr_vf`, an absolute
    rate). Adam moves every parameter by about its step size whatever its gradient, so changing
    the value loss's weight barely changes how fast the critic follows the returns; this does.
    The default steps both networks alike, as Stable-Baselines3 and RLlib do; A3C defaults to
    10, IMPALA and APPO to 30 (see theirs)."""

    no_equivalent = _FRESH_SAMPLES


class A2CHyperparameters(CriticHyperparameters):
    """Synchronous advantage actor-critic."""

    learning_rate: StepSize = 7e-4
    """Adam step size."""

    rollout_length: StepsPerIteration = 8
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: Annotated[Fraction, _GAE] = 1.0
    """GAE lambda: 1.0 is the n-step advantage of the A2C paper, lower trades bias for variance."""

    vf_coeff: Annotated[Coefficient, _VALUE_WEIGHT] = 0.5
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    entropy_coeff: Annotated[Coefficient, _ENTROPY] = 0.0
    """Weight of the entropy bonus in the loss."""

    normalize_advantages: Annotated[bool, _ADVANTAGES] = False
    """Standardize advantages within the batch."""

    no_equivalent = (_ONE_STEP,)


class A3CHyperparameters(A2CHyperparameters):
    """Asynchronous advantage actor-critic (Mnih et al. 2016): A2C's loss, with every worker
    computing gradients on its own samples and the driver applying them as they arrive."""

    learning_rate: StepSize = 5e-4
    """Adam step size (RLlib's A3C used 1e-4 with 10-step fragments on Atari). With the critic
    at 10 times it and adam_epsilon at 1e-3, it holds a solved policy while gradients arrive a
    few applies old, which 1e-3 now and then does not."""

    rollout_length: Annotated[
        StepsPerIteration,
        KnownAs(
            "each gradient is one worker's rollout_length x envsPerWorker env steps: set "
            "rollout_length to the batch size / envsPerWorker",
            sb3="batch_size",
            rllib=("train_batch_size", "train_batch_size_per_learner"),
        ),
    ] = 10
    """Env steps taken by every env of a worker per gradient (RLlib's rollout_fragment_length 10;
    the A3C paper's t_max is 5)."""

    gae_lambda: Fraction = 0.95
    """GAE lambda. The A3C paper's n-step advantages (and RLlib's A3C) are 1.0; 0.95 trades a
    little bias for less variance, and learns in fewer env steps with few workers."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss. The A3C paper's 0.01 (Atari, clipped rewards)
    can hold CartPole-v1 on a plateau of middling returns; sampling the policy explores enough
    without it, and learns faster."""

    max_grad_norm: GradClip = 40.0
    """Clip each worker's gradient norm to this value (RLlib's A3C grad_clip 40); null disables
    clipping."""

    vf_learning_rate_ratio: Positive = 10.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate. At
    1 the critic follows the returns slowly (see IMPALA's), and a solved policy can fall on the
    advantages it leaves; at 10 it keeps up."""

    adam_epsilon: AdamEpsilon = 1e-3
    """Added to the root of Adam's average of squared gradients. Once the critic fits a solved
    policy's returns, the advantages and the gradients vanish, and at 1e-5 Adam still moves
    every weight by about the step size along that noise until the policy falls; at 1e-3 such
    steps shrink with the gradients, and learning is as fast."""


class PPOHyperparameters(CriticHyperparameters):
    """Proximal policy optimization with the clipped surrogate objective."""

    learning_rate: StepSize = 3e-4
    """Adam step size (the start value when schedule is linear)."""

    rollout_length: StepsPerIteration = 128
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: Annotated[Fraction, _GAE] = 0.95
    """GAE lambda."""

    clip_range: Annotated[PositiveFraction, _CLIP] = 0.2
    """Clip parameter of the surrogate objective (the start value when schedule is linear)."""

    vf_coeff: Annotated[Coefficient, _VALUE_WEIGHT] = 0.5
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    vf_clip_range: Annotated[
        Positive | None,
        KnownAs(
            "value predictions clipped to this distance from the old ones; null disables it",
            sb3="clip_range_vf",
        ),
        KnownAs(
            "not the same clip: RLlib caps the squared value error at vf_clip_param, kuberl "
            "keeps each value prediction within vf_clip_range of the old one, as SB3's "
            "clip_range_vf; null (the default) disables it",
            rllib="vf_clip_param",
        ),
    ] = None
    """Clip value predictions to this distance from the old ones; null disables it."""

    entropy_coeff: Annotated[Coefficient, _ENTROPY] = 0.0
    """Weight of the entropy bonus in the loss."""

    num_epochs: Annotated[Epochs, _EPOCHS] = 10
    """Passes of SGD over each iteration's batch."""

    minibatch_size: Annotated[
        Count,
        KnownAs("samples per SGD minibatch, as SB3's PPO batch_size", sb3="batch_size"),
        KnownAs("samples per SGD minibatch", rllib="sgd_minibatch_size"),
    ] = 64
    """Samples per SGD minibatch (capped at the batch size)."""

    normalize_advantages: Annotated[bool, _ADVANTAGES] = True
    """Standardize advantages within each minibatch."""

    target_kl: Positive | None = None
    """Stop the epochs of an iteration early once the approximate KL exceeds this; null never
    stops early."""

    schedule: Annotated[
        Literal["constant", "linear"],
        KnownAs(
            "linear decays learning_rate and clip_range to zero at stop.timesteps; piecewise "
            "schedules have no equivalent",
            rllib="lr_schedule",
        ),
    ] = "constant"
    """How learning_rate and clip_range evolve: linear decays both to zero at stop.timesteps."""

    initial_log_std: Annotated[
        float, KnownAs("starting log std of the Gaussian policy", sb3="log_std_init")
    ] = Field(0.0, ge=-5.0, le=2.0)
    """Starting log standard deviation of the Gaussian policy (continuous actions only)."""

    no_equivalent = _CLIPPED_EPOCHS


class IMPALAHyperparameters(CriticHyperparameters):
    """Importance-weighted actor-learner architecture (Espeholt et al. 2018): an actor-critic that
    learns while the workers sample, correcting for their policy lag with V-trace.

    Its defaults are tuned on CartPole-v1 to learn in few env steps with 1 to 12 workers of 8 to 64
    envs, and to hold a solved policy on a busy machine; bench/README.md has the measurements."""

    learning_rate: StepSize = 5e-4
    """Adam step size (RLlib's IMPALA 5e-4). Larger steps learn faster with few envs per worker,
    but collapse the policy to one action where the learner falls further behind the workers."""

    rollout_length: StepsPerIteration = 32
    """Env steps taken by every env of a worker per sample call; V-trace runs over sequences of
    this length (RLlib's rollout_fragment_length 50; 32 makes the learner's batches arrive
    sooner)."""

    train_batch_size: Annotated[
        BatchSize, KnownAs("env steps per learner step", rllib="train_batch_size_per_learner")
    ] = 500
    """Env steps per learner step: sample calls are concatenated until they hold at least this
    many (RLlib's train_batch_size 500)."""

    vf_coeff: Annotated[Coefficient, _VALUE_WEIGHT] = 0.5
    """Weight of the value-function loss, 0.5 (vs - V)^2 (RLlib's vf_loss_coeff 0.5)."""

    vf_learning_rate_ratio: Positive = 30.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate (the
    value head's alone where a CNN encoder is shared). At 1 the critic follows returns that
    climb toward 100 (CartPole at gamma 0.99) over thousands of learner steps, and the policy
    learns on biased advantages meanwhile; at 30 it keeps up, and a task is learned in about
    half the env steps. 10 and 100 do about as well."""

    entropy_coeff: Annotated[Coefficient, _ENTROPY] = 1e-3
    """Weight of the entropy bonus in the loss (RLlib's IMPALA 0.01, 0 in its tuned CartPole
    example). Without one, a policy with many envs per worker now and then settles on actions
    whose entropy keeps falling while its envs fail together, and does not recover; 1e-3
    prevents that at a small cost in speed with few envs, where 0.01 slows learning far more."""

    vtrace_clip_rho_threshold: Positive = 1.0
    """rho-bar: clip of the importance weights in the V-trace value targets (the paper's 1.0)."""

    vtrace_clip_pg_rho_threshold: Positive = 1.0
    """Clip of the importance weights in the policy gradient's advantages (the paper's 1.0)."""

    vtrace_clip_c_threshold: Positive = 1.0
    """c-bar: clip of the trace-cutting coefficients c_s in the V-trace recursion (the paper's
    1.0)."""

    normalize_advantages: Annotated[bool, _ADVANTAGES] = False
    """Standardize the V-trace advantages within each (mini)batch (RLlib's IMPALA and APPO do
    not). Off by default: once a task is solved the critic fits its returns and the advantages
    shrink toward 0, and standardizing divides by that, so every learner step moves the policy a
    full step on noise until it falls apart."""

    max_grad_norm: GradClip = 40.0
    """Clip the global gradient norm to this value (RLlib's IMPALA grad_clip 40); null disables
    clipping."""

    adam_beta2: float = Field(0.99, gt=0.0, lt=1.0)
    """Adam's decay rate of its averages of squared gradients (torch's and RLlib's 0.999). At
    0.99 they follow the last hundred or so SGD steps instead of a thousand, so after a long
    solved stretch, whose gradients are near 0, the first failed episodes move the policy about as
    far as they would while learning, not several times as far."""

    minibatch_size: Annotated[
        Count | None,
        KnownAs(
            "samples per SGD step; null lets the batch's policy lag decide",
            sb3="batch_size",
            rllib="sgd_minibatch_size",
        ),
    ] = None
    """Samples per SGD step: a learner batch larger than this is learned on in minibatches
    (RLlib's minibatch_size). Null (the default) lets the policy lag decide: a learner batch of
    R env steps that lags L learner steps (the mean over its sample calls) is learned on in k =
    min(R // train_batch_size, lag_sgd_steps // L) minibatches (at least 1), so that batches of
    little lag take more than one SGD step each, and batches that lag more take whole-batch
    steps. With many envs per worker that learns several times faster than whole batches,
    without overshooting where the lag is long."""

    lag_sgd_steps: int = Field(4, ge=1, le=1000)
    """With minibatch_size null: the SGD steps a batch may lag, counting every minibatch of
    every pass as a step, that its minibatches and passes keep to (see minibatch_size). The
    learner's steps on a batch move a policy already past the one that sampled it, a delay in a
    feedback loop: once a solved policy's first episodes fail, too long a delay and too many
    steps on each batch overshoot the correction, and the return falls. 4 holds a solved policy
    on a busy node, where a batch arrives about 2 learner steps old, for a little speed on an
    idle machine; at 8 the policy fell there, and 16 or 32 collapsed it while it learned."""

    no_equivalent = (
        NoEquivalent(
            "it passes once over each learner batch, in minibatch_size minibatches; APPO takes "
            "num_epochs passes",
            sb3=("n_epochs", "gradient_steps"),
            rllib=("num_sgd_iter", "num_epochs"),
        ),
        _GAE.absent("V-trace computes its targets, with no lambda"),
    )


class APPOHyperparameters(IMPALAHyperparameters):
    """Asynchronous PPO: PPO's clipped surrogate on IMPALA's execution, with V-trace targets.

    IMPALA's defaults plus several clipped epochs of minibatches per batch, which reach a return on
    CartPole-v1 and Pendulum-v1 in a fraction of the env steps one epoch takes; bench/README.md has
    the measurements."""

    learning_rate: StepSize = 1e-3
    """Adam step size (RLlib's APPO 5e-4): the clipped surrogate keeps 1e-3 stable, and it
    learns faster."""

    clip_range: Annotated[PositiveFraction, _CLIP] = 0.4
    """Clip parameter of the surrogate objective (RLlib's APPO clip_param 0.4)."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss (0 as in RLlib's tuned CartPole example). The
    clipped surrogate keeps APPO's policy from the falls that IMPALA's bonus guards against, so
    it needs none."""

    num_epochs: Annotated[Epochs, _EPOCHS] = 4
    """Passes of SGD over each learner batch, each with V-trace targets from the current
    networks: IMPACT's replay coefficient K, the draws of each batch from its circular buffer
    (RLlib's APPO circular_buffer_iterations_per_batch 2, its tuned CartPole examples 6). With
    minibatch_size null, at most as many as lag_sgd_steps allows: a batch that lags takes fewer."""

    minibatch_size: Count | None = None
    """Samples per SGD minibatch (capped at the learner batch), or null to learn on each batch
    in as many minibatches and passes (up to num_epochs) as its lag allows, as IMPALA's null
    does (see lag_sgd_steps). Null keeps a solved policy on a busy node, where a fixed size
    takes many SGD steps on each lagging batch and overshoots; it costs speed where the lag is
    short and many steps per batch are safe."""

    target_update_interval: Annotated[
        Count | None,
        KnownAs("learner steps between refreshes", rllib="target_network_update_freq"),
    ] = None
    """IMPACT's target network, the surrogate's reference policy: learner steps between its
    refreshes (RLlib's APPO: every 32 train batches learned on). Null (the default) has no
    target network: the ratio is to the behaviour policy that sampled the batch, which learns
    faster than a target refreshed after every learner step."""

    no_equivalent = (
        *_CLIPPED_EPOCHS,
        NoEquivalent(
            "its target network is a copy, every target_update_interval steps",
            sb3="tau",
            rllib="tau",
        ),
    )
