"""The explicit ports of the tests' Ray nodes never repeat, even when the kernel hands the same
free port out twice in a row (it did, and Ray refused the node: two components on one port)."""

import itertools

import rayhead


def test_node_ports_are_distinct_and_clear_of_the_worker_range(monkeypatch):
    repeating = itertools.chain([47543, 47543, 47543], itertools.count(47544))
    monkeypatch.setattr(rayhead, "free_port", lambda: next(repeating))
    taken = {47544}  # another node's
    ports = rayhead.node_ports(head=True, taken=taken)
    dashboard = rayhead.unused_port(taken)

    named = [port for name, port in ports.items() if not name.endswith("worker-port")]
    assert len(set(named)) == len(named) == len(rayhead.NODE_PORTS) + len(rayhead.HEAD_PORTS)
    assert 47544 not in named and dashboard not in named
    workers = range(ports["min-worker-port"], ports["max-worker-port"] + 1)
    assert not any(port in workers for port in [*named, dashboard, 47544])
    assert set(named) | set(workers) | {dashboard} <= taken
