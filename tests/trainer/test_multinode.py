"""Spot training on a multi-node Ray on loopback (tests/multinode.py): `kuberl train` joins the
cluster as the operator runs it, its two rollout workers pinned to the spot nodes. A spot node lost
mid-training costs speed, not the run; a preempted driver checkpoints within its grace period and
the next one resumes with no completed iteration lost. Both runs reach a return of THRESHOLD.

Budget: THRESHOLD within BUDGET env steps (PPO reaches it in about 30k here)."""

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from multinode import loopback_ray, ray_cluster  # noqa: F401 (fixtures)

from kuberl_contract.final_record import Outcome, read_final_record
from testkit import rljob, wait_until

pytestmark = pytest.mark.slow

KUBERL = Path(sys.executable).with_name("kuberl")
THRESHOLD = 150.0
BUDGET = 150_000
ROLLOUT, ENVS = 64, 8  # per worker and iteration: 512 env steps
# An iteration's batch, however many of the two workers sample it (less a few reset steps).
BATCH = ROLLOUT * ENVS * 2
WAIT_S = 300  # for anything a loaded 2-core machine does in tens of seconds


def write_job(path: Path, stop: dict, grace_s: int = 20) -> Path:
    """PPO on CartPole with two 1-CPU rollout workers on the spot nodes."""
    trainer = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "seed": 0,
        "hyperparameters": ppo_hyperparameters(ROLLOUT),
        "stop": stop,
        "checkpoint": {"everyIterations": 10_000, "gracePeriodSeconds": grace_s},
    }
    path.write_text(yaml.safe_dump(spot_rljob(trainer, replicas=2)))
    return path


def ppo_hyperparameters(rollout_length: int) -> dict:
    """PPO settings that reach THRESHOLD on CartPole within tens of thousands of env steps."""
    return {
        "rollout_length": rollout_length,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "num_epochs": 10,
        "minibatch_size": 256,
        "learning_rate": 0.001,
    }


def spot_rljob(trainer: dict, **rollout_workers) -> dict:
    """An RLJob whose 1-CPU rollout workers, ENVS envs each, are pinned to the spot nodes;
    `rollout_workers` adds to (or overrides) its rolloutWorkers."""
    workers = {
        "envsPerWorker": ENVS,
        "cpusPerWorker": 1,
        "spot": {"enabled": True, "provider": "gke"},
        "rayResources": {"spot": 1},
        **rollout_workers,
    }
    return rljob("job", trainer=trainer, rolloutWorkers=workers)


@dataclass
class TrainProcess:
    """`kuberl train` as the operator runs it, its output in a file (Ray's worker logs go to the
    driver's output: a pipe nobody reads would fill up and block it)."""

    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        """The output so far (the process killed first if it still runs)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        return self.log.read_text(errors="replace")


def start(job: Path, run_dir: Path, env: dict[str, str]) -> TrainProcess:
    log = job.with_suffix(".log")
    command = [str(KUBERL), "train", str(job), "--run-dir", str(run_dir)]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return TrainProcess(process, log)


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for_row(run_dir: Path, driver: TrainProcess, what: str, condition) -> dict:
    """The first progress row meeting `condition` (all rows so far are checked each time)."""

    def found():
        ended = driver.process.poll() is not None
        assert not ended, f"the driver ended waiting for {what}:\n{driver.output()[-5000:]}"
        return next((row for row in rows(run_dir) if condition(row)), None)

    return wait_until(found, timeout=WAIT_S, what=what, interval=0.2)


def stop_with_sigterm(driver: TrainProcess) -> float:
    """SIGTERM the driver; the seconds it took to checkpoint and exit."""
    sent = time.monotonic()
    driver.process.send_signal(signal.SIGTERM)
    driver.process.wait(timeout=WAIT_S)
    took = time.monotonic() - sent
    assert driver.process.returncode == 128 + signal.SIGTERM, driver.output()[-5000:]
    return took


def test_training_goes_on_through_a_lost_spot_node_and_its_workers_return(
    ray_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    run_dir = tmp_path / "run"
    # Work enough to still be running when the replacement node's worker returns, however long
    # a loaded machine takes to start it (the learning budget is checked below); SIGTERM ends it.
    job = write_job(tmp_path / "job.yaml", {"timesteps": 20 * BUDGET})
    driver = start(job, run_dir, ray_cluster.client_env())
    try:
        wait_for_row(run_dir, driver, "both workers", lambda r: r["workers_ready"] == 2)
        ray_cluster.live_spot_nodes()[0].kill()
        lost = wait_for_row(run_dir, driver, "the loss", lambda r: r["worker_restarts"] >= 1)
        # Training goes on with what is left: the other node's worker, or the local one.
        after = wait_for_row(run_dir, driver, "rows", lambda r: r["iteration"] > lost["iteration"])
        assert after["workers_ready"] <= 1 and after["timesteps_this_iter"] > 0.8 * BATCH
        assert after["worker_downtime_s"] > 0

        ray_cluster.add_spot_node()  # the spot pool's autoscaler replaces the node
        back = wait_for_row(
            run_dir,
            driver,
            "two workers again",
            lambda r: r["iteration"] > lost["iteration"] and r["workers_ready"] == 2,
        )
        assert back["worker_restarts"] == 1 and back["workers_ready"] == 2
        solved = wait_for_row(
            run_dir, driver, f"a return of {THRESHOLD}", lambda r: _return(r) >= THRESHOLD
        )
        assert solved["timesteps_total"] <= BUDGET
        stop_with_sigterm(driver)
    finally:
        driver.output()
    history = rows(run_dir)
    assert [row["iteration"] for row in history] == list(range(1, len(history) + 1))
    downtime = history[-1]["worker_downtime_s"]
    # The outage lasted from the kill to the replacement's first answer: seconds, and no longer
    # than the training itself.
    assert 0 < downtime < history[-1]["time_total_s"]


def test_a_preempted_driver_checkpoints_in_its_grace_period_and_the_next_resumes(
    ray_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    run_dir, grace_s = tmp_path / "run", 15
    # The first driver cannot stop by itself before it is preempted; the next stops at THRESHOLD.
    first = start(
        write_job(tmp_path / "first.yaml", {"timesteps": BUDGET}, grace_s),
        run_dir,
        ray_cluster.client_env(),
    )
    try:
        wait_for_row(run_dir, first, "3 iterations", lambda r: r["iteration"] >= 3)
        assert stop_with_sigterm(first) < grace_s
    finally:
        first_output = first.output()
    before = rows(run_dir)
    record = read_final_record(first_output)  # how the driver says it ended
    assert record is not None and record.outcome == Outcome.INTERRUPTED, first_output[-5000:]
    assert record.iteration == before[-1]["iteration"] and record.checkpoint is not None

    job = write_job(tmp_path / "next.yaml", {"episodeReturnMean": THRESHOLD, "timesteps": BUDGET})
    resumed = start(job, run_dir, ray_cluster.client_env())
    try:
        resumed.process.wait(timeout=WAIT_S * 2)
    finally:
        next_output = resumed.output()
    assert resumed.process.returncode == 0, next_output[-5000:]
    assert f"Resuming from {record.checkpoint} " in next_output
    history = rows(run_dir)
    assert history[: len(before)] == before  # no completed iteration lost or redone
    assert [row["iteration"] for row in history] == list(range(1, len(history) + 1))
    assert _return(history[-1]) >= THRESHOLD and history[-1]["timesteps_total"] <= BUDGET


def _return(row: dict) -> float:
    value = row["episode_return_mean"]
    return float("-inf") if value is None else value
