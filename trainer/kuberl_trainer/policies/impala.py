"""IMPALA (Espeholt et al. 2018): an actor-critic whose learner corrects for the lag between the
policy that sampled a batch and its own with V-trace.

Workers record the behaviour policy's log-probabilities; the learner recomputes log-probabilities
and values with its current networks, so every learner step works with fresh targets however old
the batch. That needs whole sequences: a worker's batch is laid out env-major, row n*T + t for
env n and step t (T = rollout_length), and since SampleBatch.concat stacks rows, any concatenation
of batches reshapes back to (-1, T) sequences. The envs' reset steps stay in them to keep them
whole, marked by the `valid` column: an episode's end already cuts the recursion before one, and
the learner drops them once the targets are computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from kuberl_contract.progress_row import (
    ADVANTAGE_STD,
    ENTROPY,
    GRAD_NORM,
    IMPORTANCE_RATIO_MAX,
    POLICY_LOSS,
    SGD_STEPS,
    VF_LOSS,
)
from kuberl_trainer.policies.actor_critic import ActorCriticPolicy
from kuberl_trainer.policies.base import TensorStats, mean_stats
from kuberl_trainer.policies.interface import Stats
from kuberl_trainer.policies.postprocessing import sequence_columns
from kuberl_trainer.policies.sample_batch import VALID, SampleBatch

if TYPE_CHECKING:
    from kuberl_contract.config import AnyTrainerConfig
    from kuberl_trainer.envs.spaces import SpaceInfo


def pg_weights(log_rhos: torch.Tensor, pg_rho_bar: float) -> torch.Tensor:
    """The policy gradient's importance weights, min(pg_rho_bar, pi/mu)."""
    return log_rhos.exp().clamp(max=pg_rho_bar)


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
    weighted: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages over time-major (T, B) sequences.

    `log_rhos` is log pi(a|x) - log mu(a|x) (target minus behaviour policy); `next_values[t]` is
    V of the observation after step t, as for compute_gae (the final observation where an episode
    ended). The paper's recursion (eq. 1, written backwards):

        v_s - V(x_s) = rho_s (r_s + gamma V(x_s+1) - V(x_s)) + gamma c_s (v_s+1 - V(x_s+1))

    with rho_s = min(rho_bar, pi/mu) and c_s = min(c_bar, pi/mu). An episode's end stops the
    recursion (a terminated step does not bootstrap, a truncated one bootstraps from its final
    observation), and past the window v_T = V(x_T). The advantage is
    min(pg_rho_bar, pi/mu) (r_s + gamma v_s+1 - V(x_s)), or without the min(...) factor when not
    `weighted` (see pg_weights). Returns (vs, pg_advantages).
    """
    rhos = log_rhos.exp()
    not_terminated = (~terminateds).to(values.dtype)
    continues = (~(terminateds | truncateds)).to(values.dtype)
    deltas = rhos.clamp(max=rho_bar) * (rewards + gamma * not_terminated * next_values - values)
    decay = gamma * rhos.clamp(max=c_bar) * continues
    corrections = discounted_sums(deltas, decay)  # v_s - V(x_s)
    vs = values + corrections
    # v_s+1 where the episode goes on inside the window; V(next observation) elsewhere.
    next_vs = next_values.clone()
    next_vs[:-1] += continues[:-1] * corrections[1:]
    pg_advantages = rewards + gamma * not_terminated * next_vs - values
    if weighted:
        pg_advantages *= pg_weights(log_rhos, pg_rho_bar)
    return vs, pg_advantages


# The matrix form below costs O(T^2 B) against the loop's T steps of a few microseconds each, so
# it pays only on short, narrow windows. Measured on a 2-core CPU (torch 2.13, 1 thread; 2
# threads alike or better for the matrix), loop vs matrix in microseconds: T=32 B=16 150 vs 51,
# T=20 B=64 101 vs 63, T=8 B=64 42 vs 27, T=64 B=32 305 vs 294 (even), T=50 B=64 245 vs 365,
# T=8 B=768 43 vs 99, T=20 B=768 101 vs 1,490, T=128 B=16 600 vs 1,440.
MATRIX_MAX_STEPS = 64
MATRIX_MAX_STEPS_TIMES_SEQUENCES = 2048


def discounted_sums(deltas: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """x_s = deltas_s + decay_s x_s+1 over time-major (T, B) columns, with x_T = 0."""
    horizon, sequences = deltas.shape
    if horizon <= MATRIX_MAX_STEPS and horizon * sequences <= MATRIX_MAX_STEPS_TIMES_SEQUENCES:
        return _discounted_sums_by_matrix(deltas, decay)
    sums = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(horizon - 1, -1, -1):
        running = deltas[t] + decay[t] * running
        sums[t] = running
    return sums


def _discounted_sums_by_matrix(deltas: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """The same sums unrolled, x_s = sum_t>=s (prod_{i=s}^{t-1} decay_i) deltas_t, with the
    products of every (s, t) from one cumulative product: never a division, since a decay is 0
    wherever an episode ends."""
    horizon = len(deltas)
    ahead = torch.ones(horizon, horizon, dtype=torch.bool, device=deltas.device).triu()
    # products[s, t] = prod_{i=s}^{t} decay_i where t >= s (row s multiplies ones before s)
    products = torch.where(ahead[..., None], decay, 1.0).cumprod(1)
    # deltas_t for t > s weighs prod_{i=s}^{t-1} = products[s, t-1]; t = s weighs 1
    discounts = products[:, :-1] * ahead[:, :-1, None]
    return deltas + (discounts * deltas[1:]).sum(1)


@torch.no_grad()
def vtrace_stats(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What shows a solved policy about to be lost, on a (mini)batch's learnable rows: the scale
    of its V-trace advantages before any standardization, and the largest importance ratio pi/mu
    (from the reference policy, as V-trace takes it)."""
    advantages = batch["advantages"]
    spread = advantages.std() if len(advantages) > 1 else advantages.new_zeros(())
    return {
        ADVANTAGE_STD: spread,
        IMPORTANCE_RATIO_MAX: (batch["reference_logp"] - batch["logp"]).max().exp(),
    }


