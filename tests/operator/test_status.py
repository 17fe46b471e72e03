"""compute_status and the phase machine: table tests of next_phase, then one test per rule, each a
spec plus an observation in and a status, events and an action out."""

from __future__ import annotations

import copy
import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import kuberl_operator.status
import kuberl_operator.status.compute
from kuberl_contract.final_record import EXIT_FAILED, EXIT_INVALID_JOB, Outcome
from kuberl_operator.constants import (
    KUBERAY_RECHECK_SECONDS,
    MAX_BACKOFF_SECONDS,
)
from kuberl_operator.spec import (
    Condition,
    ConditionType,
    Phase,
    Progress,
    Reason,
    RestartPolicy,
    RLJobSpec,
    RLJobStatus,
)
from kuberl_operator.status import (
    HEAD_GROUP,
    TRANSITIONS,
    CreateCluster,
    DeleteCluster,
    DeleteJob,
    DriverState,
    HeadFate,
    KubeEvent,
    Nothing,
    Observed,
    ObservedCluster,
    ObservedDriver,
    ObservedHead,
    ObservedProgress,
    PendingSpotWorkers,
    PhaseEvent,
    Requeue,
    StatusUpdate,
    StopDrivers,
    SubmitDriver,
    UnschedulablePods,
    backoff_seconds,
    compute_status,
    next_phase,
)
from kuberl_operator.status.attempts import driver_stop_seconds, rebuild_reason
from kuberl_operator.status.phases import attempt_after

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAME = "walker"
SPEC: dict[str, Any] = {
    "trainer": {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "stop": {"timesteps": 1000},
        # in an object store: these tests are not about checkpoints that die with the pods
        "checkpoint": {"uri": "s3://checkpoints/jobs"},
    }
}
ALL_TYPES = {
    *ConditionType,
}


CLAIM = {"persistentVolumeClaim": {"claimName": "kuberl-checkpoints"}}


def spec(**changes: Any) -> RLJobSpec:
    """SPEC with values set at dotted paths (`**{"restartPolicy.maxRestarts": 1}`)."""
    document = copy.deepcopy(SPEC)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return RLJobSpec.model_validate(document)


def cluster(attempt: int = 1, ready: bool = True) -> ObservedCluster:
    return ObservedCluster(
        name=NAME, attempt=attempt, state="ready" if ready else None, head_ready=ready
    )


def running_head(uid: str = "head-1") -> ObservedHead:
    return ObservedHead(HeadFate.RUNNING, uid=uid)


def driver(state: DriverState, message: str = "") -> ObservedDriver:
    return ObservedDriver(state, message)


def with_attempt(status: RLJobStatus, fields: dict[str, Any]) -> RLJobStatus:
    """`status`, with `fields["attempt"]` (popped) as its attempt when given."""
    if "attempt" not in fields:
        return status
    return status.model_copy(update={"attempt": fields.pop("attempt")})


def observe(status: RLJobStatus | None = None, **fields: Any) -> Observed:
    status = with_attempt(status or RLJobStatus(), fields)
    return Observed(status=status, generation=fields.pop("generation", 1), now=NOW, **fields)


def after(update: StatusUpdate, seconds: float = 10, **fields: Any) -> Observed:
    """The next observation: the status and attempt `update` left, `seconds` later."""
    return Observed(
        status=with_attempt(update.status, fields),
        generation=fields.pop("generation", 1),
        now=fields.pop("now", None) or _now_of(update) + timedelta(seconds=seconds),
        **fields,
    )


def _now_of(update: StatusUpdate) -> datetime:
    """When `update` was computed: its newest transition (every step in these tests makes one)."""
    return max(c.last_transition_time for c in update.status.conditions)


def condition(update: StatusUpdate, type_: str) -> Condition:
    return next(c for c in update.status.conditions if c.type == type_)


def running(job: RLJobSpec | None = None, **status_fields: Any) -> StatusUpdate:
    """A job driven from new to Running on attempt 1, at NOW."""
    job = job or spec()
    update = compute_status(job, observe())
    update = compute_status(
        job, observe(update.status, attempt=1, cluster=cluster(), head=running_head())
    )
    update = compute_status(
        job,
        observe(
            update.status.model_copy(update=status_fields),
            attempt=1,
            cluster=cluster(),
            head=running_head(),
            driver=driver(DriverState.RUNNING),
        ),
    )
    assert update.phase == Phase.RUNNING
    return update


def on_cluster(update: StatusUpdate, seconds: float = 10, **fields: Any) -> Observed:
    """The next observation of a job whose current attempt's cluster is up and training."""
    fields.setdefault("cluster", cluster(update.attempt))
    fields.setdefault("head", running_head())
    fields.setdefault("driver", driver(DriverState.RUNNING))
    return after(update, seconds, **fields)


# --- The phase machine --------------------------------------------------------------------------

P, E = Phase, PhaseEvent


@pytest.mark.parametrize(
    ("current", "event", "expected"),
    [
        (None, None, P.PENDING),
        (None, E.START, P.PROVISIONING),
        (P.PENDING, E.START, P.PROVISIONING),
        (P.PENDING, E.DRIVER_RUNNING, P.PENDING),
        (P.PROVISIONING, E.DRIVER_RUNNING, P.RUNNING),
        (P.RESUMING, E.DRIVER_RUNNING, P.RUNNING),
        (P.RUNNING, E.DRIVER_RUNNING, P.RUNNING),
        (P.RUNNING, E.HEAD_PREEMPTED, P.PREEMPTED),
        (P.PROVISIONING, E.HEAD_PREEMPTED, P.PREEMPTED),
        (P.RESUMING, E.HEAD_PREEMPTED, P.PREEMPTED),
        (P.PREEMPTED, E.NEW_ATTEMPT, P.RESUMING),
        (P.RESUMING, E.NEW_ATTEMPT, P.RESUMING),
        (P.RUNNING, E.NEW_ATTEMPT, P.RUNNING),
        (P.RUNNING, E.RESTART, P.RESUMING),
        (P.PROVISIONING, E.RESTART, P.RESUMING),
        (P.RESUMING, E.RESTART, P.RESUMING),
        (P.RUNNING, E.SUCCEEDED, P.SUCCEEDED),
        (P.PROVISIONING, E.SUCCEEDED, P.SUCCEEDED),
        (P.RUNNING, E.FAIL, P.FAILED),
        (P.PENDING, E.FAIL, P.FAILED),
        (P.SUSPENDED, E.FAIL, P.FAILED),
        (P.RUNNING, E.SUSPEND, P.SUSPENDED),
        (P.PENDING, E.SUSPEND, P.SUSPENDED),
        (P.RESUMING, E.SUSPEND, P.SUSPENDED),
        (P.SUSPENDED, E.UNSUSPEND, P.RESUMING),
        (P.SUSPENDED, E.DRIVER_RUNNING, P.SUSPENDED),
        (P.RUNNING, E.UNSUSPEND, P.RUNNING),
        (P.SUCCEEDED, E.FAIL, P.SUCCEEDED),
        (P.FAILED, E.UNSUSPEND, P.FAILED),
        (P.FAILED, E.START, P.FAILED),
    ],
)
def test_next_phase(current: Phase | None, event: PhaseEvent | None, expected: Phase) -> None:
    assert next_phase(current, event) == expected


@pytest.mark.parametrize("event", list(PhaseEvent))
@pytest.mark.parametrize("final", [Phase.SUCCEEDED, Phase.FAILED])
def test_succeeded_and_failed_are_final(final: Phase, event: PhaseEvent) -> None:
    assert next_phase(final, event) == final
    assert not any(phase == final for phase, _ in TRANSITIONS)


def test_every_phase_is_reachable_from_pending() -> None:
    reached, frontier = {Phase.PENDING}, [Phase.PENDING]
    while frontier:
        phase = frontier.pop()
        for event in PhaseEvent:
            following = next_phase(phase, event)
            if following not in reached:
                reached.add(following)
                frontier.append(following)
    assert reached == set(Phase)


