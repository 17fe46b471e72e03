"""The progress line people read: the steps against the stop, the stop that binds with its ETA,
the rate over the run, and columns dropped by importance to fit a width."""

from __future__ import annotations

from kuberl_contract.config import StopConditions
from kuberl_trainer.job.progress_line import RunStart, binding_stop, fit, progress_line


def row(iteration: int, timesteps: int, seconds: float, **more) -> dict:
    """A progress row of iterations of 1,000 steps in 0.5 s."""
    return {
        "iteration": iteration,
        "timesteps_total": timesteps,
        "timesteps_this_iter": 1_000,
        "time_total_s": seconds,
        "time_this_iter_s": 0.5,
        "episode_return_mean": 123.4,
        **more,
    }


# A run resumed at 10,000 steps and 100 s: its own 5 iterations took 5,000 steps in 2.5 s.
FIRST = row(11, 11_000, 100.5)
NOW = row(15, 15_000, 102.5)


def test_the_rate_is_over_this_run_only():
    start = RunStart.before(FIRST)
    assert (start.timesteps, start.seconds, start.iteration) == (10_000, 100.0, 10)
    assert start.steps_per_s(NOW) == 2_000.0
    assert start.seconds_per_iteration(NOW) == 0.5


def test_the_budget_reached_first_binds_with_its_eta():
    start = RunStart.before(FIRST)
    steps = binding_stop(StopConditions(timesteps=35_000, iterations=100), NOW, start)
    assert (steps.name, steps.fraction, steps.eta_s) == ("timesteps", 15_000 / 35_000, 10.0)

    iterations = binding_stop(StopConditions(timesteps=35_000, iterations=19), NOW, start)
    assert (iterations.name, iterations.eta_s) == ("iterations", 2.0)

    wall = binding_stop(StopConditions(timesteps=35_000, wall_time_seconds=105), NOW, start)
    assert (wall.name, wall.eta_s) == ("wall time", 2.5)

    target = binding_stop(StopConditions(episode_return_mean=475), NOW, start)
    assert (target.name, target.fraction, target.eta_s) == ("return 475", None, None)


def test_the_line_shows_the_steps_against_the_stop_and_when_it_ends():
    stop = StopConditions(timesteps=50_000, episode_return_mean=475)
    line = progress_line({**NOW, "evaluation_return_mean": 200.0}, stop, RunStart.before(FIRST))
    assert line == (
        "iter 15  15,000 / 50,000 steps  return 123.4 / 475  eval 200.0  2,000 steps/s"
        "  ETA 0:00:18 (timesteps)"
    )
    only_target = progress_line(
        NOW, StopConditions(episode_return_mean=475), RunStart.before(FIRST)
    )
    assert only_target.endswith("2,000 steps/s  until return 475")


def test_a_narrow_line_drops_the_least_important_columns_but_never_the_steps():
    stop = StopConditions(timesteps=50_000)
    start = RunStart.before(FIRST)
    whole = progress_line(NOW, stop, start)
    assert progress_line(NOW, stop, start, width=len(whole)) == whole
    assert progress_line(NOW, stop, start, width=70) == (
        "15,000 / 50,000 steps  return 123.4  ETA 0:00:18 (timesteps)"
    )
    assert progress_line(NOW, stop, start, width=10) == "15,000 / 50,000 steps"
    assert fit([(1, "b"), (0, "a"), (2, "c")], width=4) == "b  a"


def test_an_evaluation_whose_confirmation_did_not_hold_says_so():
    stop = StopConditions(timesteps=50_000, evaluation_return_mean=475)
    start = RunStart.before(FIRST)
    held = {"evaluation_return_mean": 478.1, "evaluation_confirmed": True}
    assert "eval 478.1 / 475" in progress_line({**NOW, **held}, stop, start)
    failed = held | {"evaluation_confirmed": False}
    assert "eval 478.1 unconfirmed / 475" in progress_line({**NOW, **failed}, stop, start)


def test_self_play_shows_its_win_rate_and_the_first_baselines():
    stop = StopConditions(timesteps=50_000)
    start = RunStart.before(FIRST)
    rates = {"win_rate": 0.625, "baseline_win_rates": {"random": 0.93, "mod:Blocker": 0.2}}
    line = progress_line({**NOW, **rates}, stop, start)
    assert "won 62% (93% vs random)" in line and "Blocker" not in line
    assert "won" not in progress_line({**NOW, "win_rate": None}, stop, start)
