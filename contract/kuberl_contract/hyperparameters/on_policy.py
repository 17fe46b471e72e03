"""The on-policy algorithms: policy gradient, the actor-critics (A2C, A3C), PPO, and IMPALA and
APPO, which learn on the workers' recent samples with V-trace correcting for their policy lag."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kuberl_contract.hyperparameters.base import (
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


class PGHyperparameters(Hyperparameters):
    """Vanilla policy gradient (REINFORCE on discounted returns-to-go)."""

    learning_rate: StepSize = 4e-3
    """Adam step size."""

    rollout_length: StepsPerIteration = 200
    """Env steps taken by every env of every rollout worker per iteration."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss."""

    normalize_returns: bool = True
    """Standardize returns within the batch before the gradient step (a variance-reducing
    baseline)."""


class CriticHyperparameters(Hyperparameters):
    """Base of the actor-critics' hyperparameters: a value network beside the policy."""

    vf_learning_rate_ratio: Positive = 1.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate (the
    value head's alone where a CNN encoder is shared; RLlib's IMPALA had `_lr_vf`, an absolute
    rate). Adam moves every parameter by about its step size whatever its gradient, so changing
    the value loss's weight barely changes how fast the critic follows the returns; this does.
    IMPALA and APPO default to 30 (see theirs). On `deploy/examples/cartpole-ppo.yaml`, 3 reached
    475 within 15.5-28k env steps (median 21k) against 25-53k (40k) at 1 (seeds 0-9); the
    default stays 1, as Stable-Baselines3 and RLlib step both networks alike."""


class A2CHyperparameters(CriticHyperparameters):
    """Synchronous advantage actor-critic."""

    learning_rate: StepSize = 7e-4
    """Adam step size."""

    rollout_length: StepsPerIteration = 8
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: Fraction = 1.0
    """GAE lambda: 1.0 is the n-step advantage of the A2C paper, lower trades bias for variance."""

    vf_coeff: Coefficient = 0.5
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss."""

    normalize_advantages: bool = False
    """Standardize advantages within the batch."""


class A3CHyperparameters(A2CHyperparameters):
    """Asynchronous advantage actor-critic (Mnih et al. 2016): A2C's loss, with every worker
    computing gradients on its own samples and the driver applying them as they arrive."""

    learning_rate: StepSize = 5e-4
    """Adam step size (RLlib's A3C used 1e-4 with 10-step fragments on Atari). With the critic at
    10 times it and adam_epsilon at 1e-3, CartPole-v1 with 2 workers of 8 envs, replayed with
    gradients 3 applies old, reached 400 within 70-116k env steps and held it (seeds 0-11); at
    1e-3, 2 of those 12 runs fell below 400 over the second half of 200k env steps."""

    rollout_length: StepsPerIteration = 10
    """Env steps taken by every env of a worker per gradient (RLlib's rollout_fragment_length 10;
    the A3C paper's t_max is 5)."""

    gae_lambda: Fraction = 0.95
    """GAE lambda. The A3C paper's n-step advantages (and RLlib's A3C) are 1.0; on CartPole-v1
    with 2 workers 0.95 reached a return of 400 within 70k env steps on seeds 0-5, 1.0 needed up
    to 116k (learning_rate 1e-3, the critic at the policy's step size)."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss. The A3C paper's beta = 0.01 (Atari, clipped
    rewards) held 1 CartPole-v1 run in 6 on a plateau of returns near 200 with 2 workers beside
    another run (200k env steps, with 10- or 20-step fragments or a step size of 5e-4 alike); 0
    reached 400 within 27-91k env steps on seeds 0-9 there, and with 8 workers within 46-48k
    (0.01: 125k; learning_rate 1e-3, the critic at the policy's step size)."""

    max_grad_norm: GradClip = 40.0
    """Clip each worker's gradient norm to this value (RLlib's A3C grad_clip 40); null disables
    clipping."""

    vf_learning_rate_ratio: Positive = 10.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate. At 1
    the critic follows the returns slowly (see IMPALA's), and on CartPole-v1 replayed without lag
    (2 workers of 8 envs, seeds 0-7) 5 runs of 8 fell below 400 over the second half of 200k env
    steps; at 10 none did (learning_rate 1e-3), and 400 came within 56-106k env steps."""

    adam_epsilon: AdamEpsilon = 1e-3
    """Added to the root of Adam's average of squared gradients. Once the critic fits a solved
    policy's returns, the advantages and the gradients vanish (norms of 0.01 and below on
    CartPole-v1), and at 1e-5 Adam still moved every weight by about the step size along that
    noise until the policy fell (replayed with gradients 3 applies old, 1 run of 8 at 282 over the
    second half of 200k env steps, from 500); at 1e-3 such steps shrink with the gradients, and
    learning is as fast."""


class PPOHyperparameters(CriticHyperparameters):
    """Proximal policy optimization with the clipped surrogate objective."""

    learning_rate: StepSize = 3e-4
    """Adam step size (the start value when schedule is linear)."""

    rollout_length: StepsPerIteration = 128
    """Env steps taken by every env of every rollout worker per iteration."""

    gae_lambda: Fraction = 0.95
    """GAE lambda."""

    clip_range: PositiveFraction = 0.2
    """Clip parameter of the surrogate objective (the start value when schedule is linear)."""

    vf_coeff: Coefficient = 0.5
    """Weight of the value-function loss (the mean squared error, as vf_coef in Stable-Baselines3
    and vf_loss_coeff in RLlib)."""

    vf_clip_range: Positive | None = None
    """Clip value predictions to this distance from the old ones; null disables it."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss."""

    num_epochs: Epochs = 10
    """Passes of SGD over each iteration's batch."""

    minibatch_size: Count = 64
    """Samples per SGD minibatch (capped at the batch size)."""

    normalize_advantages: bool = True
    """Standardize advantages within each minibatch."""

    target_kl: Positive | None = None
    """Stop the epochs of an iteration early once the approximate KL exceeds this; null never
    stops early."""

    schedule: Literal["constant", "linear"] = "constant"
    """How learning_rate and clip_range evolve: linear decays both to zero at stop.timesteps."""

    initial_log_std: float = Field(0.0, ge=-5.0, le=2.0)
    """Starting log standard deviation of the Gaussian policy (continuous actions only)."""