@pytest.mark.parametrize(
    ("attempt", "event", "expected"),
    [
        (0, E.START, 1),
        (2, E.START, 2),  # a status write was lost: the cluster's label said 2
        (1, E.RESTART, 2),
        (1, E.HEAD_PREEMPTED, 2),
        (1, E.UNSUSPEND, 2),
        (2, E.NEW_ATTEMPT, 2),  # counted when the last one was given up
        (1, E.DRIVER_RUNNING, 1),
        (1, E.SUSPEND, 1),
        (1, E.FAIL, 1),
        (1, None, 1),
    ],
)
def test_the_attempt_an_event_leaves_a_job_on(
    attempt: int, event: PhaseEvent | None, expected: int
) -> None:
    assert attempt_after(attempt, event) == expected


# --- Starting -----------------------------------------------------------------------------------


def test_a_new_job_creates_its_first_cluster() -> None:
    update = compute_status(spec(), observe(generation=4))
    assert update.phase == Phase.PROVISIONING
    assert update.action == CreateCluster(1)
    assert update.attempt == 1
    assert update.status.observed_generation == 4
    assert {c.type for c in update.status.conditions} == ALL_TYPES
    assert all(c.observed_generation == 4 for c in update.status.conditions)
    assert all(c.last_transition_time == NOW for c in update.status.conditions)
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "Provisioning")]
    assert update.status.start_time == NOW  # the job has started: its deadline counts from here


@pytest.mark.parametrize(
    "storage, durable",
    [
        ({"trainer.checkpoint.uri": None}, False),  # the head pod's emptyDir
        ({"trainer.checkpoint.uri": "/data/checkpoints"}, False),  # the pod's own disk
        ({"trainer.checkpoint.uri": "gs://bucket/jobs"}, True),
        ({"trainer.checkpoint.uri": None, "storage": CLAIM}, True),  # the run dir on the claim
        ({"trainer.checkpoint.uri": "/kuberl/checkpoints/x", "storage": CLAIM}, True),
        ({"trainer.checkpoint.uri": "/elsewhere", "storage": CLAIM}, False),
    ],
)
def test_checkpoints_that_die_with_the_pods_are_said_once(storage, durable) -> None:
    update = compute_status(spec(**storage), observe())
    condition = next(
        c for c in update.status.conditions if c.type == ConditionType.DURABLE_CHECKPOINTS
    )
    warnings = [e for e in update.events if e.reason == Reason.CHECKPOINTS_IN_POD]
    if durable:
        assert (condition.status, condition.reason) == ("True", Reason.CHECKPOINTS_ON_STORAGE)
        assert warnings == []
        return
    assert (condition.status, condition.reason) == ("False", Reason.CHECKPOINTS_IN_POD)
    assert "deleted with the Ray cluster" in condition.message
    assert [(e.type, e.message) for e in warnings] == [("Warning", condition.message)]
    # Said once: the next reconcile keeps the condition and emits no second Event.
    again = compute_status(spec(**storage), after(update))
    assert not [e for e in again.events if e.reason == Reason.CHECKPOINTS_IN_POD]


def test_the_driver_is_submitted_once_the_cluster_is_ready() -> None:
    job = spec()
    update = compute_status(job, observe())
    waiting = compute_status(job, after(update, attempt=1, cluster=cluster(ready=False)))
    assert waiting.phase == Phase.PROVISIONING
    assert waiting.action == Nothing()
    assert waiting.events == ()
    ready = compute_status(job, after(update, cluster=cluster(), head=running_head()))
    assert ready.action == SubmitDriver(1)
    assert ready.status.ray_cluster == NAME
    pending = compute_status(
        job, after(ready, cluster=cluster(), head=running_head(), driver=driver("PENDING"))
    )
    assert pending.action == Nothing()
    assert pending.phase == Phase.PROVISIONING


def test_a_running_driver_makes_the_job_running_and_ready() -> None:
    update = running()
    assert update.status.start_time == NOW
    assert condition(update, ConditionType.READY).status == "True"
    assert condition(update, ConditionType.PROGRESSING).status == "True"
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "DriverRunning")]


def test_last_transition_time_moves_only_when_the_status_does() -> None:
    first = running()
    later = compute_status(spec(), on_cluster(first, seconds=600, generation=2))
    assert later.events == ()
    for old, new in zip(first.status.conditions, later.status.conditions, strict=True):
        assert new.last_transition_time == old.last_transition_time
        assert new.observed_generation == 2
    assert later.status.observed_generation == 2
    assert later.status.start_time == NOW
    assert later == compute_status(spec(), on_cluster(first, seconds=600, generation=2))


def test_an_unchanged_observation_gives_an_unchanged_status() -> None:
    first = running()
    again = compute_status(spec(), on_cluster(first, seconds=0, now=NOW))
    assert again.status == first.status


# --- Progress -----------------------------------------------------------------------------------


def row(iteration: int, **values: Any) -> dict[str, Any]:
    return {
        "iteration": iteration,
        "timesteps_total": iteration * 4000,
        "episode_return_mean": 20.0 + iteration,
        "samples_per_s": 1500.0,
        **values,
    }


def test_progress_is_copied_from_the_newest_row() -> None:
    first = running()
    written = NOW + timedelta(seconds=5)
    update = compute_status(
        spec(),
        on_cluster(first, progress=ObservedProgress(row(3), written, "/ckpt/checkpoint-3")),
    )
    assert update.status.progress == Progress(
        iteration=3,
        timesteps=12_000,
        episode_return_mean=23.0,
        last_checkpoint="/ckpt/checkpoint-3",
        last_update_time=written,
        samples_per_second=1500.0,
    )


def test_progress_never_goes_back_to_an_older_row() -> None:
    first = running()
    newer = ObservedProgress(row(5), NOW + timedelta(seconds=50), "/ckpt/checkpoint-5")
    update = compute_status(spec(), on_cluster(first, progress=newer))
    for stale in (
        ObservedProgress(row(4), NOW + timedelta(seconds=40), "/ckpt/checkpoint-4"),
        newer,  # the same row again
    ):
        again = compute_status(spec(), on_cluster(update, progress=stale))
        assert again.status.progress == update.status.progress


def test_a_row_without_a_checkpoint_keeps_the_last_one_and_nan_becomes_null() -> None:
    first = running()
    update = compute_status(
        spec(), on_cluster(first, progress=ObservedProgress(row(1), NOW, "/ckpt/checkpoint-1"))
    )
    nan = row(2, episode_return_mean=math.nan, samples_per_s=math.inf)
    update = compute_status(
        spec(), on_cluster(update, progress=ObservedProgress(nan, NOW + timedelta(seconds=1)))
    )
    progress = update.status.progress
    assert (progress.iteration, progress.last_checkpoint) == (2, "/ckpt/checkpoint-1")
    assert progress.episode_return_mean is None
    assert progress.samples_per_second is None


# --- Rollout workers preempted ------------------------------------------------------------------


def test_preempted_workers_are_counted_once_and_the_job_runs_on_until_refilled() -> None:
    first = running()
    disrupted = frozenset({"pod-a", "pod-b"})
    update = compute_status(spec(), on_cluster(first, disrupted_workers=disrupted, workers_short=2))
    assert update.phase == Phase.PREEMPTED
    assert (update.status.preemptions, update.status.restarts) == (2, 0)
    assert update.status.preempted_pods == ["pod-a", "pod-b"]
    assert update.action == Nothing()
    assert update.attempt == first.attempt  # the driver keeps going on the same cluster
    preempted = condition(update, ConditionType.PREEMPTED)
    assert (preempted.status, preempted.reason) == ("True", Reason.WORKER_PREEMPTED)
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.WORKER_PREEMPTED)]

    # Seen again while KubeRay refills the group: not counted twice, still Preempted.
    again = compute_status(spec(), on_cluster(update, disrupted_workers=disrupted, workers_short=1))
    assert (again.phase, again.status.preemptions, again.events) == (Phase.PREEMPTED, 2, ())
    assert condition(again, ConditionType.PREEMPTED).status == "True"

    # The lost pods are gone and their replacements exist: Running again, and they are forgotten.
    refilled = compute_status(spec(), on_cluster(again))
    assert (refilled.phase, refilled.status.preemptions) == (Phase.RUNNING, 2)
    assert refilled.status.preempted_pods == []
    assert condition(refilled, ConditionType.PREEMPTED).status == "False"
    assert condition(refilled, ConditionType.READY).status == "True"
    assert [(e.type, e.reason) for e in refilled.events] == [("Normal", Reason.WORKERS_REFILLED)]


