"""The learner-driven autoscaling of an elastic fleet (status/autoscale.py), from the learner's
figures the driver's metrics serve: more workers for a learner that waits for data, fewer for one
that drops batches or is saturated, within the bounds, and not more often than it settles."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from test_status import on_cluster, running, spec

from kuberl_operator.observe import learner_load_from_metrics
from kuberl_operator.spec import Phase, RLJobSpec, RLJobStatus
from kuberl_operator.status import LearnerLoad, compute_status

WORKERS = {"replicas": 4, "minReplicas": 2, "maxReplicas": 16, "autoscaling": {}}
IMPALA = {"algorithm": "IMPALA", "env": "CartPole-v1", "stop": {"timesteps": 1000}}


def impala(**workers: Any) -> RLJobSpec:
    return spec(trainer=IMPALA, rolloutWorkers=WORKERS | workers)


def scaled(job: RLJobSpec, load: LearnerLoad, **status: Any):
    """The update of a running job's next poll, its learner reporting `load`."""
    previous = running(job)
    observed = on_cluster(previous, learner_load=load)
    if status:
        fields = RLJobStatus.model_validate(status)  # camelCase, as the status is written
        updated = {name: getattr(fields, name) for name in fields.model_fields_set}
        observed = replace(observed, status=observed.status.model_copy(update=updated))
    return compute_status(job, observed)


def test_a_learner_waiting_for_data_gets_workers_in_proportion():
    update = scaled(
        impala(), LearnerLoad(utilisation=0.4, policy_lag_max=2, stale_batches_dropped=0)
    )
    assert update.phase == Phase.RUNNING
    assert update.scale_to == 8  # 4 x 0.8 / 0.4
    [event] = [e for e in update.events if e.reason == "ScaledUp"]
    assert event.message == (
        "the learner waits for data (busy 40%, target 80%, policy lag 2): 4 -> 8 rollout workers"
    )
    assert update.status.autoscaled.last_scale_time is not None


def test_growth_stops_at_max_replicas_and_where_the_lag_has_no_room():
    idle = LearnerLoad(utilisation=0.01, policy_lag_max=1, stale_batches_dropped=0)
    assert scaled(impala(), idle).scale_to == 16
    lagging = LearnerLoad(utilisation=0.4, policy_lag_max=32, stale_batches_dropped=0)
    assert scaled(impala(), lagging).scale_to is None  # maxPolicyLag 32 reached
    at_most = impala(replicas=16)
    assert scaled(at_most, idle).scale_to is None


def test_dropped_batches_or_a_saturated_learner_shrink_the_fleet_to_min_replicas_at_least():
    dropping = LearnerLoad(utilisation=0.6, policy_lag_max=30, stale_batches_dropped=7)
    update = scaled(impala(replicas=8), dropping, autoscaled={"staleBatchesDropped": 5})
    assert update.scale_to == 6
    assert [e.message for e in update.events if e.reason == "ScaledDown"] == [
        "2 batch(es) dropped as too stale (busy 60%): 8 -> 6 rollout workers"
    ]
    assert update.status.autoscaled.stale_batches_dropped == 7
    saturated = LearnerLoad(utilisation=0.99, policy_lag_max=3, stale_batches_dropped=0)
    assert scaled(impala(replicas=3), saturated).scale_to == 2  # minReplicas
    assert scaled(impala(replicas=2), saturated).scale_to is None


def test_drops_seen_before_do_not_count_again():
    seen = LearnerLoad(utilisation=0.85, policy_lag_max=3, stale_batches_dropped=5)
    assert scaled(impala(), seen, autoscaled={"staleBatchesDropped": 5}).scale_to is None


def test_no_change_within_the_stabilization_window():
    starving = LearnerLoad(utilisation=0.2, policy_lag_max=1, stale_batches_dropped=0)
    first = scaled(impala(), starving)
    assert first.scale_to == 16
    changed_at = first.status.autoscaled.last_scale_time
    again = on_cluster(first, seconds=30, learner_load=starving)
    assert compute_status(impala(replicas=16), again).status.autoscaled.last_scale_time == (
        changed_at
    )
    dropping = LearnerLoad(utilisation=0.99, policy_lag_max=40, stale_batches_dropped=3)
    within = on_cluster(first, seconds=30, learner_load=dropping)
    assert compute_status(impala(replicas=16), within).scale_to is None
    after = replace(within, now=changed_at + timedelta(seconds=61))
    assert compute_status(impala(replicas=16), after).scale_to == 12


def test_without_autoscaling_or_a_report_nothing_changes():
    waiting = LearnerLoad(utilisation=0.1, policy_lag_max=1, stale_batches_dropped=0)
    fixed = impala(autoscaling=None)
    update = scaled(fixed, waiting)
    assert (update.scale_to, update.status.autoscaled) == (None, None)
    assert scaled(impala(), None).scale_to is None


def test_autoscaling_needs_bounds_and_a_learner_thread():
    with pytest.raises(ValidationError, match="set both"):
        spec(trainer=IMPALA, rolloutWorkers={"replicas": 4, "autoscaling": {}})
    with pytest.raises(ValidationError, match="SyncSamples has none"):
        spec(rolloutWorkers=WORKERS)  # PPO: SyncSamples


def test_the_learner_load_is_read_from_the_drivers_metrics():
    text = (
        "# TYPE kuberl_learner_utilisation gauge\nkuberl_learner_utilisation 0.42\n"
        "# TYPE kuberl_policy_lag_max gauge\nkuberl_policy_lag_max 3.0\n"
        "# TYPE kuberl_stale_batches_dropped counter\nkuberl_stale_batches_dropped_total 7.0\n"
    )
    assert learner_load_from_metrics(text) == LearnerLoad(0.42, 3.0, 7)
    assert learner_load_from_metrics("# TYPE kuberl_policy_lag_max gauge\n") is None