class IMPALAHyperparameters(CriticHyperparameters):
    """Importance-weighted actor-learner architecture (Espeholt et al. 2018): an actor-critic that
    learns while the workers sample, correcting for their policy lag with V-trace.

    Defaults tuned on CartPole-v1: a return of 400 within 140-225k env steps on every seed tried
    with 2 workers of 8 envs (0-2), 2 of 16 (0-4) and 1 of 8 (0-2), where RLlib's defaults (entropy
    0.01, raw advantages) had not got there by 300k; with the entropy bonus that keeps 64 envs per
    worker from falling back (see entropy_coeff), 2 workers of 8 envs take 247-297k. Since the
    value network steps at 30 times the policy's rate (vf_learning_rate_ratio), 475 comes within
    122-219k env steps with 2 or 12 workers of 8 or 64 envs (seeds 0-7), where it took 182k-1.13M;
    the figures of the other fields were measured before."""

    learning_rate: StepSize = 5e-4
    """Adam step size (RLlib's IMPALA 5e-4). 1e-3 learned faster with 8 envs per worker (70-160k
    env steps to 400) but collapsed the policy to one action on 1 seed in 3 with 16, where the
    learner falls further behind the workers; 2e-3 collapsed it on every seed."""

    rollout_length: StepsPerIteration = 32
    """Env steps taken by every env of a worker per sample call; V-trace runs over sequences of
    this length (RLlib's rollout_fragment_length 50; 32 makes the learner's batches arrive
    sooner)."""

    train_batch_size: BatchSize = 500
    """Env steps per learner step: sample calls are concatenated until they hold at least this
    many (RLlib's train_batch_size 500)."""

    vf_coeff: Coefficient = 0.5
    """Weight of the value-function loss, 0.5 (vs - V)^2 (RLlib's vf_loss_coeff 0.5)."""

    vf_learning_rate_ratio: Positive = 30.0
    """Adam step size of the value network's own parameters, as a multiple of learning_rate (the
    value head's alone where a CNN encoder is shared). At 1x the critic followed CartPole's
    returns, which climb toward 100 at gamma 0.99, over thousands of learner steps: its loss
    stayed at 40-110 and the policy learned on advantages averaging +6 to +12 for hundreds of
    thousands of env steps. Env steps to 475 on CartPole-v1 (seeds 0-7, median and range), at 30x
    against 1x: 2 workers x 8 envs 142k (122-166k) against 310k (257-764k), 12 x 8 151k
    (131-170k) against 475k (230k-1.13M), 2 x 64 146k (137-158k) against 256k (182-300k), 12 x 64
    182k (146-219k) against 304k (219-390k). 10x and 100x did about as well (158k and 165k at
    2 x 8, 195k at 12 x 64)."""

    entropy_coeff: Coefficient = 1e-3
    """Weight of the entropy bonus in the loss (RLlib's IMPALA 0.01, 0 in its tuned CartPole
    example). Without it, IMPALA on CartPole with 64 envs per worker fell back from near 475 in
    most runs, and now and then stayed in a policy whose entropy kept falling (0.5 to 0.3 nats)
    while its envs failed in step at returns of 30-360: with 12 workers, 2 runs of 68 had not
    reached 475 at 4M env steps, and another took 2.97M (median 0.97M). With 1e-3, 28 runs of
    28 reached it within 0.27-1.50M (median 0.82M), and 2 workers x 64 envs within 232-479k
    (seeds 0-5; 363-449k without). It slows few envs a little: 2 workers x 8 envs at this step
    size reached 400 within 247-297k env steps (seeds 0-3; 138-211k without), and at a step size
    of 1e-3, 1 and 2 workers x 8 envs within 76-157k (seeds 0-5; 67-226k without); 0.01 had not
    reached 400 by 300k."""

    vtrace_clip_rho_threshold: Positive = 1.0
    """rho-bar: clip of the importance weights in the V-trace value targets (the paper's 1.0)."""

    vtrace_clip_pg_rho_threshold: Positive = 1.0
    """Clip of the importance weights in the policy gradient's advantages (the paper's 1.0)."""

    vtrace_clip_c_threshold: Positive = 1.0
    """c-bar: clip of the trace-cutting coefficients c_s in the V-trace recursion (the paper's
    1.0)."""

    normalize_advantages: bool = False
    """Standardize the V-trace advantages within each (mini)batch (RLlib's IMPALA and APPO do
    not). Off by default: once a task is solved the critic fits its returns and the advantages
    shrink toward 0 (to about 1e-4 on CartPole), and standardizing divides by that, so every
    learner step moves the policy a full step on noise until it falls apart."""

    max_grad_norm: GradClip = 40.0
    """Clip the global gradient norm to this value (RLlib's IMPALA grad_clip 40); null disables
    clipping."""

    adam_beta2: float = Field(0.99, gt=0.0, lt=1.0)
    """Adam's decay rate of its averages of squared gradients (torch's and RLlib's 0.999). At
    0.99 they follow the last hundred or so SGD steps instead of a thousand, so after a long
    solved stretch, whose gradients are near 0, the first failed episodes move the policy about as
    far as they would while learning, not several times as far."""

    minibatch_size: Count | None = None
    """Samples per SGD step: a learner batch larger than this is learned on in minibatches
    (RLlib's minibatch_size). Null (the default) lets the policy lag decide: a learner batch of
    R env steps that lags L learner steps (the mean over its sample calls) is learned on in
    k = min(R // train_batch_size, lag_sgd_steps // L) minibatches (at least 1), so that
    batches of little lag take more than one SGD step each, and batches that lag more take
    whole-batch steps. On CartPole with 64 envs per worker and lag_sgd_steps at 8: 2 workers (lag
    2-4, 2-4 minibatches) reached 475 within 198-498k env steps in 28 runs (median 287k, 24
    within 400k; seeds 0-5, alone and beside a CPU-bound process), where whole batches took
    585k-2M+. 12 workers on 2 cores, whose calls in flight AsyncSamples keeps to what the
    learner takes, lag 2-3 and take 1-2 minibatches (2-4 at 8)."""

    lag_sgd_steps: int = Field(4, ge=1, le=1000)
    """With minibatch_size null: the SGD steps a batch may lag, counting every minibatch of every
    pass as a step, that its minibatches and passes keep to (see minibatch_size). 4 keeps a
    solved policy on a busy node. There the learner waits for every batch and takes one worker's
    sample call at a time, about 2 learner steps old: at 8 it split each into 4 minibatches, so
    the learner went 8 SGD steps past the policy whose episodes it learned from, and once a
    solved policy's first episodes failed, its correction overshot and the return fell to 10-200
    (a delay in a feedback loop, and 4 steps of gain on each batch). Replayed deterministically
    at that lag (tests/trainer/test_solved_hold.py, 12 workers x 64 envs, 2M env steps, seeds
    0-5), 2 runs of 6 fell below a mean return of 450 over the second million at 8 (313, 409; at
    a lag of 0 every run held 482 or more), none at 4 (496-500, minima 457-499). Beside three
    CPU-bound processes, 12 workers x 64 envs held 498, 460, 500, 483 and 500, and 2 x 64 held
    499, 500, 500, 494 and 497 (seeds 0-4). It
    costs a little speed on an idle machine: 475 within 245-342k env steps with 12 workers x 64
    envs (170-268k at 8) and 172-395k with 2 x 64 (213-248k), seeds 0-2. With 16, 2 workers x 64
    envs on an idle machine (lag about 4, 4 minibatches) collapsed the policy to returns near 10
    on their way and took 483k-1M+ env steps to 475 (seeds 0-5); with 32, 12 workers x 64 envs
    all sampling at once (lag 12-13) took 2 minibatches per batch and the policy fell apart
    (returns of 110 and 194 after 3M env steps, seeds 0-1)."""