def test_a_new_preemption_while_preempted_is_counted_without_a_transition() -> None:
    update = compute_status(
        spec(), on_cluster(running(), disrupted_workers=frozenset({"a"}), workers_short=1)
    )
    more = compute_status(
        spec(), on_cluster(update, disrupted_workers=frozenset({"a", "b"}), workers_short=2)
    )
    assert (more.phase, more.status.preemptions) == (Phase.PREEMPTED, 2)
    assert [(e.type, e.reason) for e in more.events] == [("Warning", Reason.WORKER_PREEMPTED)]


def test_workers_preempted_before_the_driver_runs_are_counted_in_provisioning() -> None:
    update = compute_status(spec(), observe())
    update = compute_status(
        spec(),
        after(
            update,
            cluster=cluster(1, ready=False),
            disrupted_workers=frozenset({"a"}),
            workers_short=1,
        ),
    )
    assert (update.phase, update.status.preemptions) == (Phase.PROVISIONING, 1)
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.WORKER_PREEMPTED)]


def test_the_cluster_lost_while_workers_are_preempted_is_a_restart() -> None:
    update = compute_status(
        spec(), on_cluster(running(), disrupted_workers=frozenset({"a"}), workers_short=1)
    )
    lost = compute_status(spec(), after(update, cluster=None, head=None))
    assert lost.phase == Phase.RESUMING
    assert lost.status.restarts == 1
    assert condition(lost, ConditionType.PROGRESSING).reason == Reason.RESTART_BACKOFF


# --- Spot rollout workers without nodes ---------------------------------------------------------

SPOT_JOB = {
    "rolloutWorkers.replicas": 4,
    "rolloutWorkers.spot": {"enabled": True, "provider": "gke", "maxUnavailable": 1},
}


def test_spot_workers_long_without_nodes_get_on_demand_stand_ins_while_the_job_runs() -> None:
    job = spec(**SPOT_JOB)
    waiting = PendingSpotWorkers(pods=3, seconds=600, grace_seconds=120)
    update = compute_status(job, on_cluster(running(job), pending_spot=waiting))
    assert (update.phase, update.on_demand_replicas) == (Phase.RUNNING, 2)  # 3 missing, 1 tolerated
    recent = PendingSpotWorkers(pods=3, seconds=60, grace_seconds=120)
    assert compute_status(job, on_cluster(update, pending_spot=recent)).on_demand_replicas == 0
    queued = PendingSpotWorkers(pods=3, seconds=600, grace_seconds=120, queued=True)
    assert compute_status(job, on_cluster(update, pending_spot=queued)).on_demand_replicas == 0
    # Without a cluster there is no group to size; a finished job's cluster is on its way out.
    assert compute_status(job, after(update, cluster=None, head=None)).on_demand_replicas is None
    done = compute_status(
        job, on_cluster(update, driver=driver(DriverState.SUCCEEDED), pending_spot=waiting)
    )
    assert (done.phase, done.on_demand_replicas) == (Phase.SUCCEEDED, None)


# --- A spec edited under a running attempt ------------------------------------------------------


def test_a_spec_change_that_needs_a_restart_is_reported_not_applied() -> None:
    update = compute_status(spec(), on_cluster(running(), stale_spec=("trainer", "image")))
    up_to_date = condition(update, ConditionType.UP_TO_DATE)
    assert (up_to_date.status, up_to_date.reason) == ("False", Reason.RESTART_REQUIRED)
    assert "spec.trainer, spec.image" in up_to_date.message
    assert "next attempt" in up_to_date.message
    assert (update.phase, update.action) == (Phase.RUNNING, Nothing())
    assert condition(
        compute_status(spec(), on_cluster(update)), ConditionType.UP_TO_DATE
    ).status == ("True")


# --- Head preempted -----------------------------------------------------------------------------


def head_preempted(update: StatusUpdate) -> Observed:
    return on_cluster(
        update, head=ObservedHead(HeadFate.PREEMPTED, "DisruptionTarget: PreemptionByScheduler")
    )


def test_a_preempted_head_resumes_in_a_new_attempt_without_counting_a_restart() -> None:
    job = spec()
    update = compute_status(job, head_preempted(running()))
    assert update.phase == Phase.PREEMPTED
    assert (update.status.preemptions, update.status.restarts, update.attempt) == (1, 0, 2)
    assert update.action == DeleteCluster(Reason.HEAD_PREEMPTED)
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.HEAD_PREEMPTED)]
    assert condition(update, ConditionType.PREEMPTED).status == "True"

    # The old cluster is still terminating: the same observation counts nothing twice.
    waiting = compute_status(job, after(update, cluster=cluster(1)))
    assert (waiting.phase, waiting.action) == (Phase.PREEMPTED, DeleteCluster("StaleAttempt"))
    assert waiting.status.preemptions == 1

    resuming = compute_status(job, after(waiting))
    assert (resuming.phase, resuming.action) == (Phase.RESUMING, CreateCluster(2))
    assert [(e.type, e.reason) for e in resuming.events] == [("Normal", "Resuming")]
    assert condition(resuming, ConditionType.PREEMPTED).status == "True"

    created = compute_status(job, after(resuming))  # the new cluster is not visible yet
    assert (created.phase, created.action) == (Phase.RESUMING, CreateCluster(2))

    submit = compute_status(job, after(created, cluster=cluster(2), head=running_head()))
    assert submit.action == SubmitDriver(2)

    back = compute_status(job, on_cluster(submit))
    assert back.phase == Phase.RUNNING
    assert condition(back, ConditionType.PREEMPTED).status == "False"
    assert (back.status.preemptions, back.status.restarts, back.attempt) == (1, 0, 2)
    assert back.status.start_time == NOW  # the first start, kept


def test_a_preempted_head_counts_as_a_restart_under_count_as_restart() -> None:
    job = spec(**{"restartPolicy.onPreemption": "CountAsRestart", "restartPolicy.maxRestarts": 1})
    first = running(job)
    update = compute_status(job, head_preempted(first))
    assert update.phase == Phase.PREEMPTED
    assert (update.status.preemptions, update.status.restarts) == (1, 1)

    used_up = StatusUpdate(first.status.model_copy(update={"restarts": 1}), first.attempt)
    exhausted = compute_status(job, head_preempted(used_up))
    assert exhausted.phase == Phase.FAILED
    assert condition(exhausted, ConditionType.FAILED).reason == Reason.BACKOFF_LIMIT_EXCEEDED


def test_a_preempted_head_fails_the_job_under_fail() -> None:
    job = spec(**{"restartPolicy.onPreemption": "Fail"})
    update = compute_status(job, head_preempted(running(job)))
    assert update.phase == Phase.FAILED
    failed = condition(update, ConditionType.FAILED)
    assert (failed.status, failed.reason) == ("True", Reason.HEAD_PREEMPTED)
    assert "onPreemption: Fail" in failed.message
    assert update.status.preemptions == 1
    assert update.action == DeleteCluster(Reason.HEAD_PREEMPTED)


# --- Failures and backoff -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "restarts", "expected"),
    [
        (30, 1, 30),
        (30, 2, 60),
        (30, 3, 120),
        (30, 7, 1920),
        (30, 8, MAX_BACKOFF_SECONDS),
        (30, 1000, MAX_BACKOFF_SECONDS),
        (0, 5, 0),
        (7200, 1, 7200),  # a base above the cap is honoured, without growth
        (7200, 3, 7200),
    ],
)
def test_backoff_doubles_up_to_a_cap(base: int, restarts: int, expected: int) -> None:
    policy = RestartPolicy(backoff_seconds=base, max_restarts=1000)
    assert backoff_seconds(policy, restarts) == expected


