"""A preempted driver (SIGTERM) checkpoints within its grace period even when the iteration in
progress would take minutes: the iteration is dropped at its next wait for samples, the last
completed one is saved, and a new driver resumes from it with no completed iteration lost. A
second signal lets a checkpoint being written finish within the grace period."""

import io
import itertools
import os
import signal
import threading
import time

import pytest
from rich.console import Console

from kuberl_contract.config import RolloutConfig
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.progress import ConsoleReport
from testkit import progress_rows, trainer_config, wait_until

ROLLOUT = 16
GRACE = 10  # seconds; the slow iteration would take 600


def config(tmp_path, fast_steps: int, **stop):
    """PPO on a CartPole whose steps after `fast_steps` sleep 600 s each."""
    env_config = {"fast_steps": fast_steps, "slow_file": str(tmp_path / "slow-step-began")}
    return trainer_config(
        algorithm="PPO",
        env="custom_envs:SlowCartPole",
        envConfig=env_config,
        hyperparameters={"rollout_length": ROLLOUT, "num_epochs": 1, "minibatch_size": ROLLOUT},
        stop=stop or {"iterations": 100},
        checkpoint={"everyIterations": 1000, "gracePeriodSeconds": GRACE},
    )


def quiet_report() -> ConsoleReport:
    return ConsoleReport("job", None, Console(file=io.StringIO()))


def messages(report: ConsoleReport) -> str:
    return report.console.file.getvalue()


def signal_when(condition, *signals: signal.Signals) -> tuple[threading.Thread, list[float]]:
    """A thread sending `signals` to this process, one after the other, once `condition()`
    holds; the times they were sent (time.monotonic) go into the list."""
    sent: list[float] = []

    def send():
        wait_until(condition, timeout=120, what="the moment to signal")
        for signum in signals:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signum)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, sent


@pytest.mark.parametrize("replicas", [0, 1], ids=["local-sampling", "remote-worker"])
def test_sigterm_in_a_long_iteration_checkpoints_within_the_grace_period_and_a_rerun_resumes(
    request, tmp_path, replicas
):
    if replicas:
        request.getfixturevalue("ray_local")  # the Driver joins the session's Ray
    rollout = RolloutConfig(replicas=replicas, envs_per_worker=1, cpus_per_worker=0.5)
    slow_step = tmp_path / "slow-step-began"
    run_dir = tmp_path / "run"
    report = quiet_report()
    # One fast iteration, then a slow step: signalled while the driver waits in it.
    thread, sent = signal_when(slow_step.exists, signal.SIGTERM)
    result = Driver(config(tmp_path, ROLLOUT), rollout, run_dir, "job", report=report).run()
    stopped = time.monotonic()
    thread.join()

    assert result.interrupted and result.stopped_by == "SIGTERM"
    assert stopped - sent[0] < GRACE, messages(report)
    assert result.iteration == 1 and result.checkpoint is not None
    assert "Iteration 2 dropped unfinished; checkpointing iteration 1" in messages(report)
    assert [row["iteration"] for row in progress_rows(run_dir)] == [1]

    # The next driver resumes from that checkpoint: no completed iteration lost.
    rerun = Driver(config(tmp_path, 10**9, iterations=2), rollout, run_dir, "job").run()
    assert rerun.resumed_from == result.checkpoint and rerun.iteration == 2
    rows = progress_rows(run_dir)
    assert [row["iteration"] for row in rows] == [1, 2]
    # ROLLOUT steps an iteration, less the steps that only reset the env after an episode
    this_iter = [row["timesteps_this_iter"] for row in rows]
    assert all(0.8 * ROLLOUT <= steps <= ROLLOUT for steps in this_iter), this_iter
    assert [row["timesteps_total"] for row in rows] == list(itertools.accumulate(this_iter))


def signalling_again_while_saving(monkeypatch, after_s: float = 0.0) -> None:
    """Make the checkpoint after the first signal receive a second SIGTERM `after_s` into its
    writing (a slow store)."""
    save = Driver._save

    def save_signalled_again(driver, *args):
        time.sleep(after_s)
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, before this thread goes on
        return save(driver, *args)

    monkeypatch.setattr(Driver, "_save", save_signalled_again)


def test_a_second_signal_lets_the_checkpoint_being_written_finish(tmp_path, monkeypatch):
    signalling_again_while_saving(monkeypatch)
    thread, _ = signal_when((tmp_path / "slow-step-began").exists, signal.SIGTERM)
    report = quiet_report()
    rollout = RolloutConfig(envs_per_worker=1)
    result = Driver(
        config(tmp_path, ROLLOUT), rollout, tmp_path / "run", "job", report=report
    ).run()
    thread.join()
    assert result.interrupted and result.iteration == 1 and result.checkpoint is not None
    assert "SIGTERM received again: finishing the checkpoint being written" in messages(report)


def test_a_second_signal_past_the_grace_period_stops_at_once(tmp_path, monkeypatch):
    grace = 1
    signalling_again_while_saving(monkeypatch, after_s=grace + 0.1)
    thread, _ = signal_when((tmp_path / "slow-step-began").exists, signal.SIGTERM)
    job = config(tmp_path, ROLLOUT)
    job = job.model_copy(
        update={"checkpoint": job.checkpoint.model_copy(update={"grace_period_seconds": grace})}
    )
    with pytest.raises(KeyboardInterrupt):
        Driver(job, RolloutConfig(envs_per_worker=1), tmp_path / "run", "job").run()
    thread.join()
