"""GAE and n-step returns against values worked out by hand."""

import numpy as np
import pytest

from kuberl_trainer.policies.postprocessing import compute_gae, compute_n_step, discounted_returns

GAMMA, LAM = 0.9, 0.8
REWARDS = np.array([[1.0], [2.0], [3.0]], np.float32)
VALUES = np.array([[0.5], [1.0], [1.5]], np.float32)
NEXT_VALUES = np.array([[1.0], [1.5], [2.0]], np.float32)
NO = np.zeros((3, 1), bool)


def flags(step: int) -> np.ndarray:
    out = NO.copy()
    out[step, 0] = True
    return out


def test_gae_without_episode_ends():
    # deltas: 1 + .9*1 - .5 = 1.4;  2 + .9*1.5 - 1 = 2.35;  3 + .9*2 - 1.5 = 3.3
    # A2 = 3.3;  A1 = 2.35 + .72*3.3 = 4.726;  A0 = 1.4 + .72*4.726 = 4.80272
    adv, targets = compute_gae(REWARDS, VALUES, NEXT_VALUES, NO, NO, GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 0], [4.80272, 4.726, 3.3], rtol=1e-5)
    np.testing.assert_allclose(targets[:, 0], [5.30272, 5.726, 4.8], rtol=1e-5)


def test_gae_termination_neither_bootstraps_nor_leaks_across():
    # terminated at t=1: delta1 = 2 - 1 = 1 (no bootstrap), A1 = 1; A0 = 1.4 + .72*1 = 2.12
    adv, _ = compute_gae(REWARDS, VALUES, NEXT_VALUES, flags(1), NO, GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 0], [2.12, 1.0, 3.3], rtol=1e-5)


def test_gae_truncation_bootstraps_from_the_final_observation_only():
    # truncated at t=1: delta1 = 2 + .9*1.5 - 1 = 2.35 but the recursion stops there
    adv, _ = compute_gae(REWARDS, VALUES, NEXT_VALUES, NO, flags(1), GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 0], [1.4 + 0.72 * 2.35, 2.35, 3.3], rtol=1e-5)


def test_gae_envs_are_independent():
    rewards = np.hstack([REWARDS, REWARDS])
    values, next_values = np.hstack([VALUES, VALUES]), np.hstack([NEXT_VALUES, NEXT_VALUES])
    terminated = np.hstack([NO, flags(1)])
    adv, _ = compute_gae(rewards, values, next_values, terminated, np.hstack([NO, NO]), GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 0], [4.80272, 4.726, 3.3], rtol=1e-5)
    np.testing.assert_allclose(adv[:, 1], [2.12, 1.0, 3.3], rtol=1e-5)


def test_discounted_returns_reset_at_episode_end():
    # episode ends at t=1: G1 = 2, G0 = 1 + .9*2 = 2.8; G2 = 3 (cut by the window)
    returns = discounted_returns(REWARDS, flags(1), NO, GAMMA)
    np.testing.assert_allclose(returns[:, 0], [2.8, 2.0, 3.0], rtol=1e-6)


ONES = np.ones((4, 1), np.float32)
NO4 = np.zeros((4, 1), bool)


def test_n_step_window_shrinks_at_the_end_of_the_sample():
    returns, last, discounts = compute_n_step(ONES, NO4, NO4, 0.5, 2)
    np.testing.assert_allclose(returns[:, 0], [1.5, 1.5, 1.5, 1.0])
    np.testing.assert_array_equal(last[:, 0], [1, 2, 3, 3])
    np.testing.assert_allclose(discounts[:, 0], [0.25, 0.25, 0.25, 0.5])


def test_n_step_termination_zeroes_the_bootstrap():
    terminated = NO4.copy()
    terminated[1, 0] = True
    returns, last, discounts = compute_n_step(ONES, terminated, NO4, 0.5, 2)
    np.testing.assert_allclose(returns[:, 0], [1.5, 1.0, 1.5, 1.0])
    np.testing.assert_array_equal(last[:, 0], [1, 1, 3, 3])
    np.testing.assert_allclose(discounts[:, 0], [0.0, 0.0, 0.25, 0.5])


def test_n_step_truncation_bootstraps_early():
    truncated = NO4.copy()
    truncated[0, 0] = True
    returns, last, discounts = compute_n_step(ONES, NO4, truncated, 0.5, 3)
    np.testing.assert_allclose(returns[:, 0], [1.0, 1.75, 1.5, 1.0])
    np.testing.assert_array_equal(last[:, 0], [0, 3, 3, 3])
    np.testing.assert_allclose(discounts[:, 0], [0.5, 0.125, 0.25, 0.5])


@pytest.mark.parametrize("n", [1, 3])
def test_one_step_is_the_plain_transition(n):
    rewards = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    no = np.zeros((5, 2), bool)
    returns, last, discounts = compute_n_step(rewards, no, no, 0.99, n)
    if n == 1:
        np.testing.assert_allclose(returns, rewards)
        np.testing.assert_array_equal(last, np.repeat(np.arange(5)[:, None], 2, 1))
        np.testing.assert_allclose(discounts, 0.99)
    else:
        np.testing.assert_allclose(
            returns[0], rewards[0] + 0.99 * rewards[1] + 0.99**2 * rewards[2], rtol=1e-5
        )