def test_a_failed_driver_restarts_after_a_backoff_on_the_same_cluster() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 30})
    update = compute_status(
        job, on_cluster(running(job), driver=driver(DriverState.FAILED, "ValueError: boom"))
    )
    failed_at = NOW + timedelta(seconds=10)
    assert update.phase == Phase.RESUMING
    assert (update.status.restarts, update.status.preemptions, update.attempt) == (1, 0, 2)
    assert (update.action, update.status.cluster_attempt) == (Requeue(30), 1)  # the cluster stays
    progressing = condition(update, ConditionType.PROGRESSING)
    assert (progressing.status, progressing.reason) == ("False", Reason.RESTART_BACKOFF)
    assert progressing.last_transition_time == failed_at
    assert "ValueError: boom" in progressing.message
    assert progressing.message.endswith("restart 1 of 3 in 30s, on the same Ray cluster")
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.DRIVER_FAILED)]
    assert condition(update, ConditionType.FAILED).status == "False"

    # Attempt 2 runs on attempt 1's cluster: it is the job's, not a stale one.
    same = {"cluster": cluster(1), "head": running_head()}
    waiting = compute_status(job, after(update, now=failed_at + timedelta(seconds=12), **same))
    assert waiting.action == Requeue(18)
    assert (waiting.phase, waiting.status.restarts, waiting.events) == (Phase.RESUMING, 1, ())
    assert condition(waiting, ConditionType.PROGRESSING).last_transition_time == failed_at

    resumed = compute_status(job, after(update, now=failed_at + timedelta(seconds=30), **same))
    assert (resumed.phase, resumed.action) == (Phase.RESUMING, SubmitDriver(2))
    assert condition(resumed, ConditionType.PROGRESSING).status == "True"
    assert [(e.reason, e.message) for e in resumed.events] == [
        (
            Reason.RETRYING_ON_SAME_CLUSTER,
            "retrying on the same Ray cluster (built for attempt 1): submitting attempt 2's "
            "driver, which resumes from the newest checkpoint",
        )
    ]
    again = compute_status(job, on_cluster(resumed, **same))
    assert (again.phase, again.attempt, again.status.cluster_attempt) == (Phase.RUNNING, 2, 1)
    assert again.action == Nothing()


def test_the_backoff_grows_with_each_restart() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 30, "restartPolicy.maxRestarts": 5})
    first = running(job, restarts=2)
    update = compute_status(job, on_cluster(first, driver=driver(DriverState.FAILED)))
    assert update.status.restarts == 3
    failed_at = NOW + timedelta(seconds=10)
    waiting = compute_status(job, after(update, now=failed_at + timedelta(seconds=100)))
    assert waiting.action == Requeue(20)  # 30 * 2**2 = 120 s


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        ({"driver": driver(DriverState.FAILED, "OOM")}, Reason.DRIVER_FAILED),
        ({"driver": driver(DriverState.STOPPED, "stopped by hand")}, Reason.DRIVER_FAILED),
        ({"head": ObservedHead(HeadFate.FAILED, "OOMKilled")}, Reason.HEAD_FAILED),
    ],
)
def test_failures_count_as_restarts(observation: dict[str, Any], reason: str) -> None:
    update = compute_status(spec(), on_cluster(running(), **observation))
    assert (update.phase, update.status.restarts, update.status.preemptions) == (
        Phase.RESUMING,
        1,
        0,
    )
    assert update.events[0].reason == reason


def test_a_vanished_cluster_of_a_running_job_counts_as_a_restart() -> None:
    update = compute_status(spec(), after(running()))
    assert update.phase == Phase.RESUMING
    assert update.status.restarts == 1
    assert update.events[0].reason == Reason.CLUSTER_LOST
    assert update.action == Requeue(30)


@pytest.mark.parametrize("max_restarts", [0, 2])
def test_exhausted_restarts_fail_the_job_with_the_drivers_message(max_restarts: int) -> None:
    job = spec(**{"restartPolicy.maxRestarts": max_restarts})
    first = running(job, restarts=max_restarts)
    update = compute_status(
        job, on_cluster(first, driver=driver(DriverState.FAILED, "KeyError: 'obs'"))
    )
    assert update.phase == Phase.FAILED
    assert update.status.restarts == max_restarts
    failed = condition(update, ConditionType.FAILED)
    assert (failed.status, failed.reason) == ("True", Reason.BACKOFF_LIMIT_EXCEEDED)
    assert "KeyError: 'obs'" in failed.message
    assert f"maxRestarts ({max_restarts})" in failed.message
    assert update.status.completion_time == NOW + timedelta(seconds=10)
    assert update.action == DeleteCluster(Reason.BACKOFF_LIMIT_EXCEEDED)
    assert [(e.type, e.reason) for e in update.events] == [
        ("Warning", Reason.BACKOFF_LIMIT_EXCEEDED)
    ]
    assert condition(update, ConditionType.READY).status == "False"


def test_preemptions_do_not_use_up_restarts() -> None:
    job = spec(**{"restartPolicy.maxRestarts": 0})
    update = compute_status(job, head_preempted(running(job)))
    assert update.phase == Phase.PREEMPTED
    assert update.status.restarts == 0


# --- Success, deadline, TTL ---------------------------------------------------------------------


def test_a_succeeded_driver_completes_the_job() -> None:
    update = compute_status(
        spec(), on_cluster(running(), driver=driver(DriverState.SUCCEEDED, "timesteps reached"))
    )
    assert update.phase == Phase.SUCCEEDED
    complete = condition(update, ConditionType.COMPLETE)
    assert (complete.status, complete.message) == ("True", "timesteps reached")
    assert condition(update, ConditionType.FAILED).status == "False"
    assert condition(update, ConditionType.PROGRESSING).status == "False"
    assert update.status.completion_time == NOW + timedelta(seconds=10)
    assert update.action == DeleteCluster("Finished")
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "DriverSucceeded")]

    # Final: a later failure report changes nothing, and the message stays.
    later = compute_status(
        spec(), on_cluster(update, seconds=60, driver=driver(DriverState.FAILED))
    )
    assert later.phase == Phase.SUCCEEDED
    assert condition(later, ConditionType.COMPLETE).message == "timesteps reached"
    assert later.status.completion_time == update.status.completion_time
    assert later.events == ()


def test_the_deadline_fails_the_job() -> None:
    job = spec(activeDeadlineSeconds=600)
    first = running(job)
    within = compute_status(job, on_cluster(first, seconds=599))
    assert within.phase == Phase.RUNNING
    past = compute_status(job, on_cluster(first, seconds=600))
    assert past.phase == Phase.FAILED
    failed = condition(past, ConditionType.FAILED)
    assert failed.reason == Reason.DEADLINE_EXCEEDED
    assert "activeDeadlineSeconds 600" in failed.message
    assert past.action == DeleteCluster(Reason.DEADLINE_EXCEEDED)


def finished(ttl: int | None, ago: float, with_cluster: bool = False) -> StatusUpdate:
    job = spec(ttlSecondsAfterFinished=ttl) if ttl is not None else spec()
    done = compute_status(job, on_cluster(running(job), driver=driver(DriverState.SUCCEEDED)))
    return compute_status(
        job,
        after(
            done,
            now=done.status.completion_time + timedelta(seconds=ago),
            cluster=cluster() if with_cluster else None,
        ),
    )


@pytest.mark.parametrize(
    ("ttl", "ago", "with_cluster", "action"),
    [
        (60, 60, False, DeleteJob()),
        (60, 61, True, DeleteJob()),
        (600, 100, False, Requeue(500)),
        (600, 100, True, DeleteCluster("Finished")),
        (None, 10**6, False, Nothing()),
        (None, 10, True, DeleteCluster("Finished")),
    ],
)
def test_ttl_after_finished(ttl: int | None, ago: float, with_cluster: bool, action) -> None:
    update = finished(ttl, ago, with_cluster)
    assert update.phase == Phase.SUCCEEDED
    assert update.action == action