LEARNABLE_ROWS = "learnable_rows"  # batch_tensors' indices of the rows that are transitions


class IMPALAPolicy(ActorCriticPolicy):
    LEARNS_ON_WHOLE_ROLLOUTS = True  # vtrace_from reshapes by rollout_length
    STAT_KEYS = (
        POLICY_LOSS,
        VF_LOSS,
        ENTROPY,
        GRAD_NORM,
        SGD_STEPS,
        ADVANTAGE_STD,
        IMPORTANCE_RATIO_MAX,
    )
    values_while_acting = False  # V-trace takes the learner's values, never the behaviour's
    # A learn call of one whole-batch SGD step shares its forward pass with V-trace (APPO's
    # V-trace takes the target network's log-probabilities: it cannot).
    one_forward = True

    def __init__(self, spaces: SpaceInfo, config: AnyTrainerConfig, seed: int):
        super().__init__(spaces, config, seed)
        self.optimizer.beta2 = self.hp.adam_beta2

    def postprocess_trajectory(self, rollout: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return sequence_columns(rollout, self._logp(rollout["dist_inputs"], rollout["actions"]))

    def learn_on_batch(self, batch: SampleBatch) -> Stats:
        transitions = batch.env_steps
        passes, splits = self.sgd_plan(transitions, batch.policy_lag)
        return self.learn_on_tensors(self.batch_tensors(batch), transitions, splits, passes)

    def sgd_plan(self, transitions: int, policy_lag: float) -> tuple[int, int]:
        """(passes, minibatches per pass) over a batch of `transitions` env steps lagging
        `policy_lag` learner steps: num_epochs passes (IMPALA: 1) of minibatch_size rows, or with
        minibatch_size null as many of each as lag_sgd_steps allows, counting every minibatch of
        every pass as a step (see IMPALAHyperparameters.minibatch_size): minibatches of at least
        train_batch_size rows first, then passes."""
        epochs = getattr(self.hp, "num_epochs", 1)
        if self.hp.minibatch_size:
            return epochs, max(1, transitions // self.hp.minibatch_size)
        within_lag = max(1, int(self.hp.lag_sgd_steps // max(1.0, policy_lag)))
        splits = max(1, min(transitions // self.hp.train_batch_size, within_lag))
        return max(1, min(epochs, within_lag // splits)), splits

    def batch_tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The batch's columns on the device in one transfer (minibatches are cut there), with
        the indices of its learnable rows, found on the host: selecting by a boolean mask on
        the device would wait for it to count the rows, once per column and pass."""
        tensors = self.as_tensors(batch.columns)
        tensors[LEARNABLE_ROWS] = self.as_tensor(np.flatnonzero(batch[VALID]))
        return tensors

    def learn_on_tensors(
        self, tensors: dict[str, torch.Tensor], transitions: int, splits: int, passes: int = 1
    ) -> Stats:
        """`passes` passes of SGD over a batch of `transitions` env steps in `splits` minibatches,
        each pass with V-trace targets from the current networks (V-trace needs whole sequences,
        so they are computed for the whole batch; the minibatches can then take any rows)."""
        if self.one_forward and splits == 1 and passes == 1 and self.towers is None:
            return mean_stats([self.whole_batch_step(tensors)]) | {SGD_STEPS: 1.0}
        steps: list[TensorStats] = []
        for _ in range(passes):
            epoch = self.learnable_rows(tensors)
            if splits == 1:
                minibatches = [epoch]
            else:
                order = self.as_tensor(self.rng.permutation(transitions))
                minibatches = [
                    {k: v[rows] for k, v in epoch.items()}
                    for rows in torch.tensor_split(order, splits)
                ]
            steps += [self.sgd_step(minibatch) for minibatch in minibatches]
        return mean_stats(steps) | {SGD_STEPS: float(len(steps))}

    def whole_batch_step(self, batch: dict[str, torch.Tensor]) -> TensorStats:
        """One SGD step on the whole batch, whose forward pass also gives V-trace its inputs:
        the targets come from the networks before the step either way, so this saves the
        separate pass without gradients, two of a learn call's three forward passes."""
        logp, entropy, values = self.model.logp_entropy_value(batch["obs"], batch["actions"])
        with torch.no_grad():
            learnable = self.learnable_rows(batch, self.vtrace_from(batch, logp, values))
        rows = batch[LEARNABLE_ROWS]
        loss, stats = self.loss_of(learnable, logp[rows], entropy[rows], values[rows])
        stats = self.backward(loss, stats)
        self.optimizer.step()
        return stats

    def learnable_rows(
        self, batch: dict[str, torch.Tensor], targets: dict[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """The batch's transitions with their V-trace targets (`targets`, or vtrace_targets with
        the current networks): the reset steps left out."""
        rows = batch[LEARNABLE_ROWS]
        columns = batch | (self.vtrace_targets(batch) if targets is None else targets)
        return {k: v[rows] for k, v in columns.items() if k != LEARNABLE_ROWS}

    def vtrace_targets(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`value_targets` (vs), `advantages` and `pg_weights` of every row, with the current
        value network and the reference policy (`reference_logp`, also returned)."""
        with torch.no_grad():
            logp, _ = self.reference_policy.logp_entropy(batch["obs"], batch["actions"])
            return self.vtrace_from(batch, logp, self.model.value(batch["obs"]))

    def vtrace_from(
        self, batch: dict[str, torch.Tensor], logp: torch.Tensor, values: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """vtrace_targets from the reference policy's log-probabilities and the values of every
        row's observation. A step's next observation is the next step's observation (a worker's
        rollout is one array of observations, and an episode's reset step keeps its final one),
        so only the last step of each sequence needs a value of its own."""
        length = self.hp.rollout_length

        def time_major(column: torch.Tensor) -> torch.Tensor:
            return column.reshape(-1, length).T

        last_next_obs = batch["next_obs"].reshape(-1, length, *batch["next_obs"].shape[1:])[:, -1]
        next_values = torch.cat(
            [values.reshape(-1, length)[:, 1:], self.model.value(last_next_obs)[:, None]], dim=1
        ).reshape(-1)
        log_rhos = logp - batch["logp"]
        vs, advantages = vtrace(
            time_major(log_rhos),
            time_major(batch["rewards"]),
            time_major(values),
            time_major(next_values),
            time_major(batch["terminateds"]),
            time_major(batch["truncateds"]),
            self.hp.gamma,
            self.hp.vtrace_clip_rho_threshold,
            self.hp.vtrace_clip_c_threshold,
            self.hp.vtrace_clip_pg_rho_threshold,
            weighted=False,
        )
        return {
            "value_targets": vs.T.reshape(-1),
            "advantages": advantages.T.reshape(-1),
            "pg_weights": pg_weights(log_rhos, self.hp.vtrace_clip_pg_rho_threshold),
            "reference_logp": logp,
        }

    @property
    def reference_policy(self) -> nn.Module:
        """The policy V-trace corrects the behaviour policy towards: the one being learned
        (APPO: its target network)."""
        return self.model

    def advantages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The (mini)batch's V-trace advantages, min(pg_rho_bar, pi/mu)
        (r_s + gamma v_s+1 - V(x_s)).

        With normalize_advantages, the unweighted advantages are standardized before the
        importance weights multiply them: standardized after, a step the learner's policy has
        all but given up (weight near 0) would get the advantage -mean/std instead of about 0,
        pushing that action further down whenever the mean is positive; with many workers (a
        larger lag, smaller weights) that feedback collapsed CartPole's policy to one action."""
        advantages = batch["advantages"]
        if self.hp.normalize_advantages and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return batch["pg_weights"] * advantages

    def loss(self, batch: dict[str, torch.Tensor]):
        logp, entropy, values = self.model.logp_entropy_value(batch["obs"], batch["actions"])
        return self.loss_of(batch, logp, entropy, values)

    def loss_of(
        self,
        batch: dict[str, torch.Tensor],
        logp: torch.Tensor,
        entropy: torch.Tensor,
        values: torch.Tensor,
    ):
        """The loss given the networks' outputs on the batch's rows."""
        policy_loss = -(self.advantages(batch) * logp).mean()
        vf_loss = 0.5 * (batch["value_targets"] - values).pow(2).mean()
        entropy = entropy.mean()
        total = policy_loss + self.hp.vf_coeff * vf_loss - self.hp.entropy_coeff * entropy
        return total, {
            POLICY_LOSS: policy_loss.detach(),
            VF_LOSS: vf_loss.detach(),
            ENTROPY: entropy.detach(),
            **vtrace_stats(batch),
        }
