"""Ray's draining nodes as the driver reads them (rollouts/node_drain.py), and the command the
operator has run on the head to drain a pod's node (kuberl_contract.drain). The real drain, on a
multi-node Ray, is in test_elastic_fleet.py."""

import json
import math
import shlex

import pytest

from kuberl_contract.drain import DRAIN_MODULE, checkpoint_now_entrypoint, drain_entrypoint
from kuberl_trainer.rollouts.node_drain import DrainWatch, OwnNodeDrain, until


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_workers_on_a_draining_node_are_named_once_their_nodes_are_known():
    draining: dict[str, float] = {}
    nodes = {"a": "node-1", "b": "node-2", "c": None}  # c not placed yet
    clock = Clock()
    watch = DrainWatch(lambda: draining, lambda handle: nodes[handle], clock)
    for index, handle in ((1, "a"), (2, "b"), (3, "c")):
        watch.placed(index, handle)
    assert watch.on_draining_nodes([1, 2, 3]) == []  # nothing drains
    draining["node-2"] = math.inf
    assert watch.on_draining_nodes([1, 2, 3]) == []  # not looked at again before LOOK_S
    clock.now += DrainWatch.LOOK_S
    assert watch.on_draining_nodes([1, 2, 3]) == [2]
    nodes["c"] = "node-2"  # placed since, on the draining node
    clock.now += DrainWatch.LOOK_S
    assert watch.on_draining_nodes([1, 3]) == [3]
    watch.forget(3)
    watch.placed(3, "a")  # its replacement, elsewhere
    clock.now += DrainWatch.LOOK_S
    assert watch.on_draining_nodes([1, 3]) == []


def test_the_driver_hears_once_that_its_own_node_drains_and_once_of_each_notice():
    draining: dict[str, float] = {}
    notice: list[bytes | None] = [None]
    clock = Clock()
    own = OwnNodeDrain(lambda: draining, lambda: "head", lambda: notice[0], clock)
    assert own.begun() is None
    draining["head"] = 1234.0
    clock.now += DrainWatch.LOOK_S
    assert own.begun() == 1234.0
    clock.now += DrainWatch.LOOK_S
    assert own.begun() is None  # said once: one checkpoint, then training goes on
    notice[0] = json.dumps({"deadline": 99.0, "reason": "tainted"}).encode()
    assert own.begun() is None  # not before LOOK_S
    clock.now += DrainWatch.LOOK_S
    assert own.begun() == 99.0  # the operator's notice for the head
    clock.now += DrainWatch.LOOK_S
    assert own.begun() is None


def test_without_ray_running_nothing_is_asked():
    def never():
        pytest.fail("asked Ray's control service without Ray running")

    assert OwnNodeDrain(never, lambda: None, never).begun() is None


def test_a_deadline_in_words():
    assert until(math.inf) == "no deadline given"
    assert until(0.0) == "deadline in 0 s"


def test_the_drain_command_names_the_module_the_nodes_and_the_deadline():
    command = drain_entrypoint(["10.0.0.7", "fd00::3"], 30, "DisruptionTarget: it's evicted")
    assert shlex.split(command) == [
        "python",
        "-m",
        DRAIN_MODULE,
        "--deadline-seconds=30",
        "--reason=DisruptionTarget: it's evicted",
        "10.0.0.7",
        "fd00::3",
    ]


def test_the_head_is_told_to_checkpoint_not_drained():
    command = checkpoint_now_entrypoint(25, "node n1 is tainted")
    assert shlex.split(command) == [
        "python",
        "-m",
        DRAIN_MODULE,
        "--deadline-seconds=25",
        "--reason=node n1 is tainted",
        "--checkpoint-now",
    ]


@pytest.mark.parametrize(
    "ips, deadline, message",
    [
        ([], 30, "node_ips: name at least one"),
        (["10.0.0.7; rm -rf /"], 30, "does not appear to be an IPv4 or IPv6 address"),
        (["10.0.0.7"], -1, "deadline_s: -1"),
    ],
)
def test_the_drain_command_refuses_what_is_not_an_address_or_a_deadline(ips, deadline, message):
    with pytest.raises(ValueError, match=message):
        drain_entrypoint(ips, deadline, "why")