# --- Suspend ------------------------------------------------------------------------------------


def test_suspend_deletes_the_cluster_and_resume_continues_in_a_new_attempt() -> None:
    first = compute_status(
        spec(),
        on_cluster(running(), progress=ObservedProgress(row(7), NOW, "/ckpt/checkpoint-7")),
    )
    suspended_job = spec(suspend=True)
    update = compute_status(suspended_job, on_cluster(first))
    assert update.phase == Phase.SUSPENDED
    assert update.action == DeleteCluster("Suspended")
    assert condition(update, ConditionType.SUSPENDED).status == "True"
    assert condition(update, ConditionType.READY).status == "False"
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "Suspended")]

    gone = compute_status(suspended_job, after(update))
    assert (gone.phase, gone.action, gone.events) == (Phase.SUSPENDED, Nothing(), ())

    resumed = compute_status(spec(), after(gone))
    assert resumed.phase == Phase.RESUMING
    assert (resumed.attempt, resumed.action) == (2, CreateCluster(2))
    assert condition(resumed, ConditionType.SUSPENDED).status == "False"
    assert resumed.status.progress.last_checkpoint == "/ckpt/checkpoint-7"
    assert (resumed.status.restarts, resumed.status.preemptions) == (0, 0)

    submitted = compute_status(spec(), after(resumed, cluster=cluster(2), head=running_head()))
    assert submitted.action == SubmitDriver(2)
    back = compute_status(spec(), on_cluster(submitted))
    assert back.phase == Phase.RUNNING


def test_a_job_created_suspended_creates_nothing() -> None:
    update = compute_status(spec(suspend=True), observe())
    assert (update.phase, update.action, update.attempt) == (Phase.SUSPENDED, Nothing(), 0)
    resumed = compute_status(spec(), after(update))
    assert (resumed.phase, resumed.action) == (Phase.RESUMING, CreateCluster(1))


# --- KubeRay missing, invalid spec --------------------------------------------------------------


def test_without_kuberay_the_job_waits_with_a_condition() -> None:
    update = compute_status(spec(), observe(kuberay_available=False))
    assert update.phase == Phase.PENDING
    assert update.action == Requeue(KUBERAY_RECHECK_SECONDS)
    available = condition(update, ConditionType.KUBERAY_AVAILABLE)
    assert (available.status, available.reason) == ("False", Reason.CRD_NOT_FOUND)
    assert "rayclusters.ray.io" in available.message
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.CRD_NOT_FOUND)]

    again = compute_status(spec(), after(update, seconds=60, kuberay_available=False))
    assert again.events == ()
    assert condition(again, ConditionType.KUBERAY_AVAILABLE).last_transition_time == NOW

    installed = compute_status(spec(), after(again))
    assert (installed.phase, installed.action) == (Phase.PROVISIONING, CreateCluster(1))
    assert condition(installed, ConditionType.KUBERAY_AVAILABLE).status == "True"
    assert {(e.type, e.reason) for e in installed.events} == {
        ("Normal", "Provisioning"),
        ("Normal", "CRDFound"),
    }


def test_kuberay_vanishing_under_a_running_job_keeps_its_phase() -> None:
    update = compute_status(spec(), on_cluster(running(), kuberay_available=False))
    assert update.phase == Phase.RUNNING
    assert condition(update, ConditionType.KUBERAY_AVAILABLE).status == "False"


@pytest.mark.parametrize("readable", [True, False])
def test_an_invalid_spec_fails_the_job_without_a_cluster(readable: bool) -> None:
    problem = "spec.rolloutWorkers.replicas: must be >= 0, got -1"
    update = compute_status(spec() if readable else None, observe(spec_problems=(problem,)))
    assert update.phase == Phase.FAILED
    assert update.action == Nothing()
    assert update.attempt == 0
    failed = condition(update, ConditionType.FAILED)
    assert (failed.status, failed.reason) == ("True", Reason.INVALID_SPEC)
    assert problem in failed.message
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.INVALID_SPEC)]
    assert problem in update.events[0].message


def test_a_spec_made_invalid_while_running_deletes_the_cluster() -> None:
    update = compute_status(spec(), on_cluster(running(), spec_problems=("spec.image: bad",)))
    assert update.phase == Phase.FAILED
    assert update.action == DeleteCluster(Reason.INVALID_SPEC)


def test_a_stale_cluster_is_deleted_before_anything_else() -> None:
    # Attempt 2 was to get a cluster of its own; the one there was built for attempt 1.
    stale = running().status.model_copy(update={"attempt": 2, "cluster_attempt": 2})
    update = compute_status(spec(), on_cluster(StatusUpdate(stale), cluster=cluster(1)))
    assert update.action == DeleteCluster("StaleAttempt")
    assert update.status.restarts == 0


def test_a_cluster_created_before_the_status_was_written_is_adopted() -> None:
    update = compute_status(spec(), observe(cluster=cluster(1, ready=False)))
    assert (update.phase, update.attempt, update.action) == (Phase.PROVISIONING, 1, Nothing())


def test_a_lost_attempt_number_is_taken_from_the_clusters_label() -> None:
    first = running()
    update = compute_status(spec(), on_cluster(first, attempt=0))
    assert (update.phase, update.attempt, update.action) == (Phase.RUNNING, 1, Nothing())


# --- Purity -------------------------------------------------------------------------------------


# Every module of the status package: none may read the clock.
STATUS_MODULES = [
    importlib.import_module(f"kuberl_operator.status.{info.name}")
    for info in pkgutil.iter_modules(kuberl_operator.status.__path__)
]


def test_compute_status_is_deterministic_and_reads_no_clock(monkeypatch) -> None:
    class NoClock(datetime):
        @classmethod
        def now(cls, tz=None):
            raise AssertionError("compute_status read the clock")

        @classmethod
        def utcnow(cls):
            raise AssertionError("compute_status read the clock")

        @classmethod
        def today(cls):
            raise AssertionError("compute_status read the clock")

    for module in STATUS_MODULES:
        if hasattr(module, "datetime"):
            monkeypatch.setattr(module, "datetime", NoClock)
    monkeypatch.setattr("time.time", lambda: (_ for _ in ()).throw(AssertionError("clock")))
    past = datetime(2001, 1, 1, tzinfo=UTC)
    observed = Observed(
        status=RLJobStatus(),
        generation=1,
        now=past,
        progress=ObservedProgress(row(1), past, "/ckpt/checkpoint-1"),
    )
    first = compute_status(spec(), observed)
    assert first == compute_status(spec(), observed)
    assert {c.last_transition_time for c in first.status.conditions} == {past}


def test_the_attempt_is_kept_in_the_status_and_survives_an_operator_restart():
    update = running()
    assert update.status.attempt == update.attempt == 1
    # A restarted operator knows only the stored status: it follows the same attempt's cluster
    # and neither creates a new one nor counts anything.
    restarted = Observed(
        status=RLJobStatus.model_validate(update.status.model_dump()),
        generation=1,
        now=_now_of(update) + timedelta(seconds=30),
        cluster=cluster(1),
        head=running_head(),
        driver=driver(DriverState.RUNNING),
    )
    again = compute_status(spec(), restarted)
    assert (again.phase, again.attempt, again.action) == (Phase.RUNNING, 1, Nothing())
    assert (again.status.restarts, again.status.preemptions) == (0, 0)


# --- The driver's own verdict: an invalid job ----------------------------------------------------