class APPOHyperparameters(IMPALAHyperparameters):
    """Asynchronous PPO: PPO's clipped surrogate on IMPALA's execution, with V-trace targets.

    IMPALA's defaults plus several clipped epochs of minibatches per batch: on CartPole-v1 a return
    of 400 within 70-95k env steps on seeds 0-2 with 1 and 2 workers (one epoch: 80-220k), on
    Pendulum-v1 (gamma 0.9) -300 within 150-200k, where one epoch, or four of whole-batch steps,
    had not got there by 400k (seed 0). On Pendulum the return fell back from near -300 in 2 of
    12 runs; clipped at 0.2 instead, 14 runs of 14 reached -300 within 124-245k. With the value
    network stepping at 30 times the policy's rate (vf_learning_rate_ratio; seeds 0-7 on
    CartPole, 0-3 on Pendulum): 475 on CartPole with 2 workers of 8 envs within 17-38k env steps
    (median 31k; 41-110k, median 86k, before), with 12 of 64 within 73-147k (median 73k; 73-147k,
    median 122k, before); -300 on Pendulum (2 x 8, clip 0.2) within 78-129k (151-278k before).
    Those figures were measured with 4 full passes of 128-sample minibatches: see minibatch_size
    for what keeping the passes within the lag costs, and why."""

    learning_rate: StepSize = 1e-3
    """Adam step size (RLlib's APPO 5e-4): the clipped surrogate keeps 1e-3 stable, at 70-100k
    env steps to 400 on CartPole-v1 with 2 workers of 8 or 16 envs."""

    clip_range: PositiveFraction = 0.4
    """Clip parameter of the surrogate objective (RLlib's APPO clip_param 0.4)."""

    entropy_coeff: Coefficient = 0.0
    """Weight of the entropy bonus in the loss (0 as in RLlib's tuned CartPole example). The
    clipped surrogate keeps APPO's policy from the falls that IMPALA's bonus guards against:
    APPO's measured figures (its docstrings, and 12 workers x 64 envs at 344-440k env steps to
    475) were taken without one."""

    num_epochs: Epochs = 4
    """Passes of SGD over each learner batch, each with V-trace targets from the current
    networks: IMPACT's replay coefficient K, the draws of each batch from its circular buffer
    (RLlib's APPO circular_buffer_iterations_per_batch 2, its tuned CartPole examples 6). With
    minibatch_size null, at most as many as lag_sgd_steps allows: a batch that lags takes fewer."""

    minibatch_size: Count | None = None
    """Samples per SGD minibatch (capped at the learner batch), or null to learn on each batch in
    as many minibatches and passes (up to num_epochs) as its lag allows, as IMPALA's null does
    (see lag_sgd_steps). Null keeps a solved policy on a busy node. At 128, a worker's sample call
    of 64 envs took 16 minibatches in each of 4 passes, 64 SGD steps, and replayed at the lag of
    a busy node (tests/trainer/test_solved_hold.py: 12 workers x 64 envs, a lag of 2, 2M env
    steps, seeds 0-5) 4 runs of 6 fell below a mean return of 450 over the second million
    (141-296, minima 9-62); with null and 4 full passes of 2 minibatches, 1 of 6 (334); with
    null, 2 passes and 2 minibatches, 2 of 6 (440, 414); within the lag (1 pass of 2
    minibatches there), none (499-500, minima 493-500). It costs speed where the lag is short
    and many SGD steps per batch were safe: on an idle machine, 475 within 55-80k env steps
    with 2 workers x 8 envs (28-60k at 128) and 146-222k with 12 x 64 (98-124k), seeds 0-2."""

    target_update_interval: Count | None = None
    """IMPACT's target network, the surrogate's reference policy: learner steps between its
    refreshes (RLlib's APPO: every 32 train batches learned on). Null (the default) has no target
    network: the ratio is to the behaviour policy that sampled the batch. Measured on CartPole with
    12 workers x 64 envs, a target refreshed after every learner step took 612k env steps to 475
    where the behaviour policy took 418-440k (seeds 0-2), and on Pendulum (2 x 8, clip 0.2) it
    missed -300 in 400k steps on 1 seed of 3, where the behaviour policy reached it within
    166-262k on all three."""
