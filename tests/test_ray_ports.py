"""The explicit ports of the tests' Ray nodes never repeat, even when the same port is drawn
twice in a row (the kernel once handed one out twice, and Ray refused the node: two components
on one port), and they come from below the kernel's ephemeral range, which every other server
and connection of the tests draws from while a node is still opening its ports."""

import itertools

import rayhead


def test_node_ports_are_distinct_and_clear_of_the_worker_range(monkeypatch):
    low = rayhead.RAY_PORTS.start
    repeating = itertools.chain([low + 3, low + 3, low + 3], itertools.count(low + 4))
    monkeypatch.setattr(rayhead.random, "randrange", lambda *_: next(repeating))
    monkeypatch.setattr(rayhead, "bindable", lambda port: True)
    taken = {low + 4}  # another node's
    ports = rayhead.node_ports(head=True, taken=taken)
    dashboard = rayhead.unused_port(taken)

    named = [port for name, port in ports.items() if not name.endswith("worker-port")]
    assert len(set(named)) == len(named) == len(rayhead.NODE_PORTS) + len(rayhead.HEAD_PORTS)
    assert low + 4 not in named and dashboard not in named
    workers = range(ports["min-worker-port"], ports["max-worker-port"] + 1)
    assert not any(port in workers for port in [*named, dashboard, low + 4])
    assert set(named) | set(workers) | {dashboard} <= taken


def test_node_ports_are_below_the_ephemeral_range_and_free():
    taken: set[int] = set()
    ports = rayhead.node_ports(head=True, taken=taken)
    ephemeral = rayhead.ephemeral_ports()
    assert all(port < ephemeral.start and port >= 1024 for port in ports.values())
    assert all(rayhead.bindable(port) for port in ports.values())