@pytest.mark.parametrize(
    "observed_driver",
    [
        ObservedDriver(DriverState.FAILED, "'CartPol-v1' is not registered", EXIT_INVALID_JOB),
        # A Jobs API without exit codes: the final record says it.
        ObservedDriver(
            DriverState.FAILED, "'CartPol-v1' is not registered", None, Outcome.INVALID_JOB
        ),
    ],
)
def test_a_driver_that_finds_the_job_invalid_fails_it_at_once(observed_driver) -> None:
    job = spec(**{"restartPolicy.maxRestarts": 5})
    update = compute_status(job, on_cluster(running(job), driver=observed_driver))
    assert update.phase == Phase.FAILED
    assert (update.status.restarts, update.attempt) == (0, 1)
    failed = condition(update, ConditionType.FAILED)
    assert (failed.status, failed.reason) == ("True", Reason.INVALID_SPEC)
    assert "the driver found the job invalid: 'CartPol-v1' is not registered" in failed.message
    assert update.action == DeleteCluster(Reason.INVALID_SPEC)
    assert [(e.type, e.reason) for e in update.events] == [("Warning", Reason.INVALID_SPEC)]


def test_a_driver_that_failed_otherwise_is_restarted() -> None:
    failed = ObservedDriver(DriverState.FAILED, "training failed: learner died", EXIT_FAILED)
    update = compute_status(spec(), on_cluster(running(), driver=failed))
    assert (update.phase, update.status.restarts) == (Phase.RESUMING, 1)
    assert update.events[0].reason == Reason.DRIVER_FAILED


# --- The next attempt: on the same cluster or a new one, never beside the last -----------------


def failed_on_its_cluster(job: RLJobSpec, **fields: Any) -> StatusUpdate:
    """A Running job whose driver of attempt 1 just failed, its cluster kept for attempt 2."""
    return compute_status(
        job, on_cluster(running(job), driver=driver(DriverState.FAILED), **fields)
    )


def on_the_same_cluster(update: StatusUpdate, seconds: float, **fields: Any) -> Observed:
    """Attempt 2's observation on attempt 1's cluster, `seconds` after `update`'s newest transition
    (the failure, for `failed_on_its_cluster`)."""
    fields.setdefault("cluster", cluster(1))
    fields.setdefault("head", running_head())
    return after(update, now=_now_of(update) + timedelta(seconds=seconds), **fields)


@pytest.mark.parametrize(
    ("observation", "why"),
    [
        ({"cluster": None}, "the RayCluster is gone"),
        ({"head": ObservedHead(HeadFate.FAILED, "OOMKilled")}, "its head pod was lost"),
        ({"head": ObservedHead(HeadFate.PREEMPTED, "NodeLost")}, "its head pod was preempted"),
        ({"head": running_head("h2")}, "its head pod was replaced"),
        (
            {"stale_spec": ("learner", "image")},
            "spec.learner, spec.image changed since it was built",
        ),
        ({}, None),
        ({"head": None}, None),  # the head pod not listed yet: nothing says it is lost
        ({"cluster": cluster(1, ready=False)}, None),  # coming up: the submission waits for it
    ],
)
def test_only_what_the_cluster_lost_rebuilds_it(observation: dict[str, Any], why) -> None:
    status = RLJobStatus(attempt=1, head_pod_uid="h1")
    fields = {"cluster": cluster(1), "head": running_head("h1")} | observation
    assert rebuild_reason(Observed(status=status, generation=1, now=NOW, **fields)) == why


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        ({"driver": driver(DriverState.FAILED), "stale_spec": ("learner",)}, Reason.DRIVER_FAILED),
        ({"head": ObservedHead(HeadFate.FAILED, "OOMKilled")}, Reason.HEAD_FAILED),
    ],
)
def test_a_failure_the_cluster_cannot_outlive_gets_a_new_cluster(observation, reason) -> None:
    update = compute_status(spec(), on_cluster(running(), **observation))
    assert (update.attempt, update.status.cluster_attempt) == (2, 2)
    assert update.action == DeleteCluster(reason)
    assert "in 30s, on a new Ray cluster (" in update.events[0].message
    # The old cluster is stale from now on, and is deleted until it is gone.
    assert compute_status(spec(), on_cluster(update, cluster=cluster(1))).action == DeleteCluster(
        Reason.STALE_ATTEMPT
    )


def test_an_earlier_driver_still_running_is_stopped_before_the_next_is_submitted() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 30})
    failed = failed_on_its_cluster(job)
    # Stopped during the backoff already...
    waiting = compute_status(job, on_the_same_cluster(failed, 10, earlier_drivers=(1,)))
    assert (waiting.phase, waiting.action) == (Phase.RESUMING, StopDrivers((1,)))
    assert condition(waiting, ConditionType.PROGRESSING).reason == Reason.RESTART_BACKOFF
    # ...and after it, the next attempt starts by stopping it, and says so.
    started = compute_status(job, on_the_same_cluster(failed, 30, earlier_drivers=(1,)))
    assert (started.attempt, started.action) == (2, StopDrivers((1,)))
    progressing = condition(started, ConditionType.PROGRESSING)
    assert (progressing.status, progressing.reason) == ("True", Reason.STOPPING_EARLIER_DRIVER)
    assert progressing.message == (
        "the driver of attempt 1 still runs on the Ray cluster: it is stopped, and attempt 2's "
        "driver is submitted once it has ended"
    )
    still = compute_status(job, on_the_same_cluster(started, 5, earlier_drivers=(1,)))
    assert (still.action, still.events) == (StopDrivers((1,)), ())
    ended = compute_status(job, on_the_same_cluster(started, 6))
    assert (ended.action, ended.events) == (SubmitDriver(2), ())
    assert condition(ended, ConditionType.PROGRESSING).reason == Phase.RESUMING.value


def test_an_earlier_driver_that_does_not_stop_is_waited_for_only_so_long() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 0, "trainer.checkpoint.gracePeriodSeconds": 20})
    bound = driver_stop_seconds(job)
    assert bound == 20 + 15  # the checkpoint grace and Ray's stop margin, as the head's preStop
    started = compute_status(job, on_the_same_cluster(failed_on_its_cluster(job), 0))
    assert started.action == SubmitDriver(2)  # none runs: submitted at once
    within = compute_status(job, on_the_same_cluster(started, bound - 1, earlier_drivers=(1,)))
    assert within.action == StopDrivers((1,))
    past = compute_status(job, on_the_same_cluster(started, bound, earlier_drivers=(1,)))
    assert past.action == SubmitDriver(2)  # the checkpoints are fenced by attempt
    assert [(e.type, e.reason) for e in past.events] == [
        ("Warning", Reason.EARLIER_DRIVER_NOT_STOPPED)
    ]
    assert "did not end within 35s of being stopped" in past.events[0].message


def test_a_head_lost_during_the_backoff_rebuilds_the_cluster_without_counting() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 30})
    failed = failed_on_its_cluster(job)
    lost = ObservedHead(HeadFate.FAILED, "the pod was deleted")
    rebuilt = compute_status(job, on_the_same_cluster(failed, 10, head=lost))
    assert rebuilt.action == DeleteCluster(Reason.STALE_ATTEMPT)
    assert (rebuilt.status.restarts, rebuilt.attempt, rebuilt.status.cluster_attempt) == (1, 2, 2)
    assert condition(rebuilt, ConditionType.PROGRESSING).reason == Reason.RESTART_BACKOFF
    gone = compute_status(job, on_the_same_cluster(rebuilt, 30, cluster=None, head=None))
    assert (gone.action, gone.status.restarts) == (CreateCluster(2), 1)


def test_a_cluster_gone_during_the_backoff_is_created_again_for_the_next_attempt() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 30})
    failed = failed_on_its_cluster(job)
    gone = compute_status(job, on_the_same_cluster(failed, 30, cluster=None, head=None))
    assert (gone.action, gone.status.cluster_attempt) == (CreateCluster(2), 2)
    # The cluster it creates is the job's, not a stale one.
    created = compute_status(job, on_the_same_cluster(gone, 1, cluster=cluster(2)))
    assert created.action == SubmitDriver(2)


