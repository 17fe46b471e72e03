"""One job story (queued, running, suspended, resumed, succeeded; and one that fails) told to both
backends: the API's local backend, whose trainers are played by a stand-in that writes what a
trainer writes, and the operator's `compute_status`, fed what the reconciler would observe of a Ray
cluster. At every step the two status documents agree field by field, except for the fields only a
cluster has and the differences listed here with their reasons."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import kuberl_api.local
from kuberl_api.local import LocalBackend
from kuberl_api.processes import Started, TrainerFiles
from kuberl_contract.final_record import EXIT_INVALID_JOB, FinalRecord, Outcome
from kuberl_contract.progress_row import (
    CHECKPOINT,
    EPISODE_RETURN_MEAN,
    ITERATION,
    PROGRESS_FILE,
    SAMPLES_PER_S,
    TIMESTEPS_TOTAL,
)
from kuberl_operator.spec import ConditionType, Phase, RLJob, RLJobSpec, RLJobStatus
from kuberl_operator.status import DriverState, HeadFate, Observed, compute_status
from kuberl_operator.status.lifecycle import LIFECYCLE_CONDITIONS
from kuberl_operator.status.observed import (
    ObservedCluster,
    ObservedDriver,
    ObservedHead,
    ObservedProgress,
)
from testkit import rljob

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAME, NAMESPACE = "story", "default"
CLUSTER_ONLY_CONDITIONS = {
    ConditionType.PREEMPTED,
    ConditionType.UP_TO_DATE,
    ConditionType.SCHEDULABLE,
    ConditionType.KUBERAY_AVAILABLE,
    ConditionType.DURABLE_CHECKPOINTS,  # a local run directory outlives its trainer anyway
}
CLUSTER_ONLY_FIELDS = {"rayCluster", "headPodUID"}


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(iteration: int, checkpoint: str | None = None) -> dict[str, Any]:
    return {
        ITERATION: iteration,
        TIMESTEPS_TOTAL: 1000 * iteration,
        EPISODE_RETURN_MEAN: 20.0 * iteration,
        SAMPLES_PER_S: 500.0,
        CHECKPOINT: checkpoint,
    }


def final_record(
    outcome: Outcome, code: int, message: str, when: datetime, **figures
) -> FinalRecord:
    return FinalRecord(outcome, code, message, when.timestamp(), **figures)


# --- The local backend, with a stand-in for the trainer process ---------------------------------


class StandInTrainers:
    """Plays the trainer processes: started on demand, ended when told (or at once on SIGTERM,
    as a trainer that checkpoints and exits), leaving what a trainer leaves: an exit status, its
    log ending in the final record, and progress rows."""

    def __init__(self) -> None:
        self.running: dict[int, TrainerFiles] = {}
        self.next_pid = 1000

    def start(self, files: TrainerFiles, resume_command: str | None = None) -> Started:
        files.run_dir.mkdir(parents=True, exist_ok=True)
        files.exit_status.unlink(missing_ok=True)
        self.next_pid += 1
        self.running[self.next_pid] = files
        return Started(self.next_pid, 1.0)

    def is_ours(self, pid: int, started: float) -> bool:
        return pid in self.running

    def signal(self, pid: int, started: float, signum: signal.Signals) -> None:
        if pid in self.running:
            self.exit(pid, 128 + signum)

    def kill(self, pid: int, started: float) -> None:
        self.running.pop(pid, None)

    def forget(self, pid: int) -> None:
        pass

    def only(self) -> int:
        (pid,) = self.running
        return pid

    def write_rows(self, pid: int, rows: list[dict[str, Any]], when: datetime) -> None:
        path = self.running[pid].run_dir / PROGRESS_FILE
        with path.open("a") as file:
            file.writelines(json.dumps(raw) + "\n" for raw in rows)
        os.utime(path, (when.timestamp(), when.timestamp()))

    def exit(self, pid: int, code: int, record: FinalRecord | None = None) -> None:
        files = self.running.pop(pid)
        if record is not None:
            with files.log.open("a") as log:
                log.write(record.line() + "\n")
        files.exit_status.write_text(f"{code}\n")


class LocalStory:
    """The local backend, its clock set by the story."""

    def __init__(self, data_dir, monkeypatch) -> None:
        self.now = T0
        monkeypatch.setattr(kuberl_api.local, "now", lambda: self.now)
        self.backend = LocalBackend(data_dir, max_running=0)
        self.trainers = StandInTrainers()
        self.backend.processes = self.trainers
        self.backend.open()

    def submit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        job = RLJob.model_validate(manifest)
        return asyncio.run(self.backend.create(NAMESPACE, job, manifest))

    def suspend(self, suspend: bool) -> None:
        asyncio.run(self.backend.set_suspended(NAMESPACE, NAME, suspend))

    def step(self, when: datetime, slots: int = 1) -> dict[str, Any]:
        self.now, self.backend.max_running = when, slots
        self.backend.reconcile()
        return self.status()

    def status(self) -> dict[str, Any]:
        return asyncio.run(self.backend.get(NAMESPACE, NAME))["status"]


# --- The operator, fed what its reconciler would observe -----------------------------------------


class OperatorStory:
    """compute_status, step after step, with the status it wrote last."""

    def __init__(self) -> None:
        self.status = RLJobStatus()

    def step(self, spec: RLJobSpec, when: datetime, generation: int, **seen: Any) -> dict:
        observed = Observed(status=self.status, generation=generation, now=when, **seen)
        self.status = compute_status(spec, observed).status
        # What a client reads back: the merge patch drops the fields that are null.
        return self.status.model_dump(mode="json", by_alias=True, exclude_none=True)


def cluster(attempt: int) -> dict[str, Any]:
    return {
        "cluster": ObservedCluster(NAME, attempt, state="ready", head_ready=True),
        "head": ObservedHead(HeadFate.RUNNING, uid=f"head-{attempt}"),
    }


def progress(raw: dict[str, Any], when: datetime) -> ObservedProgress:
    return ObservedProgress(row=raw, time=when, last_checkpoint=raw.get(CHECKPOINT))


# --- Comparing -----------------------------------------------------------------------------------


def shared(status: dict[str, Any]) -> dict[str, Any]:
    """The status without what only a cluster has."""
    kept = {key: value for key, value in status.items() if key not in CLUSTER_ONLY_FIELDS}
    kept["conditions"] = [
        c for c in status["conditions"] if c["type"] not in CLUSTER_ONLY_CONDITIONS
    ]
    return kept


def assert_alike(local: dict[str, Any], cluster_status: dict[str, Any], **known: Any) -> None:
    """Field by field alike; `known` names fields whose expected local value differs, and why is
    at the call."""
    assert {c["type"] for c in local["conditions"]} == set(LIFECYCLE_CONDITIONS)
    assert set(cluster_status) - set(local) <= CLUSTER_ONLY_FIELDS
    expected = shared(cluster_status) | known
    for field in sorted(set(expected) | set(local)):
        assert local.get(field) == expected.get(field), (
            field,
            local.get(field),
            expected.get(field),
        )


def assert_queued_alike(local: dict[str, Any], cluster_status: dict[str, Any]) -> None:
    """Waiting to run: Pending for a trainer slot locally, Provisioning (its Ray cluster coming
    up) on a cluster; each condition the same but for the phase's name in the reasons."""
    assert (local["phase"], cluster_status["phase"]) == (Phase.PENDING, Phase.PROVISIONING)

    def shape(status: dict[str, Any]) -> dict[str, Any]:
        return {
            c["type"]: (c["status"], c["reason"].replace(status["phase"], "<phase>"))
            for c in shared(status)["conditions"]
        }

    assert shape(local) == shape(cluster_status)


# --- The stories ---------------------------------------------------------------------------------


def test_a_job_that_succeeds_reads_alike_on_both_backends(tmp_path, monkeypatch):
    manifest = rljob(NAME)
    spec = RLJobSpec.model_validate(manifest["spec"])
    suspended = spec.model_copy(update={"suspend": True})
    local, cluster_side = LocalStory(tmp_path, monkeypatch), OperatorStory()

    # Queued, at T0.
    local.submit(manifest)
    assert_queued_alike(local.step(at(0), slots=0), cluster_side.step(spec, at(0), 1))

    # Running: a trainer slot frees (locally); the cluster comes up and its driver runs.
    local.step(at(10))
    cluster_side.step(spec, at(10), 1, **cluster(1))
    ran = cluster_side.step(
        spec, at(10), 1, **cluster(1), driver=ObservedDriver(DriverState.RUNNING)
    )
    assert ran["phase"] == Phase.RUNNING
    rows = [row(1), row(2), row(3, checkpoint="/ckpt/3")]
    local.trainers.write_rows(local.trainers.only(), rows, at(20))
    running = cluster_side.step(
        spec,
        at(20),
        1,
        **cluster(1),
        driver=ObservedDriver(DriverState.RUNNING),
        progress=progress(rows[-1], at(20)),
    )
    # startTime: when the job left Pending: a cluster's at once (its Ray cluster requested), a
    # local one when a trainer slot freed.
    assert_alike(local.step(at(20)), running, startTime="2026-03-01T12:00:10Z")

    # Suspended (generation 2): locally once the trainer has checkpointed and exited on SIGTERM.
    local.now = at(30)
    local.suspend(True)
    suspended_status = cluster_side.step(suspended, at(30), 2, **cluster(1))
    assert suspended_status["phase"] == Phase.SUSPENDED
    local.step(at(30))  # the trainer has exited
    assert_alike(
        local.step(at(35)),
        cluster_side.step(suspended, at(35), 2),
        startTime="2026-03-01T12:00:10Z",
    )

    # Resumed (generation 3): Resuming, attempt 2, startTime anew.
    local.now = at(40)
    local.suspend(False)
    assert_alike(local.step(at(40), slots=0), cluster_side.step(spec, at(40), 3))

    # Running again.
    local.step(at(50))
    cluster_side.step(spec, at(50), 3, **cluster(2))
    assert_alike(
        local.status(),
        cluster_side.step(
            spec, at(50), 3, **cluster(2), driver=ObservedDriver(DriverState.RUNNING)
        ),
    )

    # Succeeded: the final record says why and where training stood.
    last = row(6, checkpoint="/ckpt/6")
    record = final_record(
        Outcome.STOPPED,
        0,
        "timesteps reached",
        at(60),
        iteration=6,
        timesteps_total=6000,
        episode_return_mean=120.0,
        checkpoint="/ckpt/6",
    )
    pid = local.trainers.only()
    local.trainers.write_rows(pid, [row(4), row(5), last], at(60))
    local.trainers.exit(pid, 0, record)
    done = cluster_side.step(
        spec,
        at(70),
        3,
        **cluster(2),
        driver=ObservedDriver(DriverState.SUCCEEDED, "timesteps reached", 0, Outcome.STOPPED),
        progress=ObservedProgress(record.row(), at(60), "/ckpt/6"),
    )
    assert done["phase"] == Phase.SUCCEEDED
    assert_alike(local.step(at(70)), done)