def test_retries_on_the_same_cluster_survive_an_operator_restart() -> None:
    job = spec(**{"restartPolicy.backoffSeconds": 0})
    failed = failed_on_its_cluster(job)
    stored = RLJobStatus.model_validate(failed.status.model_dump(mode="json", by_alias=True))
    assert stored.cluster_attempt == 1
    update = compute_status(job, on_the_same_cluster(StatusUpdate(stored), 1))
    assert (update.attempt, update.action) == (2, SubmitDriver(2))


# --- A head pod KubeRay replaced --------------------------------------------------------------


def test_the_head_pod_the_driver_was_submitted_to_is_recorded_per_attempt() -> None:
    job = spec()
    update = compute_status(job, observe())
    assert update.status.head_pod_uid is None
    submitted = compute_status(job, after(update, cluster=cluster(), head=running_head("h1")))
    assert submitted.action == SubmitDriver(1)
    assert submitted.status.head_pod_uid == "h1"
    kept = compute_status(job, on_cluster(submitted, head=running_head("h1")))
    assert (kept.phase, kept.status.head_pod_uid) == (Phase.RUNNING, "h1")

    # The next attempt forgets it, and records its own head with its own submission.
    restarted = compute_status(job, on_cluster(kept, driver=driver(DriverState.FAILED)))
    assert (restarted.attempt, restarted.status.head_pod_uid) == (2, None)


def test_a_head_replaced_under_a_submitted_driver_is_a_restart_not_a_second_submission() -> None:
    first = running()
    assert first.status.head_pod_uid == "head-1"
    # KubeRay recreated the head: the new one is Ready and knows no submission (driver None).
    update = compute_status(spec(), on_cluster(first, head=running_head("head-2"), driver=None))
    assert update.action != SubmitDriver(1)
    assert (update.phase, update.status.restarts, update.attempt) == (Phase.RESUMING, 1, 2)
    assert update.action == DeleteCluster(Reason.HEAD_REPLACED)
    assert update.status.head_pod_uid is None
    warning = update.events[0]
    assert (warning.type, warning.reason) == ("Warning", Reason.HEAD_REPLACED)
    assert "head-1 is now head-2" in warning.message


def test_a_head_replaced_before_any_submission_changes_nothing() -> None:
    job = spec()
    update = compute_status(job, observe())
    waiting = compute_status(
        job, after(update, cluster=cluster(ready=False), head=running_head("h1"))
    )
    replaced = compute_status(job, after(waiting, cluster=cluster(), head=running_head("h2")))
    assert replaced.action == SubmitDriver(1)
    assert (replaced.status.restarts, replaced.status.head_pod_uid) == (0, "h2")


# --- activeDeadlineSeconds counts from the job's start ------------------------------------------


def test_a_job_stuck_provisioning_reaches_its_deadline() -> None:
    job = spec(activeDeadlineSeconds=300)
    update = compute_status(job, observe())
    assert update.status.start_time == NOW
    stuck = compute_status(job, after(update, seconds=299, attempt=1, cluster=cluster(ready=False)))
    assert stuck.phase == Phase.PROVISIONING
    past = compute_status(job, after(update, seconds=300, cluster=cluster(ready=False)))
    assert past.phase == Phase.FAILED
    failed = condition(past, ConditionType.FAILED)
    assert failed.reason == Reason.DEADLINE_EXCEEDED
    assert "activeDeadlineSeconds 300" in failed.message
    assert past.action == DeleteCluster(Reason.DEADLINE_EXCEEDED)


def test_the_deadline_stops_while_suspended_and_restarts_on_resume() -> None:
    job = spec(activeDeadlineSeconds=300)
    suspended = compute_status(
        spec(activeDeadlineSeconds=300, suspend=True), on_cluster(running(job))
    )
    assert suspended.phase == Phase.SUSPENDED
    later = NOW + timedelta(hours=1)
    still = compute_status(
        spec(activeDeadlineSeconds=300, suspend=True), after(suspended, now=later)
    )
    assert still.phase == Phase.SUSPENDED
    resumed = compute_status(job, after(still, now=later))
    assert (resumed.phase, resumed.status.start_time) == (Phase.RESUMING, later)
    within = compute_status(job, after(resumed, now=later + timedelta(seconds=299)))
    assert within.phase == Phase.RESUMING


# --- A driver waiting for its rollout workers' nodes --------------------------------------------


def test_a_driver_waiting_for_its_workers_keeps_the_job_provisioning_and_says_so() -> None:
    job = spec()
    update = compute_status(job, observe())
    submitted = compute_status(job, after(update, cluster=cluster(), head=running_head()))
    waiting = compute_status(
        job, on_cluster(submitted, driver=driver(DriverState.RUNNING), driver_waiting_s=42.0)
    )
    assert waiting.phase == Phase.PROVISIONING
    progressing = condition(waiting, ConditionType.PROGRESSING)
    assert (progressing.status, progressing.reason) == ("True", Reason.WAITING_FOR_WORKERS)
    assert "rollout workers" in progressing.message
    assert condition(waiting, ConditionType.READY).status == "False"
    assert waiting.events == ()

    still = compute_status(job, on_cluster(waiting, driver_waiting_s=84.0))
    assert still.status == waiting.status  # nothing to write while the wait goes on

    joined = compute_status(job, on_cluster(still, driver_waiting_s=0.0))
    assert joined.phase == Phase.RUNNING
    assert [(e.type, e.reason) for e in joined.events] == [("Normal", "DriverRunning")]


# --- Pods the scheduler cannot place ------------------------------------------------------------

NO_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)
NO_MATCH = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
HEAD_STUCK = UnschedulablePods(HEAD_GROUP, 1, NO_GPU)


def test_unschedulable_pods_are_said_once_per_message_until_they_are_scheduled() -> None:
    job = spec()
    update = compute_status(job, observe())
    stuck = compute_status(
        job, after(update, cluster=cluster(ready=False), unschedulable=(HEAD_STUCK,))
    )
    assert stuck.phase == Phase.PROVISIONING  # it waits: a node may still come (an autoscaler)
    schedulable = condition(stuck, ConditionType.SCHEDULABLE)
    head_message = f"the head pod cannot be scheduled: {NO_GPU}"
    assert (schedulable.status, schedulable.reason) == ("False", Reason.UNSCHEDULABLE)
    assert schedulable.message == head_message
    assert stuck.events == (KubeEvent("Warning", Reason.UNSCHEDULABLE, head_message),)

    # Every poll sees the same: nothing to write, no second Event.
    again = compute_status(
        job, after(stuck, cluster=cluster(ready=False), unschedulable=(HEAD_STUCK,))
    )
    assert again.status == stuck.status and again.events == ()

    # The workers cannot be placed either: a new message, one more Event, naming each group.
    workers = UnschedulablePods("rollout", 2, NO_MATCH)
    both = compute_status(
        job, after(again, cluster=cluster(ready=False), unschedulable=(HEAD_STUCK, workers))
    )
    message = f"{head_message}; 2 pods of worker group rollout cannot be scheduled: {NO_MATCH}"
    assert condition(both, ConditionType.SCHEDULABLE).message == message
    assert both.events == (KubeEvent("Warning", Reason.UNSCHEDULABLE, message),)
    assert condition(both, ConditionType.SCHEDULABLE).last_transition_time == NOW + timedelta(
        seconds=10
    )  # the status stayed False: it moves only when the status does

    scheduled = compute_status(job, after(both, seconds=60, cluster=cluster(ready=False)))
    cleared = condition(scheduled, ConditionType.SCHEDULABLE)
    assert (cleared.status, cleared.reason, cleared.message) == (
        "True",
        Reason.NO_UNSCHEDULABLE_PODS,
        "",
    )
    assert scheduled.events == () and scheduled.phase == Phase.PROVISIONING


def test_one_unschedulable_worker_is_named_as_one_pod() -> None:
    one = UnschedulablePods("rollout-on-demand", 1, NO_MATCH)
    assert one.describe() == (
        f"1 pod of worker group rollout-on-demand cannot be scheduled: {NO_MATCH}"
    )