def running_on_both(tmp_path, monkeypatch) -> tuple[LocalStory, OperatorStory, RLJobSpec]:
    """A job queued at T0 whose trainer (locally) and driver (on a cluster) run from 10 s on."""
    manifest = rljob(NAME)
    spec = RLJobSpec.model_validate(manifest["spec"])
    local, cluster_side = LocalStory(tmp_path, monkeypatch), OperatorStory()
    local.submit(manifest)
    local.step(at(0), slots=0)
    cluster_side.step(spec, at(0), 1)
    local.step(at(10))
    cluster_side.step(spec, at(10), 1, **cluster(1))
    cluster_side.step(spec, at(10), 1, **cluster(1), driver=ObservedDriver(DriverState.RUNNING))
    return local, cluster_side, spec


def test_figures_that_are_no_numbers_are_unknown_alike_on_both_backends(tmp_path, monkeypatch):
    """A diverged run's NaN return and a negative rate are unknown (null) on both backends: the
    same function turns a row into status.progress for each."""
    local, cluster_side, spec = running_on_both(tmp_path, monkeypatch)
    known = row(3, checkpoint="/ckpt/3")
    odd = row(4) | {EPISODE_RETURN_MEAN: math.nan, SAMPLES_PER_S: -250.0}
    for when, written in ((20, known), (30, odd)):
        local.trainers.write_rows(local.trainers.only(), [written], at(when))
        running = cluster_side.step(
            spec,
            at(when),
            1,
            **cluster(1),
            driver=ObservedDriver(DriverState.RUNNING),
            progress=progress(written, at(when)),
        )
        assert_alike(local.step(at(when)), running, startTime="2026-03-01T12:00:10Z")
    assert local.status()["progress"] == {
        "iteration": 4,
        "timesteps": 4000,
        "lastCheckpoint": "/ckpt/3",  # a row without one keeps the last
        "lastUpdateTime": "2026-03-01T12:00:30Z",
    }


def test_a_job_found_invalid_fails_alike_on_both_backends(tmp_path, monkeypatch):
    local, cluster_side, spec = running_on_both(tmp_path, monkeypatch)

    why = "spec.trainer.env: 'CartPol-v1' is unknown"
    record = final_record(Outcome.INVALID_JOB, EXIT_INVALID_JOB, why, at(20))
    local.trainers.exit(local.trainers.only(), EXIT_INVALID_JOB, record)
    driver = ObservedDriver(DriverState.FAILED, why, EXIT_INVALID_JOB, Outcome.INVALID_JOB)
    failed = cluster_side.step(spec, at(20), 1, **cluster(1), driver=driver)
    assert failed["phase"] == Phase.FAILED
    assert_alike(local.step(at(20)), failed, startTime="2026-03-01T12:00:10Z")
    condition = next(c for c in failed["conditions"] if c["type"] == ConditionType.FAILED)
    assert condition["reason"] == "InvalidSpec" and why in condition["message"]