def test_a_running_job_short_of_schedulable_workers_keeps_running_and_says_so() -> None:
    job = spec()
    update = compute_status(
        job, on_cluster(running(job), unschedulable=(UnschedulablePods("rollout", 1, NO_MATCH),))
    )
    assert update.phase == Phase.RUNNING
    assert condition(update, ConditionType.SCHEDULABLE).status == "False"
    assert [e.reason for e in update.events] == [Reason.UNSCHEDULABLE]


def test_a_job_never_scheduled_still_reaches_its_deadline_and_then_stops_saying_so() -> None:
    job = spec(activeDeadlineSeconds=300)
    update = compute_status(job, observe())
    stuck = compute_status(
        job, after(update, cluster=cluster(ready=False), unschedulable=(HEAD_STUCK,))
    )
    assert condition(stuck, ConditionType.SCHEDULABLE).status == "False"
    past = compute_status(
        job,
        after(stuck, seconds=290, cluster=cluster(ready=False), unschedulable=(HEAD_STUCK,)),
    )
    assert past.phase == Phase.FAILED
    assert condition(past, ConditionType.FAILED).reason == Reason.DEADLINE_EXCEEDED
    # The cluster is deleted: what its pods lack no longer matters.
    assert condition(past, ConditionType.SCHEDULABLE).status == "True"
    assert [e.reason for e in past.events] == [Reason.DEADLINE_EXCEEDED]


# --- Every event, from an observation -----------------------------------------------------------


@dataclass(frozen=True)
class EventScenario:
    """A job and an observation that `compute_status` must read as one PhaseEvent, and what that
    event implies: the Event emitted for the transition, one condition, the next action."""

    observe: Callable[[], tuple[RLJobSpec, Observed]]
    event: tuple[str, str]
    """The transition's Kubernetes Event: (type, reason)."""
    condition: tuple[str, str, str]
    """(type, status, reason) of the condition the event sets."""
    action: Any


def submitted_in_provisioning() -> StatusUpdate:
    """Attempt 1's driver submitted to its ready cluster; the phase is still Provisioning."""
    update = compute_status(spec(), observe())
    return compute_status(spec(), after(update, cluster=cluster(), head=running_head()))


def workers_preempted() -> StatusUpdate:
    """A Running job that lost one rollout worker (Preempted, the same attempt going on)."""
    return compute_status(
        spec(), on_cluster(running(), disrupted_workers=frozenset({"pod-a"}), workers_short=1)
    )


def deadline_passed() -> tuple[RLJobSpec, Observed]:
    job = spec(activeDeadlineSeconds=600)
    return job, on_cluster(running(job), seconds=600)


# One scenario per PhaseEvent (the keys must be every member, see the test below): a new event
# without an observation that leads to it fails here, not in production.
EVENT_SCENARIOS: dict[PhaseEvent, EventScenario] = {
    E.START: EventScenario(
        lambda: (spec(), observe()),
        event=("Normal", Reason.PROVISIONING),
        condition=(ConditionType.PROGRESSING, "True", Phase.PROVISIONING.value),
        action=CreateCluster(1),
    ),
    E.DRIVER_RUNNING: EventScenario(
        lambda: (spec(), on_cluster(submitted_in_provisioning())),
        event=("Normal", Reason.DRIVER_RUNNING),
        condition=(ConditionType.READY, "True", Reason.DRIVER_RUNNING),
        action=Nothing(),
    ),
    E.HEAD_PREEMPTED: EventScenario(
        lambda: (spec(), head_preempted(running())),
        event=("Warning", Reason.HEAD_PREEMPTED),
        condition=(ConditionType.PREEMPTED, "True", Reason.HEAD_PREEMPTED),
        action=DeleteCluster(Reason.HEAD_PREEMPTED),
    ),
    E.NEW_ATTEMPT: EventScenario(
        # The preempted attempt's cluster is gone: the next one is requested.
        lambda: (spec(), after(compute_status(spec(), head_preempted(running())))),
        event=("Normal", Reason.RESUMING),
        condition=(ConditionType.PROGRESSING, "True", Phase.RESUMING.value),
        action=CreateCluster(2),
    ),
    E.RESTART: EventScenario(
        lambda: (spec(), on_cluster(running(), driver=driver(DriverState.FAILED, "boom"))),
        event=("Warning", Reason.DRIVER_FAILED),
        condition=(ConditionType.PROGRESSING, "False", Reason.RESTART_BACKOFF),
        action=Requeue(30),  # on the same cluster, after the backoff
    ),
    E.SUCCEEDED: EventScenario(
        lambda: (spec(), on_cluster(running(), driver=driver(DriverState.SUCCEEDED, "done"))),
        event=("Normal", Reason.DRIVER_SUCCEEDED),
        condition=(ConditionType.COMPLETE, "True", Reason.DRIVER_SUCCEEDED),
        action=DeleteCluster(Reason.FINISHED),
    ),
    E.FAIL: EventScenario(
        deadline_passed,
        event=("Warning", Reason.DEADLINE_EXCEEDED),
        condition=(ConditionType.FAILED, "True", Reason.DEADLINE_EXCEEDED),
        action=DeleteCluster(Reason.DEADLINE_EXCEEDED),
    ),
    E.SUSPEND: EventScenario(
        lambda: (spec(suspend=True), on_cluster(running())),
        event=("Normal", Reason.SUSPENDED),
        condition=(ConditionType.SUSPENDED, "True", Reason.SUSPENDED),
        action=DeleteCluster(Reason.SUSPENDED),
    ),
    E.UNSUSPEND: EventScenario(
        lambda: (spec(), after(compute_status(spec(suspend=True), observe()))),
        event=("Normal", Reason.RESUMING),
        condition=(ConditionType.SUSPENDED, "False", Reason.NOT_SUSPENDED),
        action=CreateCluster(1),
    ),
    E.WORKERS_PREEMPTED: EventScenario(
        lambda: (
            spec(),
            on_cluster(running(), disrupted_workers=frozenset({"pod-a"}), workers_short=1),
        ),
        event=("Warning", Reason.WORKER_PREEMPTED),
        condition=(ConditionType.PREEMPTED, "True", Reason.WORKER_PREEMPTED),
        action=Nothing(),
    ),
    E.WORKERS_REFILLED: EventScenario(
        # KubeRay has replaced the lost worker: none short any more.
        lambda: (spec(), on_cluster(workers_preempted(), workers_short=0)),
        event=("Normal", Reason.WORKERS_REFILLED),
        condition=(ConditionType.PREEMPTED, "False", Reason.NOT_PREEMPTED),
        action=Nothing(),
    ),
}


def test_every_phase_event_has_an_observation_that_leads_to_it() -> None:
    assert set(EVENT_SCENARIOS) == set(PhaseEvent)


@pytest.mark.parametrize("event", list(PhaseEvent))
def test_compute_status_emits_each_phase_event_and_takes_its_transition(
    event: PhaseEvent, monkeypatch
) -> None:
    scenario = EVENT_SCENARIOS[event]
    job, observed = scenario.observe()
    before = observed.status.phase or Phase.PENDING
    assert (before, event) in TRANSITIONS  # the scenario starts where the event moves the phase

    # The events compute_status hands the one transition function, recorded on the way through:
    # the phase alone cannot tell an event from another one that ends in the same phase.
    handed: list[PhaseEvent | None] = []

    def recording_next_phase(current: Phase | None, given: PhaseEvent | None) -> Phase:
        handed.append(given)
        return next_phase(current, given)

    monkeypatch.setattr(kuberl_operator.status.compute, "next_phase", recording_next_phase)
    update = compute_status(job, observed)

    assert handed == [event]
    assert update.phase == TRANSITIONS[before, event]
    assert [(e.type, e.reason) for e in update.events] == [scenario.event]
    type_, status, reason = scenario.condition
    set_by_the_event = condition(update, type_)
    assert (set_by_the_event.status, set_by_the_event.reason) == (status, reason)
    assert update.action == scenario.action
